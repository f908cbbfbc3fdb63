"""The report's pictures: matplotlib drawn to inline SVG (no script, no network).

Boxes and axes stay vector; the per-row points are rasterised into the SVG, so a 30,000-
row screen is one image inside the plot instead of 30,000 SVG elements.
"""

from __future__ import annotations

import io
import math
import random
from typing import List, Optional, Sequence, Tuple

from zlbench.report import ReportUnavailable
from zlbench.summary.verdict import THROTTLED_LABEL


def pyplot():
    try:
        import matplotlib
    except ImportError:
        raise ReportUnavailable("matplotlib") from None
    matplotlib.use("Agg")  # files only; never open a window
    import matplotlib.pyplot as plt

    return plt


def _svg(fig) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", dpi=96)
    text = buf.getvalue()
    # The page embeds the <svg> element itself: drop the XML prolog and doctype.
    return text[text.index("<svg") :]


def _plain_log_ticks(ax) -> None:
    """Ticks read 0.5, 1, 2 rather than 5x10^-1; minor ticks are labelled only when the
    axis spans less than a decade (else they crowd)."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    plain = FuncFormatter(lambda v, _: f"{v:g}")
    ax.xaxis.set_major_formatter(plain)
    lo, hi = ax.get_xlim()
    if hi / lo < 4:
        # Less than a decade around 1 (an A/B): log minor ticks label only one side of 1.
        nice = [0.25, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1, 1.1, 1.25, 1.5, 1.75, 2, 2.5, 3, 4]
        ticks = [t for t in nice if lo <= t <= hi]
        if len(ticks) >= 3:
            ax.set_xticks(ticks)
            ax.xaxis.set_major_formatter(plain)
            ax.xaxis.set_minor_formatter(NullFormatter())
            return
    decades = [10.0**k for k in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)]
    if sum(1 for d in decades if lo <= d <= hi) < 3 and hi / lo >= 12:
        # One or two powers of ten in view: label 1, 2 and 5 of each decade instead.
        from matplotlib.ticker import LogLocator

        ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_major_formatter(plain)
        ax.xaxis.set_minor_formatter(NullFormatter())
        return
    ax.xaxis.set_minor_formatter(plain if hi / lo < 12 else NullFormatter())
    ax.tick_params(axis="x", which="minor", labelsize=7)


# A/B points by verdict: the plot shows the same classification as the table and cards.
VERDICT_COLOURS = {
    "SLOWER": "tab:red",
    "FASTER": "tab:green",
    "SAME": "0.55",
    THROTTLED_LABEL: "tab:orange",
    "UNKNOWN": "tab:purple",
}


def distribution_svg(
    groups: Sequence[Tuple[str, List[float]]],
    xlabel: str,
    parity_label: str,
    tags: Optional[Sequence[Sequence[str]]] = None,
) -> str:
    """One horizontal box per group on a log axis, every value drawn as a point; with
    ``tags`` (one per value, a verdict), each point coloured by its tag."""
    plt = pyplot()
    keep = [i for i, (_, vals) in enumerate(groups) if vals]
    tags = [list(tags[i]) for i in keep] if tags else None
    groups = [groups[i] for i in keep]
    fig, ax = plt.subplots(figsize=(10, 1.4 + 0.38 * max(len(groups), 1)))
    ax.set_xscale("log")
    ax.axvline(1.0, color="0.35", linewidth=0.9, label=parity_label, zorder=1)
    if groups:
        # Top to bottom in the order given: matplotlib counts y from the bottom.
        ordered = list(reversed(groups))
        data = [vals for _, vals in ordered]
        median_colour = "0.1" if tags else "tab:orange"
        try:
            ax.boxplot(
                data,
                orientation="horizontal",
                showfliers=False,
                widths=0.6,
                medianprops={"color": median_colour, "linewidth": 1.6},
            )
        except TypeError:  # matplotlib < 3.10 knows only vert=
            ax.boxplot(
                data,
                vert=False,
                showfliers=False,
                widths=0.6,
                medianprops={"color": median_colour, "linewidth": 1.6},
            )
        rng = random.Random(0)  # the same jitter every time: pages diff cleanly
        xs: List[float] = []
        ys: List[float] = []
        point_tags: List[str] = []
        ordered_tags = list(reversed(tags)) if tags else [[""] * len(v) for v in data]
        for y, (vals, vtags) in enumerate(zip(data, ordered_tags), 1):
            xs += vals
            ys += [y + rng.uniform(-0.22, 0.22) for _ in vals]
            point_tags += list(vtags)
        if tags:
            for tag, colour in VERDICT_COLOURS.items():
                idx = [i for i, t in enumerate(point_tags) if t == tag]
                if idx:
                    ax.scatter(
                        [xs[i] for i in idx],
                        [ys[i] for i in idx],
                        s=16,
                        alpha=0.8,
                        color=colour,
                        linewidths=0,
                        zorder=3,
                        rasterized=True,
                        label=f"{tag} ({len(idx)})",
                    )
        else:
            ax.scatter(xs, ys, s=12, alpha=0.6, color="tab:blue", linewidths=0, zorder=3, rasterized=True)
        ax.set_yticks(range(1, len(ordered) + 1))
        ax.set_yticklabels([f"{name} ({len(vals)})" for name, vals in ordered])
        lo, hi = min(xs), max(xs)
        pad = max(math.log10(hi / lo) * 0.05, 0.05) if lo > 0 else 0.05
        ax.set_xlim(lo / 10**pad, hi * 10**pad)
    else:
        ax.text(0.5, 0.5, "no measured rows", transform=ax.transAxes, ha="center")
    ax.set_xlabel(xlabel)
    _plain_log_ticks(ax)
    ax.grid(axis="x", which="major", color="0.85", linewidth=0.6)
    # Outside the axes: the legend never hides points.
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small", frameon=False)
    fig.tight_layout()
    text = _svg(fig)
    plt.close(fig)
    return text


def history_svg(
    title: str,
    nights: Sequence[str],
    series: Sequence[Tuple[str, List[Optional[float]]]],
    steps: Sequence[Tuple[int, str]],
) -> str:
    """Latency index of one operator over nights, one line per caliber; steps marked."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(4.4, 2.3))
    x = list(range(len(nights)))
    for label, values in series:
        pts = [(i, v) for i, v in zip(x, values) if v is not None]
        if pts:
            ax.plot(
                [p[0] for p in pts], [p[1] for p in pts], marker="o", markersize=3, linewidth=1.2, label=label
            )
    for i, text in steps:
        ax.axvline(i - 0.5, color="tab:red", linewidth=1, linestyle="--")
        ax.annotate(
            text,
            (i - 0.5, 1),
            xycoords=("data", "axes fraction"),
            fontsize=7,
            color="tab:red",
            ha="left",
            va="top",
            rotation=90,
        )
    ax.set_title(title, fontsize=9)
    ax.set_xticks(x)
    ax.set_xticklabels(nights, rotation=30, ha="right", fontsize=6)
    ax.set_ylabel("latency / its median", fontsize=7)
    ax.tick_params(axis="y", labelsize=7)
    if len(series) > 1:
        ax.legend(fontsize=6)
    fig.tight_layout()
    text = _svg(fig)
    plt.close(fig)
    return text

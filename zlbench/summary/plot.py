"""`--plot FILE.png`: the per-row gain distribution of each operator (needs matplotlib)."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List

from zlbench.summary.ab import ABResult, GainRange, PairedRow

MAX_OPS = 40


class PlotUnavailable(Exception):
    pass


def pyplot():
    """matplotlib.pyplot, or PlotUnavailable saying how to install it."""
    try:
        import matplotlib
    except ImportError:
        raise PlotUnavailable(
            "--plot needs matplotlib, which is not installed: pip install 'zlbench[plot]' "
            "(or pip install matplotlib), or leave out --plot"
        ) from None
    matplotlib.use("Agg")  # files only; never open a window
    import matplotlib.pyplot as plt

    return plt


def _ops_to_draw(ranges: List[GainRange], limit: int) -> List[str]:
    """Operators by median gain; past ``limit``, the lowest and highest halves."""
    # Stable sort on the medians the tables print, so the picture agrees with them.
    ordered = [r.name for r in sorted(ranges, key=lambda r: r.median)]
    if len(ordered) <= limit:
        return ordered
    return ordered[: limit // 2] + ordered[-(limit - limit // 2) :]


def plot_gains(result: ABResult, path: Path, max_ops: int = MAX_OPS) -> None:
    plt = pyplot()
    by_op: Dict[str, List[PairedRow]] = {}
    for pair in result.pairs:
        by_op.setdefault(pair.a.op, []).append(pair)
    ops = _ops_to_draw(result.by_op, max_ops)
    fig, ax = plt.subplots(figsize=(9, 1.5 + 0.32 * max(len(ops), 1)))
    if result.noise_p95 is not None:
        p95 = result.noise_p95 * 100
        ax.axvspan(-p95, p95, color="0.92", label=f"p95 |gain| of this pair ({p95:.1f}%)")
    ax.axvline(0, color="0.4", linewidth=0.8)
    if ops:
        data = [[p.gain * 100 for p in by_op[op]] for op in ops]
        try:
            ax.boxplot(data, orientation="horizontal", showfliers=False, widths=0.6)
        except TypeError:  # matplotlib < 3.10 knows only vert=
            ax.boxplot(data, vert=False, showfliers=False, widths=0.6)
        for y, op in enumerate(ops, 1):
            for fallback in (False, True):
                xs = [p.gain * 100 for p in by_op[op] if p.fallback == fallback]
                if xs:
                    ax.scatter(
                        xs,
                        [y] * len(xs),
                        s=10,
                        zorder=3,
                        color="tab:red" if fallback else "tab:blue",
                        marker="x" if fallback else "o",
                    )
        ax.set_yticks(range(1, len(ops) + 1))
        ax.set_yticklabels(ops)
        if any(p.fallback for p in result.pairs):
            ax.scatter([], [], color="tab:red", marker="x", label="direct-timer fallback row")
    shown = (
        f"{len(ops)} of {len(by_op)} operators (lowest and highest median gain)"
        if len(ops) < len(by_op)
        else f"{len(ops)} operators"
    )
    ax.set_title(f"B's gain over A per row, {shown}; {len(result.pairs)} paired rows")
    ax.set_xlabel("gain % (A ms / B ms - 1; positive: B faster)")
    ax.legend(loc="lower right", fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)

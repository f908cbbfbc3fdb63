"""What the report page shows, as plain data: built from summary's Summary and ABResult
(no second parser), rendered by page.py. Nothing here imports Jinja2 or matplotlib.

Rows travel to the page as one JSON blob of columns and value arrays; the page's script
sorts, filters and pages them, so a 30,000-row nightly screen is never 30,000 DOM rows.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from zlbench import backends, rundir
from zlbench.batch.state import tail_lines
from zlbench.corpus.families import Families
from zlbench.rundir import BAD, NOT_RUN, STATUSES
from zlbench.runlog import Row
from zlbench.summary.ab import ABResult
from zlbench.summary.caliber import batch_caliber
from zlbench.summary.render import screen_state, unfinished_what
from zlbench.summary.render_ab import GAIN_NOTE, caliber_lines, own_floor_note, verdict_lines
from zlbench.summary.rows import Summary, summary_families
from zlbench.summary.sources import missing_run_dirs
from zlbench.summary.status import operator_statuses
from zlbench.summary.tables import compact_shape, marker_brief
from zlbench.summary.verdict import FASTER, SAME, SLOWER, THROTTLED_LABEL, UNKNOWN

# Lines of an operator's last attempt log shown under a failure.
TAIL_LINES = 40
VERSION_KEYS = (
    "flag_gems",
    "triton",
    "torch",
    "python",
    "pytest",
    "corpus",
    "flagtree",
    *backends.union("torch_extensions"),
)


@dataclass
class Column:
    key: str
    label: str
    # "text", "num" (a float shown with `digits`), "pct" (a ratio - 1 shown as +x.x%),
    # "spread" (a relative half-width shown as ±x.x%)
    kind: str = "text"
    digits: int = 4
    title: str = ""
    # How the page colours a cell: "ratio" (vs 1), "sign" (vs 0), "latency" (a latency
    # change: up is worse), "status", or none.
    tone: str = ""
    # Keep the cell on one line (short texts that read badly wrapped: shapes).
    nowrap: bool = False


@dataclass
class Table:
    columns: List[Column]
    rows: List[List[Any]]
    sort: str
    descending: bool = False

    def blob(self) -> Dict[str, Any]:
        return {
            "columns": [vars(c) for c in self.columns],
            "rows": self.rows,
            "sort": self.sort,
            "descending": self.descending,
        }


@dataclass
class Failure:
    op: str
    status: str
    attempts: str
    reason: str
    log: str
    tail: str


@dataclass
class Page:
    kind: str  # "batch" or "ab"
    title: str
    inputs: List[Tuple[str, str]]  # (label, path)
    headline: List[Tuple[str, str, str]]  # (label, value, css class)
    caliber: List[Tuple[str, str]]
    versions: List[Tuple[str, str]]
    table: Table
    families: Families
    notes: List[str] = field(default_factory=list)
    warnings: List[str] = field(default_factory=list)
    failures: List[Failure] = field(default_factory=list)
    issues: Optional[Table] = None
    # (family, values) for the distribution plot; values are speedups or A/B ratios.
    distribution: List[Tuple[str, List[float]]] = field(default_factory=list)
    # A/B: each plotted value's verdict, in the same order (the plot colours by it).
    distribution_verdicts: List[List[str]] = field(default_factory=list)
    ranges: Optional[Table] = None


def _finite(value: Optional[float]) -> Optional[float]:
    return value if value is not None and math.isfinite(value) else None


def _dtype(text: str) -> str:
    return text[len("torch.") :] if text.startswith("torch.") else text


def _rel(path: str, root: Path) -> str:
    try:
        return os.path.relpath(path, root)
    except ValueError:
        return path


def versions(summary: Summary) -> List[Tuple[str, str]]:
    seen: Dict[str, Dict[str, int]] = {}
    for run in summary.runs:
        for key in VERSION_KEYS:
            value = ((run.identity or {}).get("versions") or {}).get(key)
            if value:
                counts = seen.setdefault(key, {})
                counts[str(value)] = counts.get(str(value), 0) + 1
    return [(k, ", ".join(seen[k])) for k in VERSION_KEYS if k in seen]


def _by_family(values: Sequence[Tuple[str, Any]], limit: int = 24) -> List[Tuple[str, List[Any]]]:
    """Values grouped by family, biggest families first; past ``limit``, one 'other'."""
    groups: Dict[str, List[Any]] = {}
    for family, value in values:
        groups.setdefault(family, []).append(value)
    ordered = sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    if len(ordered) <= limit:
        return ordered
    rest = [v for _, vs in ordered[limit - 1 :] for v in vs]
    return ordered[: limit - 1] + [(f"{len(ordered) - limit + 1} more families", rest)]


def _failures(root: Path, status: Dict[str, Dict[str, str]]) -> List[Failure]:
    out = []
    for op in sorted(status):
        row = status[op]
        if row.get("status") not in BAD:
            continue
        # The batch dir holding the op's run dir: the root, or its shard of a screen.
        batch_dir = root / Path(row["run_dir"]).parent if row.get("run_dir") else root
        logs = rundir.attempt_logs(batch_dir, op)
        if logs:
            tail = "\n".join(tail_lines(logs[-1])[-TAIL_LINES:])
            log = _rel(str(logs[-1]), root)
        else:
            tail, log = f"(no attempt log under {rundir.LOGS_DIR}/)", ""
        out.append(
            Failure(op, row.get("status", ""), row.get("attempts", ""), row.get("reason", ""), log, tail)
        )
    return out


BATCH_COLUMNS = [
    Column("op", "operator"),
    Column("family", "family"),
    Column("dtype", "dtype"),
    Column("shape", "shape", nowrap=True),
    Column("torch_ms", "torch ms", "num", 6),
    Column("gems_ms", "gems ms", "num", 6),
    Column("speedup", "speedup", "num", 3, "torch ms / gems ms (> 1: gems faster)", "ratio"),
    Column("status", "status", tone="status"),
    Column("timer", "timer"),
    Column("markers", "markers", title="what each marker says; summary.csv has every field"),
    Column("run", "run dir"),
]


SPREAD_NOTE = "relative half-width of the gems median's 95% confidence interval"


def _spread_columns(rows: Sequence[Row]) -> List[Column]:
    """Per-row sample count and spread, where the rows carry them."""
    cols = []
    for side in ("gems", "torch"):
        if any(getattr(r, f"{side}_spread") is not None for r in rows):
            cols += [
                Column(f"{side}_samples", f"{side} samples", "num", 0),
                Column(f"{side}_spread", f"{side} spread", "spread", 2, SPREAD_NOTE.replace("gems ", "")),
            ]
    return cols


def batch_page(summary: Summary, families: Optional[Families] = None) -> Page:
    families = families or summary_families(summary)
    root = summary.root
    statuses = operator_statuses(summary)
    status, counts, notes = statuses.rows, statuses.counts, list(statuses.notes)
    rows = summary.rows
    spread = _spread_columns(rows)
    columns = BATCH_COLUMNS + spread
    table_rows = []
    for r in rows:
        cells = [
            r.op,
            families.get(r.op),
            _dtype(r.dtype),
            compact_shape(r.shape),
            _finite(r.torch_ms),
            _finite(r.gems_ms),
            _finite(r.speedup),
            r.status,
            r.timer + (" (fallback)" if r.fallback else ""),
            marker_brief(r.markers),
            _rel(r.run_dir, root) if r.run_dir else "",
        ]
        cells += [getattr(r, c.key, None) for c in spread]
        table_rows.append(cells)

    ok_rows = sum(1 for r in rows if r.status == "SUCCESS")
    fallback_rows = sum(1 for r in rows if r.fallback)
    dtype_fallback = sorted(
        op
        for op, s in status.items()
        if s.get("status") == "ok" and s.get("dtype_level") not in ("0", "", None)
    )
    headline = []
    if status:
        for name in (*STATUSES, NOT_RUN):
            if counts.get(name):
                css = "bad" if name in BAD or name == NOT_RUN else ("ok" if name == "ok" else "muted")
                headline.append((f"operators {name}", str(counts[name]), css))
    headline += [
        ("rows measured", f"{ok_rows} of {len(rows)}", "ok" if ok_rows == len(rows) else "warn"),
        ("rows timed by the direct fallback", str(fallback_rows), "warn" if fallback_rows else "muted"),
        ("operators on fallback dtypes", str(len(dtype_fallback)), "warn" if dtype_fallback else "muted"),
        ("issues", str(len(summary.issues)), "warn" if summary.issues else "muted"),
    ]
    warnings = unfinished_warnings([("", summary)])
    if not rows:
        warnings.append(
            f"No table rows: none of the {len(status)} operators with a status printed a "
            "measurement; the failures below say why."
        )
    if dtype_fallback:
        notes.append(
            "Measured with fallback dtypes: "
            + ", ".join(f"{op} (level {status[op]['dtype_level']})" for op in dtype_fallback)
        )
    distribution = _by_family(
        [
            (families.get(r.op), r.speedup)
            for r in rows
            if r.status == "SUCCESS" and r.speedup and r.speedup > 0 and math.isfinite(r.speedup)
        ]
    )
    return Page(
        kind="batch",
        title=f"zlbench batch {root.name}",
        inputs=[("batch", str(summary.input))],
        headline=headline,
        caliber=list(batch_caliber(summary.runs).items()),
        versions=versions(summary),
        table=Table(columns, table_rows, "speedup"),
        families=families,
        notes=notes,
        warnings=warnings + [f"{i.op}: {i.message}" for i in missing_run_dirs(summary)],
        failures=_failures(root, status),
        issues=Table(ISSUE_COLUMNS, _issue_rows(summary), "kind"),
        distribution=distribution,
    )


ISSUE_COLUMNS = [
    Column("kind", "kind"),
    Column("op", "operator"),
    Column("what", "what"),
    Column("where", "where"),
]


def unfinished_warnings(sides: Sequence[Tuple[str, Summary]]) -> List[str]:
    """A loud line per unfinished input, naming what did not run."""
    out = []
    for side, summary in sides:
        state = screen_state(summary)
        if state["finished"]:
            continue
        out.append(
            f"UNFINISHED{' ' + side if side else ''}: {unfinished_what(state, 30)}. "
            f"Continue with zlbench batch --resume --out {summary.root}."
        )
    return out


def _issue_rows(summary: Summary, side: str = "") -> List[List[Any]]:
    return [[(side + " " if side else "") + i.kind, i.op or "", i.message, i.where()] for i in summary.issues]


AB_COLUMNS = [
    Column("verdict", "verdict", "text", 0, "the row's verdict (zlbench.summary.verdict)", "status"),
    Column("op", "operator"),
    Column("family", "family"),
    Column("dtype", "dtype"),
    Column("shape", "shape", nowrap=True),
    Column("a_ms", "A gems ms", "num", 6),
    Column("b_ms", "B gems ms", "num", 6),
    Column("gain", "gain", "pct", 1, GAIN_NOTE, "sign"),
    Column("a_spread", "A spread", "spread", 2, SPREAD_NOTE),
    Column("b_spread", "B spread", "spread", 2, SPREAD_NOTE),
    Column(
        "change",
        "|change|",
        "num",
        3,
        "|log2(A ms / B ms)|: the size of the change either way (1 = twice as fast or slow)",
    ),
    Column(
        "why", "why UNKNOWN", title="what kept the row from a verdict (measured throttled, no spread, ...)"
    ),
    Column("timer", "timers A/B"),
]
# Verdicts in the order the page lists and counts them; UNKNOWN split by its cause.
THROTTLED = THROTTLED_LABEL
VERDICT_CARDS = ((SLOWER, "bad"), (FASTER, "ok"), (SAME, "muted"), (THROTTLED, "warn"), (UNKNOWN, "warn"))
CARD_LABELS = {UNKNOWN: "UNKNOWN (other reasons)"}


def _verdict(pair) -> str:
    """The pair's verdict (set by pair_summaries), UNKNOWN split by its cause."""
    return THROTTLED if pair.verdict.throttled else pair.verdict.status


def ab_page(result: ABResult, families: Optional[Families] = None) -> Page:
    """The A/B page. Every count, colour and plot point is the row's verdict: there is no
    second classification (a noise band) to disagree with it."""
    families = families or summary_families(result.a, result.b)
    rows = []
    for p in result.pairs:
        ratio = p.gain + 1.0
        rows.append(
            [
                p.verdict.status,
                p.a.op,
                families.get(p.a.op),
                _dtype(p.a.dtype),
                compact_shape(p.a.shape),
                _finite(p.a.gems_ms),
                _finite(p.b.gems_ms),
                p.gain,
                _finite(p.a.gems_spread),
                _finite(p.b.gems_spread),
                abs(math.log2(ratio)) if ratio > 0 else None,
                "; ".join(w for w in (p.verdict.why, own_floor_note(result.floor_for(p), p)) if w),
                f"{p.a.timer}/{p.b.timer}" + (" (fallback)" if p.fallback else ""),
            ]
        )
    overall = result.overall

    def pct(v: Optional[float], sign: bool = True) -> str:
        return "n/a" if v is None else (f"{v * 100:+.1f}%" if sign else f"{v * 100:.1f}%")

    counts = {name: 0 for name, _ in VERDICT_CARDS}
    for p in result.pairs:
        counts[_verdict(p)] += 1
    headline = [
        ("rows paired", f"{len(result.pairs)} (A {len(result.a.rows)}, B {len(result.b.rows)})", "muted")
    ]
    headline += [
        (f"verdict {CARD_LABELS.get(name, name)}", str(counts[name]), css if counts[name] else "muted")
        for name, css in VERDICT_CARDS
    ]
    floors = result.floors_used()
    headline += [
        ("geomean gain", pct(overall.geomean if overall else None), "muted"),
        (
            "noise floor" + (" (several)" if len(floors) > 1 else ""),
            ", ".join(
                f"{n} rows' own, up to {pct(f.value, sign=False)}" if f.per_row else pct(f.value, sign=False)
                for f, n in floors
            ),
            "muted",
        ),
        (
            "only in A / only in B",
            f"{len(result.only_a)} / {len(result.only_b)}",
            "warn" if result.only_a or result.only_b else "muted",
        ),
        ("not comparable", str(len(result.not_comparable)), "warn" if result.not_comparable else "muted"),
    ]
    notes = [GAIN_NOTE + ".", *verdict_lines(result)]
    unpaired = (
        [("only in A", r.op, r.dtype, r.shape) for r in result.only_a]
        + [("only in B", r.op, r.dtype, r.shape) for r in result.only_b]
        + [(f"not comparable: {n.reason}", n.a.op, n.a.dtype, n.a.shape) for n in result.not_comparable]
    )
    issues = _issue_rows(result.a, "A") + _issue_rows(result.b, "B")
    issues += [[why, op, f"{_dtype(dtype)} {compact_shape(shape)}", ""] for why, op, dtype, shape in unpaired]
    ranges = Table(
        [
            Column("op", "operator"),
            Column("family", "family"),
            Column("count", "rows", "num", 0),
            Column("slower", "SLOWER", "num", 0),
            Column("faster", "FASTER", "num", 0),
            Column("same", "SAME", "num", 0),
            Column(
                "throttled",
                "UNKNOWN throttled",
                "num",
                0,
                "rows measured throttled on either side, or at the power cap on one side only",
            ),
            Column("unknown", "UNKNOWN other", "num", 0),
            Column("min", "min", "pct", 1, tone="sign"),
            Column("median", "median", "pct", 1, tone="sign"),
            Column("max", "max", "pct", 1, tone="sign"),
            Column("geomean", "geomean", "pct", 1, tone="sign"),
            Column("fallback", "fallback rows", "num", 0, "rows timed by the direct fallback on either side"),
        ],
        [
            [
                r.name,
                families.get(r.name),
                r.count,
                r.slower,
                r.faster,
                r.same,
                r.throttled,
                r.other_unknown,
                r.min,
                r.median,
                r.max,
                r.geomean,
                r.fallback_rows,
            ]
            for r in result.by_op
        ],
        "slower",
        descending=True,
    )
    grouped = _by_family(
        [(families.get(p.a.op), (p.gain + 1.0, _verdict(p))) for p in result.pairs if p.gain > -1.0]
    )
    return Page(
        kind="ab",
        title=f"zlbench A/B {Path(result.a.input).name} vs {Path(result.b.input).name}",
        inputs=[("A", str(result.a.input)), ("B", str(result.b.input))],
        headline=headline,
        caliber=list(batch_caliber(result.a.runs).items()),
        versions=[(f"A {k}", v) for k, v in versions(result.a)]
        + [(f"B {k}", v) for k, v in versions(result.b)],
        table=Table(AB_COLUMNS, rows, "change", descending=True),
        families=families,
        notes=notes,
        warnings=caliber_lines(result.caliber) + unfinished_warnings([("A", result.a), ("B", result.b)]),
        issues=Table(ISSUE_COLUMNS, issues, "kind"),
        distribution=[(name, [v for v, _ in vals]) for name, vals in grouped],
        distribution_verdicts=[[t for _, t in vals] for _, vals in grouped],
        ranges=ranges,
    )

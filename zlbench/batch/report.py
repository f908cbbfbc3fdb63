"""The end-of-batch screen: counts by status, the slowest operators, every failure
with its reason. Plain text, so it reads the same on a terminal and in a CI log."""

from __future__ import annotations

import shlex
import statistics
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence

from .. import rundir
from ..rundir import BAD, NOT_RUN, STATUSES, count_statuses
from .progress import fmt_duration


def _seconds(row: Mapping[str, str]) -> float:
    try:
        return float(row.get("total_s") or 0.0)
    except ValueError:
        return 0.0


PHASES = (
    ("startup_s", "start-up"),
    ("collect_s", "collection"),
    ("first_call_s", "first call (compile, autotune)"),
    ("measure_s", "measurement"),
)


def _cell(row: Mapping[str, str], column: str) -> Optional[float]:
    try:
        return float(row.get(column) or "")
    except ValueError:
        return None


def time_breakdown(rows: Sequence[Mapping[str, str]]) -> List[str]:
    """Where the operators' time went (their last attempts), from the RUN_PHASE markers
    the phases plugin printed; the fixed cost per operator is wall minus pytest's body."""
    timed = [r for r in rows if _cell(r, "overhead_s") is not None]
    if not timed:
        return []
    totals = {col: sum(_cell(r, col) or 0.0 for r in timed) for col, _ in PHASES}
    wall = sum(_cell(r, "duration_s") or 0.0 for r in timed) or 1.0
    parts = ", ".join(
        f"{label} {fmt_duration(totals[col])} ({100 * totals[col] / wall:.0f}%)" for col, label in PHASES
    )
    overheads = [_cell(r, "overhead_s") or 0.0 for r in timed]
    modes: Dict[str, int] = {}
    for r in rows:
        if r.get("run_mode"):
            modes[r["run_mode"]] = modes.get(r["run_mode"], 0) + 1
    return [
        f"Where the time went ({len(timed)} operators, last attempts): {parts}",
        f"  fixed cost per operator (wall minus the pytest session): median "
        f"{statistics.median(overheads):.2f} s, total {fmt_duration(sum(overheads))}"
        + (f"; ran as {', '.join(f'{m} {n}' for m, n in sorted(modes.items()))}" if modes else ""),
        *tuning_breakdown(timed, wall),
    ]


def tuning_breakdown(rows: Sequence[Mapping[str, str]], wall: float, top: int = 3) -> List[str]:
    """How much of first call and measurement was compiling kernels and autotuning
    (ops_status' compile_s, tune_s), and the operators that spent the most on both."""
    figures = [
        (r.get("operator") or "?", _cell(r, "compile_s"), _cell(r, "tune_s"))
        for r in rows
        if _cell(r, "compile_s") is not None or _cell(r, "tune_s") is not None
    ]
    if not figures:
        return []
    compiled = sum(c or 0.0 for _, c, _ in figures)
    tuned = sum(t or 0.0 for _, _, t in figures)
    if not (compiled or tuned):
        return []  # nothing compiled or tuned (warm caches, or no triton)
    heavy = sorted(figures, key=lambda f: (f[1] or 0.0) + (f[2] or 0.0), reverse=True)[:top]
    heavy = [f for f in heavy if (f[1] or 0.0) + (f[2] or 0.0) > 0]
    line = (
        f"  of which compiling kernels {fmt_duration(compiled)} ({100 * compiled / wall:.0f}%), "
        f"autotuning {fmt_duration(tuned)} ({100 * tuned / wall:.0f}%) over {len(figures)} operators"
    )
    if heavy:
        line += "; most: " + ", ".join(
            f"{op} {fmt_duration(c or 0.0)} + {fmt_duration(t or 0.0)}" for op, c, t in heavy
        )
    return [line]


def projected_remaining(
    rows: Mapping[str, Mapping[str, str]], planned: Sequence[str], devices: int
) -> Optional[float]:
    """Seconds the operators without a row would take on ``devices`` devices at the mean
    of the measured ones; None when nothing was measured."""
    measured = [
        _seconds(rows[op]) for op in planned if rows.get(op, {}).get("status") not in (None, "", "dismissed")
    ]
    left = [op for op in planned if not rows.get(op, {}).get("status")]
    if not measured or not left:
        return None
    return len(left) * (sum(measured) / len(measured)) / max(1, devices)


def render_report(
    out: Path,
    rows: Mapping[str, Mapping[str, str]],
    planned: Sequence[str],
    wall_s: float,
    interrupted: bool,
    slowest: int = 5,
    max_failures: int = 25,
    devices: Sequence[str] = (),
) -> str:
    counts = count_statuses(rows, planned)
    order = [s for s in (*STATUSES, NOT_RUN) if counts.get(s)]
    lines: List[str] = [
        f"zlbench batch: {out}",
        f"  {len(planned)} operators in {fmt_duration(wall_s)}"
        + (f" on {len(devices)} device(s) ({','.join(devices)})" if devices else "")
        + ": "
        + ", ".join(f"{s} {counts[s]}" for s in order),
    ]
    measured = [
        (op, rows[op]) for op in planned if op in rows and rows[op].get("status") not in ("dismissed", None)
    ]
    top = sorted(measured, key=lambda item: _seconds(item[1]), reverse=True)[:slowest]
    if top:
        lines.append("Slowest:")
        width = max(len(op) for op, _ in top)
        for op, row in top:
            lines.append(
                f"  {op:<{width}}  {fmt_duration(_seconds(row)):>8}  {row.get('status')}  "
                f"device {row.get('device')}  attempts {row.get('attempts')}"
            )
    bad = [(op, rows[op]) for op in planned if rows.get(op, {}).get("status") in BAD]
    if bad:
        lines.append(f"Failures ({len(bad)}):")
        width = max(len(op) for op, _ in bad)
        for op, row in bad[:max_failures]:
            lines.append(
                f"  {op:<{width}}  {row.get('status'):<8} attempts {row.get('attempts')} "
                f"level {row.get('dtype_level')}  {row.get('reason') or '-'}"
            )
        if len(bad) > max_failures:
            lines.append(f"  ... and {len(bad) - max_failures} more: see ops_status.csv")
    lines += time_breakdown([rows[op] for op in planned if op in rows])
    fell_back = [
        op
        for op in planned
        if rows.get(op, {}).get("status") == "ok" and rows[op].get("dtype_level") not in ("0", "", None)
    ]
    if fell_back:
        lines.append(
            f"Measured with fallback dtypes ({len(fell_back)}): "
            + ", ".join(f"{op} (level {rows[op]['dtype_level']})" for op in fell_back)
        )
    lines.append(f"Status table: {rundir.status_path(out)}")
    if interrupted or counts.get(NOT_RUN):
        left = projected_remaining(rows, planned, len(devices) or 1)
        if left is not None:
            lines.append(
                f"{counts.get(NOT_RUN, 0)} operator(s) not run: about {fmt_duration(left)} "
                f"more on {len(devices) or 1} device(s) at this batch's mean"
            )
        lines.append(f"Not finished. Continue with: zlbench batch --resume --out {out}")
    lines += next_commands(out)
    return "\n".join(lines)


def next_commands(out: Path) -> List[str]:
    """The closing lines: what to run on this batch dir next."""
    quoted = shlex.quote(str(out))
    return [
        f"Next: zlbench summary {quoted}  (the tables, and summary.csv)",
        f"      zlbench report {quoted} -o {shlex.quote(str(out / 'report.html'))}"
        "  (one HTML page: plots, every row, failures)",
    ]

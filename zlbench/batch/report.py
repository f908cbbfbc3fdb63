"""The end-of-batch screen: counts by status, the slowest operators, every failure
with its reason. Plain text, so it reads the same on a terminal and in a CI log."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import List, Mapping, Sequence

from .classify import BAD, NOT_RUN, STATUSES, count_statuses
from .progress import fmt_duration


def _seconds(row: Mapping[str, str]) -> float:
    try:
        return float(row.get("total_s") or 0.0)
    except ValueError:
        return 0.0


def render_report(out: Path, rows: Mapping[str, Mapping[str, str]], planned: Sequence[str],
                  wall_s: float, interrupted: bool, slowest: int = 5, max_failures: int = 25,
                  devices: Sequence[str] = ()) -> str:
    counts = count_statuses(rows, planned)
    order = [s for s in (*STATUSES, NOT_RUN) if counts.get(s)]
    lines: List[str] = [
        f"zlbench batch: {out}",
        f"  {len(planned)} operators in {fmt_duration(wall_s)}"
        + (f" on {len(devices)} device(s) ({','.join(devices)})" if devices else "")
        + ": " + ", ".join(f"{s} {counts[s]}" for s in order),
    ]
    measured = [(op, rows[op]) for op in planned
                if op in rows and rows[op].get("status") not in ("dismissed", None)]
    top = sorted(measured, key=lambda item: _seconds(item[1]), reverse=True)[:slowest]
    if top:
        lines.append("Slowest:")
        width = max(len(op) for op, _ in top)
        for op, row in top:
            lines.append(f"  {op:<{width}}  {fmt_duration(_seconds(row)):>8}  {row.get('status')}  "
                         f"device {row.get('device')}  attempts {row.get('attempts')}")
    bad = [(op, rows[op]) for op in planned if rows.get(op, {}).get("status") in BAD]
    if bad:
        lines.append(f"Failures ({len(bad)}):")
        width = max(len(op) for op, _ in bad)
        for op, row in bad[:max_failures]:
            lines.append(f"  {op:<{width}}  {row.get('status'):<8} attempts {row.get('attempts')} "
                         f"level {row.get('dtype_level')}  {row.get('reason') or '-'}")
        if len(bad) > max_failures:
            lines.append(f"  ... and {len(bad) - max_failures} more: see ops_status.csv")
    fell_back = [op for op in planned if rows.get(op, {}).get("status") == "ok"
                 and rows[op].get("dtype_level") not in ("0", "", None)]
    if fell_back:
        lines.append(f"Measured with fallback dtypes ({len(fell_back)}): "
                     + ", ".join(f"{op} (level {rows[op]['dtype_level']})" for op in fell_back))
    lines.append(f"Status table: {out / 'ops_status.csv'}")
    if interrupted or counts.get(NOT_RUN):
        lines.append(f"Not finished. Continue with: zlbench batch --resume --out {out}")
    lines += next_commands(out)
    return "\n".join(lines)


def next_commands(out: Path) -> List[str]:
    """The closing lines: what to run on this batch dir next."""
    quoted = shlex.quote(str(out))
    return [f"Next: zlbench summary {quoted}  (the tables, and summary.csv)",
            f"      zlbench report {quoted} -o {shlex.quote(str(out / 'report.html'))}"
            "  (one HTML page: plots, every row, failures)"]

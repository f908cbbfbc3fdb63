"""Per-dtype and per-operator aggregates of FlagGems' speedup (torch / gems)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence

from zlbench.runlog import Row
from zlbench.stats import geomean


@dataclass
class Aggregate:
    group: str
    # Rows with a positive speedup; `excluded` counts the rest (failed, N/A, zero, rows
    # with a problem).
    count: int
    excluded: int
    geomean: Optional[float]
    min: Optional[float]
    max: Optional[float]
    # Rows timed by the direct timer after a failed capture: a different regime.
    direct_fallback: int


def aggregate(rows: Sequence[Row], by: str, key: Optional[Callable[[Row], str]] = None) -> List[Aggregate]:
    """One Aggregate per distinct value of the row attribute ``by`` ("op" or "dtype"),
    or of ``key(row)`` where given (an operator's family)."""
    groups: Dict[str, List[Row]] = {}
    for row in rows:
        groups.setdefault(key(row) if key else getattr(row, by), []).append(row)
    out = []
    for name in sorted(groups):
        members = groups[name]
        speedups = [
            r.speedup
            for r in members
            if r.status == "SUCCESS" and not r.problem and r.speedup is not None and r.speedup > 0
        ]
        out.append(
            Aggregate(
                group=name,
                count=len(speedups),
                excluded=len(members) - len(speedups),
                geomean=geomean(speedups),
                min=min(speedups) if speedups else None,
                max=max(speedups) if speedups else None,
                direct_fallback=sum(1 for r in members if r.fallback),
            )
        )
    return out

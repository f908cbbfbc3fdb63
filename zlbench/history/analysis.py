"""Each operator's latency over the nights of one caliber, and its rows' steps."""

from __future__ import annotations

import math
import sqlite3
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from zlbench.history.steps import THRESHOLD, Step, find_steps
from zlbench.history.store import Caliber, SeriesKey, series
from zlbench.stats import geomean


@dataclass
class RowHistory:
    key: SeriesKey
    values: List[Optional[float]]
    steps: List[Step]


@dataclass
class OpHistory:
    op: str
    rows: List[RowHistory] = field(default_factory=list)

    @property
    def stepped(self) -> List[RowHistory]:
        return [r for r in self.rows if r.steps]

    def index(self, nights: int) -> List[Optional[float]]:
        """Per night, the geomean over the op's measured rows of latency / the row's own
        median over nights: one line per operator whatever its rows' sizes (1 = usual)."""
        ratios: List[List[float]] = [[] for _ in range(nights)]
        for row in self.rows:
            measured = sorted(v for v in row.values if v is not None)
            if not measured:
                continue
            k = len(measured) // 2
            median = measured[k] if len(measured) % 2 else (measured[k - 1] + measured[k]) / 2
            for i, v in enumerate(row.values):
                if v is not None:
                    ratios[i].append(v / median)
        return [geomean(r) for r in ratios]

    def step_nights(self) -> Dict[int, List[Step]]:
        """Night -> the steps of this operator's rows that happened on it."""
        out: Dict[int, List[Step]] = {}
        for row in self.rows:
            for s in row.steps:
                out.setdefault(s.index, []).append(s)
        return out

    def biggest(self) -> Optional[Step]:
        steps = [s for r in self.rows for s in r.steps]
        return max(steps, key=lambda s: abs(math.log(s.after / s.before)), default=None)


def analyse(
    conn: sqlite3.Connection, cal: Caliber, op: Optional[str] = None, threshold: float = THRESHOLD
) -> List[OpHistory]:
    """Every operator of ``cal`` (or just ``op``), its rows and their steps, by name."""
    ops: Dict[str, OpHistory] = {}
    for key, values, spread in series(conn, cal, op):
        ops.setdefault(key[0], OpHistory(key[0])).rows.append(
            RowHistory(key, values, find_steps(values, threshold, spread))
        )
    return [ops[name] for name in sorted(ops)]


def median_change(steps: List[Step]) -> float:
    changes = sorted(s.change for s in steps)
    k = len(changes) // 2
    return changes[k] if len(changes) % 2 else (changes[k - 1] + changes[k]) / 2

"""The operators' batch statuses behind a summary input: a batch's ops_status.csv and
plan.json, or a sharded screen's merged rows and its shards' plans."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List

from zlbench.rundir import NOT_RUN, STATUSES, StatusFile, count_statuses, plan_path, read_plan
from zlbench.summary.rows import Summary

__all__ = ["NOT_RUN", "STATUSES", "Statuses", "operator_statuses"]


@dataclass
class Statuses:
    rows: Dict[str, Dict[str, str]]  # operator -> its ops_status.csv row
    counts: Dict[str, int]  # status (or "not run") -> operators
    notes: List[str] = field(default_factory=list)
    # Every operator counted, in plan order: True where a plan holds it.
    planned: Dict[str, bool] = field(default_factory=dict)

    @property
    def not_run(self) -> int:
        return self.counts.get(NOT_RUN, 0)


def operator_statuses(summary: Summary) -> Statuses:
    """The input's operator statuses, read once per summary: the text, JSON and report
    views of one summary all ask for them."""
    cached = summary.__dict__.get("_statuses")
    if cached is None:
        cached = summary.__dict__["_statuses"] = _read_statuses(summary)
    return cached


def _read_statuses(summary: Summary) -> Statuses:
    notes = []
    if summary.statuses is not None:
        rows = dict(summary.statuses)
        planned = sorted(rows)
    elif summary.screen is not None:
        rows = summary.screen.rows
        planned = [op for shard in summary.screen.shards.values() for op in shard.planned]
    else:
        rows = StatusFile(summary.root).read()
        try:
            plan = read_plan(summary.root) or {}
        except (OSError, ValueError) as e:  # unreadable: count what ops_status.csv says
            plan = {}
            notes.append(f"cannot read {plan_path(summary.root)} ({e}): operators not run are not counted")
        planned = [p["op"] for p in plan.get("ops", [])] + list(plan.get("dismissed", {}))
    in_plan = dict.fromkeys(planned, True)
    planned = list(dict.fromkeys(planned + sorted(rows)))
    return Statuses(rows, count_statuses(rows, planned), notes, {op: op in in_plan for op in planned})

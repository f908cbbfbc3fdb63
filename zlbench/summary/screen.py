"""A sharded screen read as one batch: ``read_screen(DIR)``.

A screen spread over hosts (``zlbench batch --shard K/N --out DIR``, or ``zlbench slurm
submit``) leaves one complete batch dir per host shard, ``DIR/shard-K-of-N/``. Every
reader of a screen (summary, ``summary --ab``, ``slurm status``) goes through
``read_screen``: it merges the shards' ops_status.csv and names what is wrong with the
screen as a whole: a shard missing or unfinished, an operator in two shards, shard dirs
of different N.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

from zlbench.rundir import (
    BAD,
    PLAN_FILE,
    StatusFile,
    format_status,
    parse_shard_dir_name,
    plan_path,
    read_journal,
    read_plan,
    shard_dir_name,
)
from zlbench.runlog import Issue


@dataclass
class ShardDir:
    """One host shard's batch dir and what it says about its progress."""

    index: int
    count: int
    path: Path
    plan: Optional[dict]
    rows: Dict[str, Dict[str, str]]

    @property
    def name(self) -> str:
        return shard_dir_name(self.index, self.count)

    @property
    def planned(self) -> List[str]:
        """Operators the shard's plan holds (measured and dismissed); [] before it started."""
        plan = self.plan or {}
        return sorted({p["op"] for p in plan.get("ops", [])} | set(plan.get("dismissed", {})))

    @property
    def done(self) -> List[str]:
        return [op for op in self.planned if op in self.rows]

    @property
    def failed(self) -> List[str]:
        return [op for op in self.done if self.rows[op].get("status") in BAD]

    @property
    def started(self) -> bool:
        return self.plan is not None

    @property
    def finished(self) -> bool:
        """Planned, and every operator of its plan has a status row."""
        return self.started and len(self.done) == len(self.planned)

    def running(self) -> List[str]:
        """Operators whose latest attempt started and has no result yet (per the journal;
        right while the driver lives, stale after it was killed)."""
        open_: Dict[str, bool] = {}
        for ev in read_journal(self.path):
            op = str(ev.get("op"))
            if ev.get("event") == "attempt":
                open_[op] = True
            elif ev.get("event") == "result":
                open_[op] = False
            elif ev.get("event") == "session_end":
                open_.clear()
        return sorted(op for op, is_open in open_.items() if is_open and op not in self.rows)

    def durations(self) -> List[float]:
        out = []
        for op in self.done:
            try:
                out.append(float(self.rows[op].get("total_s") or ""))
            except ValueError:
                continue
        return out


@dataclass
class Screen:
    """A sharded screen: its shard dirs, the merged status rows, what is wrong."""

    root: Path
    count: int  # N
    shards: Dict[int, ShardDir]  # present shard dirs by K
    rows: Dict[str, Dict[str, str]] = field(default_factory=dict)  # merged, by operator
    issues: List[Issue] = field(default_factory=list)

    @property
    def missing(self) -> List[int]:
        return [k for k in range(self.count) if k not in self.shards]

    @property
    def unfinished(self) -> List[int]:
        return [k for k in range(self.count) if k not in self.shards or not self.shards[k].finished]

    @property
    def finished(self) -> bool:
        return not self.unfinished

    def status_csv(self) -> str:
        """The merged ops_status.csv: the columns of a batch's, run_dir below the screen."""
        return format_status(self.rows)


def shard_dirs(root: Path) -> Dict[tuple, Path]:
    """(K, N) -> dir for every ``shard-K-of-N`` dir directly under root."""
    found = {}
    try:
        entries = list(os.scandir(root))
    except OSError:
        return {}
    for entry in entries:
        parsed = parse_shard_dir_name(entry.name)
        if parsed and entry.is_dir():
            found[parsed] = Path(entry.path)
    return found


def is_screen(root: Path) -> bool:
    return bool(shard_dirs(Path(root)))


def _read_plan(path: Path, issues: List[Issue]) -> Optional[dict]:
    try:
        return read_plan(path)
    except (OSError, ValueError) as e:
        issues.append(Issue("bad_plan", f"cannot read {PLAN_FILE}: {e}", source=str(plan_path(path))))
        return None


def read_screen(root: Path, count: Optional[int] = None) -> Optional[Screen]:
    """The sharded screen in ``root``, or None when root holds no ``shard-K-of-N`` dir.

    ``count`` is N when the caller knows it (a Slurm submission); otherwise the N of the
    shard dirs found. Shard dirs of another N are reported, not merged.
    """
    root = Path(root)
    found = shard_dirs(root)
    if not found and count is None:
        return None
    counts = sorted({n for _, n in found})
    n = count or (counts[-1] if counts else 1)
    issues: List[Issue] = []
    others = sorted(root / shard_dir_name(k, m) for k, m in found if m != n)
    if others:
        issues.append(
            Issue(
                "shard_count_mixed",
                f"shard dirs of another shard count are not merged: "
                f"{', '.join(p.name for p in others)} (this screen has {n} shards)",
                source=str(root),
            )
        )
    screen = Screen(root, n, {})
    owner: Dict[str, List[str]] = {}
    for (k, m), path in sorted(found.items()):
        if m != n:
            continue
        shard = ShardDir(k, m, path, _read_plan(path, issues), StatusFile(path).read())
        screen.shards[k] = shard
        for op in sorted(set(shard.planned) | set(shard.rows)):
            owner.setdefault(op, []).append(shard.name)
        for op, row in shard.rows.items():
            if op in screen.rows:
                continue  # reported below; the first shard's row stands
            merged = dict(row)
            if merged.get("run_dir"):
                merged["run_dir"] = f"{shard.name}/{merged['run_dir']}"
            screen.rows[op] = merged
    for op, names in sorted(owner.items()):
        if len(names) > 1:
            issues.append(
                Issue(
                    "op_in_two_shards",
                    f"{op} is in {' and '.join(names)}: its shards were run "
                    "with different operator lists or shard hashes; only the "
                    f"row of {names[0]} is counted",
                    op=op,
                    source=str(root),
                )
            )
    for k in screen.missing:
        issues.append(
            Issue(
                "shard_missing",
                f"{shard_dir_name(k, n)} is missing: shard {k}/{n} never started; "
                f"run it (zlbench batch --shard {k}/{n} --out {root}, or "
                "zlbench slurm submit again)",
                source=str(root),
            )
        )
    for k, shard in sorted(screen.shards.items()):
        if not shard.finished:
            what = (
                f"{len(shard.done)} of {len(shard.planned)} operators have a status"
                if shard.started
                else "no plan.json yet"
            )
            issues.append(
                Issue(
                    "shard_unfinished",
                    f"{shard.name} is unfinished ({what}); continue it with the "
                    f"same command (zlbench batch --shard {k}/{n} --out {root}, "
                    "or zlbench slurm submit again)",
                    source=str(shard.path),
                )
            )
    screen.issues = issues
    return screen

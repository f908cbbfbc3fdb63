"""Where a sharded screen stands: per shard the scheduler's word beside the batch's own.

The batch dir decides what is measured (``read_screen``); the scheduler decides whether
a shard is still in hand. A shard is finished when every operator of its plan has a
status; running when its latest array task is pending or running; otherwise it needs
a resubmission.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence

from zlbench.batch.progress import fmt_duration
from zlbench.rundir import SLURM_DIR, SLURM_SUBMISSIONS
from zlbench.slurm.scheduler import ACTIVE, TaskState
from zlbench.summary.screen import Screen

EXIT_FINISHED, EXIT_RUNNING, EXIT_RESUBMIT = 0, 3, 4
FINISHED, RUNNING, QUEUED, RESUBMIT = "finished", "running", "queued", "needs resubmit"


def read_submissions(screen_dir: Path) -> List[dict]:
    """DIR/slurm/submissions.jsonl, oldest first (a line cut by a crash is skipped)."""
    path = Path(screen_dir) / SLURM_DIR / SLURM_SUBMISSIONS
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    out = []
    for line in text.splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def latest_tasks(submissions: Sequence[dict]) -> Dict[int, str]:
    """Shard index -> ``<job>_<index>`` of the latest submission that included it."""
    tasks: Dict[int, str] = {}
    for sub in submissions:
        for k in sub.get("indices", []):
            tasks[int(k)] = f"{sub['job']}_{k}"
    return tasks


@dataclass
class ShardLine:
    index: int
    count: int
    task: str  # "" when Slurm never ran it
    scheduler: str  # the task's state, "-" or "unknown"
    planned: Optional[int]  # None before the shard wrote its plan
    done: int
    failed: int
    running: List[str]
    eta_s: Optional[float]
    verdict: str


def _eta(shard, remaining: int) -> Optional[float]:
    if remaining <= 0:
        return 0.0
    durations = shard.durations()
    if not durations:
        return None
    devices = max(1, len((shard.plan or {}).get("devices") or [1]))
    return sum(durations) / len(durations) * remaining / devices


def shard_lines(screen: Screen, tasks: Mapping[int, str], states: Mapping[str, TaskState]) -> List[ShardLine]:
    lines = []
    for k in range(screen.count):
        shard = screen.shards.get(k)
        task = tasks.get(k, "")
        state = states.get(task)
        scheduler = state.state if state else ("unknown" if task else "-")
        planned = len(shard.planned) if shard and shard.started else None
        done = len(shard.done) if shard else 0
        if shard is not None and shard.finished:
            verdict = FINISHED
        elif state is not None and state.state in ACTIVE:
            verdict = QUEUED if state.state == "PENDING" else RUNNING
        else:
            verdict = RESUBMIT
        active = verdict in (RUNNING, QUEUED)
        lines.append(
            ShardLine(
                k,
                screen.count,
                task,
                scheduler,
                planned,
                done,
                len(shard.failed) if shard else 0,
                shard.running() if shard and verdict == RUNNING else [],
                _eta(shard, (planned or 0) - done) if shard and active and planned else None,
                verdict,
            )
        )
    return lines


def exit_code(lines: Sequence[ShardLine]) -> int:
    if all(line.verdict == FINISHED for line in lines):
        return EXIT_FINISHED
    if any(line.verdict == RESUBMIT for line in lines):
        return EXIT_RESUBMIT
    return EXIT_RUNNING


def render(lines: Sequence[ShardLine]) -> str:
    head = ("shard", "array task", "scheduler", "operators", "done", "failed", "running", "ETA", "verdict")
    rows = [head]
    for line in lines:
        rows.append(
            (
                f"{line.index}/{line.count}",
                line.task or "-",
                line.scheduler,
                "-" if line.planned is None else str(line.planned),
                str(line.done),
                str(line.failed),
                ",".join(line.running) or "-",
                "-" if line.verdict not in (RUNNING, QUEUED) else fmt_duration(line.eta_s),
                line.verdict,
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows)

"""Slurm's client commands, called as a person would: sbatch --parsable, squeue, sacct.

Only their documented output formats are read (``--parsable``, ``-o``/``--format``).
A command that is missing or fails is a SchedulerError naming it; a missing sacct
(accounting disabled) is a note, not an error: tasks that left the queue show as
unknown, and the batch dirs still say what was measured.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

# States in which an array task still holds (or waits for) its shard: submitting the
# shard again would start a second driver on the same dir.
ACTIVE = frozenset(
    {
        "PENDING",
        "RUNNING",
        "CONFIGURING",
        "COMPLETING",
        "REQUEUED",
        "REQUEUE_HOLD",
        "REQUEUE_FED",
        "RESIZING",
        "SUSPENDED",
        "SIGNALING",
        "STAGE_OUT",
        "STOPPED",
    }
)


class SchedulerError(Exception):
    """A Slurm command is missing or failed; the message names it and says what to do."""


@dataclass(frozen=True)
class TaskState:
    task: str  # "<array job id>_<index>"
    state: str  # Slurm's state name (RUNNING, COMPLETED, CANCELLED, ...)
    detail: str = ""  # squeue's reason or sacct's exit code
    source: str = "squeue"


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise SchedulerError(
            f"{name} not found on PATH: run this on a host with Slurm's "
            "client commands (a login node), or load its module"
        )
    return path


def _run(
    argv: Sequence[str], environ: Optional[Mapping[str, str]], timeout: float = 60
) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(
            list(argv),
            capture_output=True,
            text=True,
            timeout=timeout,
            env=None if environ is None else dict(environ),
        )
    except subprocess.TimeoutExpired:
        raise SchedulerError(
            f"{argv[0]} did not answer in {timeout:g} s: is slurmctld reachable (scontrol ping)?"
        ) from None


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "(no output)"


def sbatch(script: str, args: Sequence[str] = (), environ: Optional[Mapping[str, str]] = None) -> str:
    """Submit; return the job id (``sbatch --parsable`` prints ``id[;cluster]``)."""
    proc = _run([_tool("sbatch"), "--parsable", *args, script], environ)
    if proc.returncode != 0:
        raise SchedulerError(
            f"sbatch refused the job (exit {proc.returncode}): {_last_line(proc.stderr or proc.stdout)}"
        )
    job = proc.stdout.strip().split(";")[0]
    if not job.isdigit():
        raise SchedulerError(f"sbatch --parsable printed {proc.stdout.strip()!r}, not a job id")
    return job


def _squeue(jobs: Sequence[str], environ) -> Tuple[Dict[str, TaskState], List[str]]:
    # -r: one line per array task (pending tasks too); -t all: finished ones the
    # controller still remembers (MinJobAge).
    argv = [_tool("squeue"), "-h", "-r", "-t", "all", "-o", "%i|%T|%r"]
    proc = _run([*argv, "-j", ",".join(jobs)], environ)
    if proc.returncode != 0:
        # One forgotten job id fails the whole query: ask for each job alone.
        outputs = []
        for job in jobs:
            one = _run([*argv, "-j", job], environ)
            if one.returncode == 0:
                outputs.append(one.stdout)
            elif "Invalid job id" not in one.stderr:
                # Not a forgotten job: the scheduler did not answer; guessing would
                # call running shards stopped.
                raise SchedulerError(f"squeue failed (exit {one.returncode}): {_last_line(one.stderr)}")
        text = "\n".join(outputs)
    else:
        text = proc.stdout
    notes: List[str] = []
    states = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) >= 2 and "_" in parts[0]:
            states[parts[0]] = TaskState(parts[0], parts[1], parts[2] if len(parts) > 2 else "")
    return states, notes


def _sacct(jobs: Sequence[str], environ) -> Tuple[Dict[str, TaskState], List[str]]:
    if shutil.which("sacct") is None:
        return {}, ["sacct not found: tasks that left the queue show as unknown"]
    proc = _run(
        [_tool("sacct"), "-n", "-P", "-X", "-j", ",".join(jobs), "-o", "JobID,State,ExitCode"], environ
    )
    if proc.returncode != 0:
        return {}, [
            f"sacct: {_last_line(proc.stderr or proc.stdout)}; tasks that left the queue show as unknown"
        ]
    states = {}
    for line in proc.stdout.splitlines():
        parts = line.strip().split("|")
        if len(parts) >= 3 and "_" in parts[0] and "[" not in parts[0]:
            # "CANCELLED by 0" -> CANCELLED
            states[parts[0]] = TaskState(
                parts[0], parts[1].split()[0] if parts[1] else "", f"exit {parts[2]}", "sacct"
            )
    return states, []


def task_states(
    tasks: Iterable[str], environ: Optional[Mapping[str, str]] = None
) -> Tuple[Dict[str, TaskState], List[str]]:
    """State of each ``<job>_<index>`` from squeue, then sacct for those the queue has
    forgotten. Returns (states, notes); a task found nowhere is absent."""
    tasks = sorted(set(tasks))
    if not tasks:
        return {}, []
    jobs = sorted({t.split("_")[0] for t in tasks}, key=int)
    states, notes = _squeue(jobs, environ)
    missing = [t for t in tasks if t not in states]
    if missing:
        more, more_notes = _sacct(sorted({t.split("_")[0] for t in missing}, key=int), environ)
        states.update({t: more[t] for t in missing if t in more})
        if any(t not in states for t in missing):
            notes.extend(more_notes)
    return {t: states[t] for t in tasks if t in states}, notes

"""What a batch dir remembers between drivers: ops_status.csv, the attempt journal,
set-aside dirs and the driver lock.

Layout of a batch dir::

    plan.json            the plan this batch ran (ops, device per op, settings)
    ops_status.csv       one row per operator, rewritten atomically as each finishes
    attempts.jsonl       one line per attempt started / finished (resume reads it)
    <op>/                the run dir of the attempt that produced the op's status
    logs/<op>/...        stdout+stderr of every attempt of ``zlbench run``
    set-aside/<op>/...   run dirs of earlier attempts and of interrupted drivers
    batch.log            the driver's own event lines (markers included)

A sharded screen (``--shard K/N --out OUT``) is one such batch dir per host shard,
``OUT/shard-K-of-N/``, and ``OUT/slurm/`` when Slurm ran it (``zlbench slurm``).
"""

from __future__ import annotations

import csv
import io
import re
import json
import os
import shutil
import socket
import threading
import time
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, Mapping, Optional

from filelock import FileLock, Timeout

from ..atomic import write_atomic

COLUMNS = ["operator", "status", "attempts", "dtype_level", "dtypes", "backend", "device",
           "timer", "duration_s", "total_s", "exit_code", "reason", "notes", "run_dir",
           # How the last attempt ran and where its time went (batch.activity.split_phases).
           "run_mode", "timeout_kind", "startup_s", "collect_s", "first_call_s", "measure_s",
           "overhead_s"]
STATUS_FILE = "ops_status.csv"
JOURNAL_FILE = "attempts.jsonl"
PLAN_FILE = "plan.json"
SET_ASIDE_DIR = "set-aside"
LOGS_DIR = "logs"
BATCH_LOG = "batch.log"
DRIVER_LOCK = ".driver.lock"
DRIVER_INFO = "driver.json"
# Names inside a batch dir that are not operator run dirs.
RESERVED = {SET_ASIDE_DIR, LOGS_DIR}
# A sharded screen run by Slurm keeps its scheduler files in <screen>/slurm/.
SLURM_DIR = "slurm"
SLURM_SCRIPT = "array.sbatch"            # the job script, rewritten by each submission
SLURM_SUBMISSIONS = "submissions.jsonl"  # one line per sbatch: job id, array indices, argv
SLURM_SCREEN = "screen.json"             # shard count and settings of the first submission
SLURM_TASK_LOG = "shard-%a-job-%A.out"   # sbatch's --output pattern: one log per task
SHARD_DIR_RE = re.compile(r"^shard-(\d+)-of-(\d+)$")


def shard_dir_name(index: int, count: int) -> str:
    """``shard-K-of-N``: host shard K's batch dir inside a sharded screen's dir."""
    return f"shard-{index}-of-{count}"


def parse_shard_dir_name(name: str) -> Optional[tuple]:
    """(K, N) of a ``shard-K-of-N`` name, else None."""
    m = SHARD_DIR_RE.match(name)
    return (int(m.group(1)), int(m.group(2))) if m else None


class BatchError(Exception):
    """A batch that cannot start or continue; the message says what to change."""


def is_complete(run_dir: Path) -> bool:
    return (run_dir / ".complete").is_file()


class StatusFile:
    """ops_status.csv: read-modify-write under a file lock (other drivers, readers)
    and a thread lock (filelock is re-entrant within one process)."""

    def __init__(self, batch_dir: Path):
        self.path = batch_dir / STATUS_FILE
        self._file_lock = FileLock(str(self.path) + ".lock")
        self._thread_lock = threading.Lock()

    def read(self) -> Dict[str, Dict[str, str]]:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {}
        return {row["operator"]: row for row in csv.DictReader(io.StringIO(text)) if row.get("operator")}

    def update(self, rows: Iterable[Mapping[str, object]]) -> None:
        rows = list(rows)
        if not rows:
            return
        with self._thread_lock, self._file_lock:
            current = self.read()
            for row in rows:
                current[str(row["operator"])] = {c: _cell(row.get(c)) for c in COLUMNS}
            out = io.StringIO()
            writer = csv.DictWriter(out, fieldnames=COLUMNS, extrasaction="ignore")
            writer.writeheader()
            for op in sorted(current):
                writer.writerow({c: current[op].get(c, "") for c in COLUMNS})
            write_atomic(self.path, out.getvalue())


def read_durations(batch_dir: Path) -> Dict[str, float]:
    """Seconds each operator took in an earlier batch (``total_s``: every attempt), for
    ``--balance-from``. Raises BatchError when the dir holds no ops_status.csv."""
    path = Path(batch_dir) / STATUS_FILE
    if not path.is_file():
        raise BatchError(f"--balance-from {batch_dir}: no {STATUS_FILE} there; give an earlier "
                         "batch dir")
    out: Dict[str, float] = {}
    for op, row in StatusFile(Path(batch_dir)).read().items():
        try:
            seconds = float(row.get("total_s") or row.get("duration_s") or "")
        except ValueError:
            continue   # dismissed, or never run: no duration to plan with
        out[op] = seconds
    if not out:
        raise BatchError(f"--balance-from {batch_dir}: {STATUS_FILE} has no operator with a "
                         "duration (total_s)")
    return out


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


class Journal:
    """attempts.jsonl: append-only, one JSON object per line."""

    def __init__(self, batch_dir: Path, session: str):
        self.path = batch_dir / JOURNAL_FILE
        self.session = session
        self._lock = threading.Lock()

    def record(self, event: str, **fields: object) -> None:
        line = json.dumps({"t": round(time.time(), 3), "session": self.session, "event": event,
                           **fields}, default=str) + "\n"
        with self._lock:
            # One write() of one line with O_APPEND: a killed driver leaves whole lines.
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, line.encode())
            finally:
                os.close(fd)

    def events(self) -> Iterator[dict]:
        return read_journal(self.path)


def read_journal(path: Path) -> Iterator[dict]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return iter(())
    out = []
    for line in text.splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue  # a line cut by a crash
    return iter(out)


def set_aside(batch_dir: Path, op: str, label: str) -> Optional[Path]:
    """Move ``<batch>/<op>`` to ``<batch>/set-aside/<op>/<label>`` (never deleted).
    Returns where it went, or None when there was nothing to move."""
    src = batch_dir / op
    if not src.exists():
        return None
    parent = batch_dir / SET_ASIDE_DIR / op
    parent.mkdir(parents=True, exist_ok=True)
    dest = parent / label
    n = 2
    while dest.exists():
        dest = parent / f"{label}-{n}"
        n += 1
    try:
        os.rename(src, dest)
    except OSError:
        shutil.move(str(src), str(dest))
    return dest


class DriverLock:
    """One driver per batch dir: a second one is refused while the first lives. The
    lock is the kernel's, so a driver killed with SIGKILL releases it."""

    def __init__(self, batch_dir: Path):
        self.batch_dir = batch_dir
        self._lock = FileLock(str(batch_dir / DRIVER_LOCK), timeout=0)

    def acquire(self) -> None:
        try:
            self._lock.acquire()
        except Timeout:
            holder = _read_json(self.batch_dir / DRIVER_INFO)
            who = f"pid {holder.get('pid')} on {holder.get('host')}" if holder else "another process"
            raise BatchError(
                f"{self.batch_dir} is in use by another zlbench batch ({who}); wait for it to "
                "finish, stop it, or give another --out") from None
        write_atomic(self.batch_dir / DRIVER_INFO, json.dumps(
            {"pid": os.getpid(), "host": socket.gethostname(),
             "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}) + "\n")

    def release(self) -> None:
        self._lock.release()


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def read_identity(run_dir: Path) -> dict:
    return _read_json(run_dir / "run_identity.json")


def last_attempts(journal: Iterable[dict]) -> Dict[str, List[dict]]:
    """Per operator, the 'attempt' events of the latest session that ran it."""
    by_op: Dict[str, List[dict]] = {}
    for ev in journal:
        if ev.get("event") != "attempt":
            continue
        op = ev.get("op")
        runs = by_op.setdefault(op, [])
        if runs and runs[-1].get("session") != ev.get("session"):
            runs.clear()
        runs.append(ev)
    return by_op


def tail_lines(path: Path, max_bytes: int = 65536) -> List[str]:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            data = f.read()
    except OSError:
        return []
    return data.decode("utf-8", "replace").splitlines()

"""What a batch driver keeps between attempts and between drivers, beyond the files
zlbench.rundir reads and writes: the driver lock, the last attempts per operator, the
tail of an attempt's log."""

from __future__ import annotations

import os
import socket
import stat
import time
from pathlib import Path
from typing import Dict, Iterable, List

from filelock import FileLock, Timeout

from .. import rundir


class BatchError(Exception):
    """A batch that cannot start or continue; the message says what to change."""


class DriverLock:
    """One driver per batch dir: a second one is refused while the first lives. The
    lock is the kernel's, so a driver killed with SIGKILL releases it."""

    def __init__(self, batch_dir: Path):
        self.batch_dir = batch_dir
        self._lock = FileLock(str(rundir.driver_lock_path(batch_dir)), timeout=0)

    def acquire(self) -> None:
        try:
            self._lock.acquire()
        except Timeout:
            holder = rundir.read_driver_info(self.batch_dir)
            who = f"pid {holder.get('pid')} on {holder.get('host')}" if holder else "another process"
            raise BatchError(
                f"{self.batch_dir} is in use by another zlbench batch ({who}); wait for it to "
                "finish, stop it, or give another --out"
            ) from None
        rundir.write_driver_info(
            self.batch_dir,
            {
                "pid": os.getpid(),
                "host": socket.gethostname(),
                "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            },
        )

    def release(self) -> None:
        self._lock.release()


def read_durations(batch_dir: Path) -> Dict[str, float]:
    """Seconds each operator took in an earlier batch (``total_s``: every attempt), for
    ``--balance-from``. Raises BatchError when the dir holds no ops_status.csv."""
    if not rundir.status_path(Path(batch_dir)).is_file():
        raise BatchError(
            f"--balance-from {batch_dir}: no {rundir.STATUS_FILE} there; give an earlier batch dir"
        )
    out: Dict[str, float] = {}
    for op, row in rundir.StatusFile(Path(batch_dir)).read().items():
        try:
            seconds = float(row.get("total_s") or row.get("duration_s") or "")
        except ValueError:
            continue  # dismissed, or never run: no duration to plan with
        out[op] = seconds
    if not out:
        raise BatchError(
            f"--balance-from {batch_dir}: {rundir.STATUS_FILE} has no operator with a duration (total_s)"
        )
    return out


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
    """The last lines of a log; [] for anything but a regular file (a FIFO an operator
    left in its run dir must not block the driver)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return []
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return []
        size = os.lseek(fd, 0, os.SEEK_END)
        os.lseek(fd, max(0, size - max_bytes), os.SEEK_SET)
        data = os.read(fd, max_bytes)
    except OSError:
        return []
    finally:
        os.close(fd)
    return data.decode("utf-8", "replace").splitlines()

"""Whether an attempt failed because of the batch's storage rather than its operator.

A full disk, a batch dir removed or made unwritable, a run dir deleted under a running
operator: each makes an attempt fail, and none is the operator's doing. Retrying it or
walking the dtype ladder spends attempts on the wrong culprit and ends in a row that
blames the operator (or says "ok at level 1"). So after each attempt the batch looks at
its own storage; what it finds stops the batch with one line naming the path, and
--resume continues once the storage is fixed.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Optional, Tuple

# Written, synced and removed in the batch dir after a failed attempt: a file system
# that cannot take this cannot take the operator's run.log either.
PROBE_BYTES = 64 * 1024

DirId = Tuple[int, int]


class EnvironmentFailure(OSError):
    """The batch's storage, not an operator, failed an attempt. ``filename`` is the
    path; ``strerror`` says what happened to it."""


def dir_id(path: Path) -> Optional[DirId]:
    """(device, inode) of a directory, or None when there is none at path."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def after_attempt(batch_dir: Path, run_dir: Path, before: Optional[DirId], failed: bool) -> None:
    """Raise EnvironmentFailure when the batch's storage broke during an attempt.

    ``before``: the run dir's dir_id when the attempt started. Every attempt is checked
    for a batch dir or run dir that went away; a failed one also for a file system that
    is full, read-only or refuses the batch's writes."""
    if not os.path.isdir(batch_dir):
        raise EnvironmentFailure(
            errno.ENOENT, "the batch dir was removed while an operator ran", str(batch_dir)
        )
    if before is not None and dir_id(run_dir) != before:
        raise EnvironmentFailure(
            errno.ENOENT,
            "the operator's run dir was removed (or replaced) while it ran; nothing of "
            "the attempt can be trusted, and the operator is not to blame",
            str(run_dir),
        )
    if failed:
        check_writable(batch_dir)


def check_writable(batch_dir: Path) -> None:
    """Raise EnvironmentFailure when the batch dir's file system is full or refuses a
    write (read-only, permissions, quota)."""
    try:
        fs = os.statvfs(batch_dir)
    except OSError:
        fs = None
    if fs is not None and fs.f_blocks and fs.f_bavail == 0:
        raise EnvironmentFailure(
            errno.ENOSPC, "No space left on device (0 bytes free where the batch writes)", str(batch_dir)
        )
    probe = Path(batch_dir) / f".zlbench-storage-probe-{os.getpid()}"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o600)
        try:
            os.write(fd, b"\0" * PROBE_BYTES)
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as e:
        raise EnvironmentFailure(
            e.errno or errno.EIO, f"{e.strerror or e} (the batch cannot write here)", str(batch_dir)
        ) from None
    finally:
        try:
            os.unlink(probe)
        except OSError:
            pass

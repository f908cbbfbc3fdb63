"""Reading files that an operator's process could have replaced: never block, never
read without bound.

A run dir is written by benchmark code zlbench does not control. A FIFO named run.log
blocks a plain ``open()`` forever, a link to /dev/zero never ends, a 50 GB log fills
memory. Every reader of run and batch files goes through ``read_bytes_capped``: it opens
with O_NONBLOCK (a FIFO opens at once), refuses anything that is not a regular file,
and reads at most ``limit`` bytes.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import Tuple, Union

# Larger than any real run.log of one operator (FlagGems' largest are a few MB).
DEFAULT_LIMIT = 256 * 1024 * 1024


class NotRegularFile(OSError):
    """The path is a FIFO, a device, a socket or a directory: it is not read."""


def read_bytes_capped(path: Union[str, Path], limit: int = DEFAULT_LIMIT) -> Tuple[bytes, bool]:
    """(the first ``limit`` bytes, whether there was more). Raises OSError (and
    NotRegularFile for anything but a regular file)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = (
                "a FIFO"
                if stat.S_ISFIFO(mode)
                else "a device"
                if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
                else "a directory"
                if stat.S_ISDIR(mode)
                else "not a regular file"
            )
            raise NotRegularFile(f"{path} is {kind}, not a regular file; not read")
        chunks = []
        left = limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    return data[:limit], len(data) > limit


def read_text_capped(path: Union[str, Path], limit: int = DEFAULT_LIMIT) -> Tuple[str, bool]:
    """As read_bytes_capped, decoded as UTF-8 with undecodable bytes replaced."""
    data, cut = read_bytes_capped(path, limit)
    return data.decode("utf-8", "replace"), cut


def describe_error(e: OSError) -> str:
    """One line for an OSError: the message of NotRegularFile, else the strerror."""
    if isinstance(e, NotRegularFile):
        return str(e)
    return e.strerror or str(e)


def resolve_path(path: Union[str, Path]) -> Path:
    """``Path(path).expanduser().resolve()``, where a symlink loop is an OSError (ELOOP)
    naming the path, as every other unusable path is (Python before 3.13 raises
    RuntimeError for it)."""
    try:
        return Path(path).expanduser().resolve()
    except RuntimeError:
        raise OSError(
            errno.ELOOP, "a symbolic link loop (it never reaches a file or dir)", str(path)
        ) from None


def missing_reason(path: Union[str, Path]) -> str:
    """Why nothing usable is at ``path``: "does not exist", or what the link there does."""
    if not os.path.lexists(path):
        return "does not exist"
    try:
        os.stat(path)
    except OSError as e:
        if e.errno == errno.ELOOP:
            return "is a symbolic link loop (it never reaches a file or dir)"
        if e.errno == errno.ENOENT:
            return f"is a symbolic link to {os.readlink(path)}, which does not exist"
        return f"cannot be reached ({e.strerror or e})"
    return "exists"

"""Writing a file so that a reader (or a run killed halfway) sees the old contents or
the new, never half of either. Every file zlbench rewrites in place goes through here."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any, Iterable


def write_atomic(path: Path, text: str) -> None:
    # The temp name is unique per process and thread: two writers never share one.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    with open(tmp, "w", encoding="utf-8", newline="") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def write_chunks_atomic(path: Path, chunks: Iterable[str]) -> int:
    """As write_atomic, for text made a piece at a time (a large table or page is never
    one string); no temp file is left behind when making or writing a piece fails.
    Returns the characters written."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    written = 0
    try:
        with open(tmp, "w", encoding="utf-8", newline="") as f:
            for chunk in chunks:
                f.write(chunk)
                written += len(chunk)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return written


def write_json_atomic(path: Path, data: Any) -> None:
    write_atomic(path, json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")

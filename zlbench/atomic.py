"""Writing a file so that a reader (or a run killed halfway) sees the old contents or
the new, never half of either. Every file zlbench rewrites in place goes through here."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any


def write_atomic(path: Path, text: str) -> None:
    # The temp name is unique per process and thread: two writers never share one.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    with open(tmp, "w", encoding="utf-8", newline="") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def write_json_atomic(path: Path, data: Any) -> None:
    write_atomic(path, json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")

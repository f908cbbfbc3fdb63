"""Claiming a run's output dir so that no concurrent run can share it."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Optional

from ..rundir import COMPLETE, is_complete

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def run_dir_name(op: Optional[str], when: Optional[float] = None) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(when))
    return f"{stamp}_{_UNSAFE.sub('-', op or 'node')}"


def claim_run_dir(root: Path, op: Optional[str], when: Optional[float] = None, max_tries: int = 1000) -> Path:
    """``<root>/<YYYYmmdd-HHMMSS>_<op>``, then ``-2``, ``-3``... on collision.

    A bare mkdir is atomic: of two runs started in the same second, exactly one gets
    each name, whatever the file system's locking.
    """
    root.mkdir(parents=True, exist_ok=True)
    base = root / run_dir_name(op, when)
    for n in range(1, max_tries + 1):
        candidate = base if n == 1 else base.with_name(f"{base.name}-{n}")
        try:
            candidate.mkdir()
            return candidate
        except FileExistsError:
            continue
    raise RuntimeError(f"could not claim a run dir under {root} after {max_tries} tries")


def use_run_dir(path: Path) -> Path:
    """An exact dir chosen by the caller (the batch's ``<batch>/<op>``). A finished run
    there is a preflight failure (exit 3), not a failed benchmark."""
    from .preflight import PreflightFailed

    if is_complete(path):
        raise PreflightFailed(
            "run_dir",
            f"{path} already holds a complete run ({COMPLETE}); choose another --run-dir or remove it",
            path,
        )
    path.mkdir(parents=True, exist_ok=True)
    return path

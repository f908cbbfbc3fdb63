"""pytest plugins loaded with ``-p`` into the benchmark process by ``zlbench run``.

Every plugin is a silent no-op unless ``ZL_RUN_DIR`` is set (a plain pytest run stays
plain). Run-level counts go to ``$ZL_RUN_DIR/plugins/<plugin>.json``, which
``zlbench run`` folds into run_identity.json. Nothing here imports torch or triton.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Optional

from ..atomic import write_atomic


def importable_pythonpath(pythonpath: Optional[str]) -> str:
    """PYTHONPATH for a child that loads these plugins with ``-p``.

    The child runs in the corpus root, so a zlbench found only through the caller's
    working directory (``python -m zlbench`` in a source tree) would be missing there;
    this zlbench's parent dir is appended then. An installed zlbench needs nothing, and
    a site-packages dir is never added (on PYTHONPATH it would precede the stdlib).
    """
    import site
    import sysconfig

    parent = str(Path(__file__).resolve().parents[2])
    site_dirs = {str(Path(p).resolve()) for p in [*site.getsitepackages(), site.getusersitepackages(),
                                                   sysconfig.get_paths()["purelib"]]}
    entries = [p for p in (pythonpath or "").split(os.pathsep) if p]
    if parent not in site_dirs and parent not in entries:
        entries.append(parent)
    return os.pathsep.join(entries)


def run_dir() -> Optional[Path]:
    value = os.environ.get("ZL_RUN_DIR")
    return Path(value) if value else None


def write_plugin_json(plugin: str, data: dict) -> Optional[Path]:
    """Write (atomically) ``$ZL_RUN_DIR/plugins/<plugin>.json``; None when unset."""
    root = run_dir()
    if root is None:
        return None
    out_dir = root / "plugins"
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{plugin}.json"
    write_atomic(path, json.dumps(data, indent=2) + "\n")
    return path


def print_line(line: str) -> None:
    """Print a marker or footer on a line of its own, even after a pytest progress
    prefix such as ``benchmark/test_abs.py `` that is still open."""
    sys.stdout.write("\n" + line + "\n")
    sys.stdout.flush()

"""pytest plugins loaded with ``-p`` into the benchmark process by ``zlbench run``.

Every plugin is a silent no-op unless ``ZL_RUN_DIR`` is set (a plain pytest run stays
plain). Run-level counts go to ``$ZL_RUN_DIR/plugins/<plugin>.json``, which
``zlbench run`` folds into run_identity.json. Nothing here imports torch or triton.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

from .. import benchenv, rundir


def run_dir() -> Optional[Path]:
    return benchenv.run_dir()


def write_plugin_json(plugin: str, data: dict) -> Optional[Path]:
    """Write (atomically) ``$ZL_RUN_DIR/plugins/<plugin>.json``; None when unset."""
    root = run_dir()
    if root is None:
        return None
    return rundir.write_plugin_report(root, plugin, data)


def print_line(line: str) -> None:
    """Print a marker or footer on a line of its own, even after a pytest progress
    prefix such as ``benchmark/test_abs.py `` that is still open."""
    sys.stdout.write("\n" + line + "\n")
    sys.stdout.flush()

"""run_identity.json: exactly how a run was measured."""

from __future__ import annotations

import json
import platform
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any, Dict, Optional

# Distributions whose versions define a measurement. flagtree is how several vendors
# ship triton; we never import any of these here.
VERSIONED = ("torch", "triton", "flagtree", "flag_gems", "torch_musa", "torch_npu", "pytest")


def package_versions() -> Dict[str, Optional[str]]:
    out: Dict[str, Optional[str]] = {"python": platform.python_version()}
    for name in VERSIONED:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def collect_plugin_reports(run_dir: Path) -> Dict[str, Any]:
    """Fold $ZL_RUN_DIR/plugins/<plugin>.json files into one mapping."""
    out: Dict[str, Any] = {}
    for path in sorted((run_dir / "plugins").glob("*.json")):
        try:
            out[path.stem] = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            out[path.stem] = {"unreadable": str(e)}
    return out


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def command_line() -> str:
    return " ".join(sys.argv)

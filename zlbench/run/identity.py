"""run_identity.json: exactly how a run was measured."""

from __future__ import annotations

import platform
import sys
import time
from importlib import metadata
from typing import Dict, Optional

from .. import backends

# Distributions whose versions define a measurement, with each backend's torch
# extension (backends/<vendor>.py). flagtree is how several vendors ship triton; we
# never import any of these here.
VERSIONED = ("torch", "triton", "flagtree", "flag_gems", *backends.union("torch_extensions"), "pytest")


def package_versions() -> Dict[str, Optional[str]]:
    out: Dict[str, Optional[str]] = {"python": platform.python_version()}
    for name in VERSIONED:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def command_line() -> str:
    return " ".join(sys.argv)

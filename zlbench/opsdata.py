"""Where the curated ops/ data directory is, and how its YAML files are read.

``$ZL_OPS_DIR`` wins; otherwise the repo-root ``ops/`` beside the zlbench package
(zlbench is installed editable, so the package sits in its checkout).
"""

from __future__ import annotations

import os
from pathlib import Path

OPS_DIR_ENV = "ZL_OPS_DIR"


class OpsDataError(Exception):
    """Missing or malformed ops/ data; the message names the file and the fix."""


def read_yaml(path: Path, error: type, missing: str, what: str = "", loader=None):
    """The YAML document at ``path``; ``error(message)`` when it is absent or invalid.

    ``missing`` is the whole message for an absent file; ``what`` prefixes the path in
    the invalid-YAML message ("shape file "). ``loader`` is a safe yaml Loader class
    (default ``yaml.SafeLoader``)."""
    if not path.is_file():
        raise error(missing)
    return parse_yaml(path.read_text(encoding="utf-8"), path, error, what, loader)


def parse_yaml(text: str, path: Path, error: type, what: str = "", loader=None):
    """``read_yaml`` for text already read from ``path``."""
    import yaml

    try:
        return yaml.load(text, Loader=loader or yaml.SafeLoader)
    except yaml.YAMLError as exc:
        raise error(f"{what}{path} is not valid YAML: {exc}") from exc


def ops_dir() -> Path:
    env = os.environ.get(OPS_DIR_ENV)
    if env:
        path = Path(env).expanduser()
        if not path.is_dir():
            raise OpsDataError(f"{OPS_DIR_ENV}={env} is not a directory; point it at an ops/ data dir")
        return path
    path = Path(__file__).resolve().parents[1] / "ops"
    if not path.is_dir():
        raise OpsDataError(
            f"no ops/ data dir at {path}; install zlbench editable from its checkout "
            f"(pip install -e .) or set {OPS_DIR_ENV}"
        )
    return path


def inventory_path(name: str) -> Path:
    return ops_dir() / "inventory" / f"{name}.yaml"


def dismiss_path() -> Path:
    return ops_dir() / "dismiss.yaml"


def compat_table_path(backend: str) -> Path:
    return ops_dir() / "compat" / f"{backend}_skip_overrides.yaml"

"""Checks that must pass before any pytest starts.

A failure here is a broken environment, not a broken operator: it prints
``PREFLIGHT_FAILED check=<name> path=<path> ...`` and ``zlbench run`` exits 3, which
the batch layer reads as "do not retry, do not blame the operator".
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from .. import knobs
from ..markers import PREFLIGHT_FAILED, format_marker
from ..rundir import replay_records
from ..safe_read import missing_reason, resolve_path


class PreflightFailed(Exception):
    def __init__(self, check: str, message: str, path: Optional[Path] = None):
        super().__init__(message)
        self.check = check
        self.path = path

    def marker(self) -> str:
        return format_marker(
            PREFLIGHT_FAILED, check=self.check, path=str(self.path) if self.path else None, reason=str(self)
        )


SHAPE_FILE_VAR = knobs.BY_NAME["shape_file"].env


def check_shape_file(shape_mode: str, shape_file: Optional[str]) -> Optional[Path]:
    if shape_mode == "file":
        if not shape_file:
            raise PreflightFailed(SHAPE_FILE_VAR, "SHAPE_MODE=file needs a shape file: give --shape-file")
        try:
            path = resolve_path(shape_file)
        except OSError:
            path = Path(shape_file)
        if not path.is_file():
            why = "is not a file" if path.is_dir() else missing_reason(shape_file)
            raise PreflightFailed(SHAPE_FILE_VAR, f"shape file {shape_file} {why}", path)
        from ..corpus.shapes import shape_file_problem

        problem = shape_file_problem(path)
        if problem:
            raise PreflightFailed(SHAPE_FILE_VAR, f"shape file {shape_file}: {problem}", path)
        return path
    return None


def check_replay_from(replay_from: Optional[str]) -> Optional[Path]:
    """The autotune_records/ dir to replay: given directly, or a run dir holding one."""
    if not replay_from:
        return None
    path = Path(replay_from).expanduser().resolve()
    var = knobs.BY_NAME["replay_from"].env
    if not path.is_dir():
        raise PreflightFailed(var, f"{var} {replay_from} is not a directory", path)
    path = replay_records(path)
    if not any(path.glob("*.json")):
        raise PreflightFailed(var, f"{var} {path} holds no autotune records (*.json)", path)
    return path


def check_torch_importable() -> None:
    """The benchmark process needs torch; say so before pytest fails obscurely.
    (find_spec locates it without importing it into the orchestrator.)"""
    import importlib.util
    import sys

    if importlib.util.find_spec("torch") is None:
        raise PreflightFailed(
            "torch",
            f"torch is not importable by {sys.executable}: install your backend's torch "
            "build (on a CPU machine: pip install torch==2.13.0)",
        )


def check_plugins_importable(plugins) -> None:
    """Every planned -p plugin must be findable, or pytest dies before collecting."""
    import importlib.util

    missing = [name for name in plugins if importlib.util.find_spec(name) is None]
    if missing:
        raise PreflightFailed(
            "plugins",
            f"plugin module(s) not importable: {', '.join(missing)}; reinstall zlbench (pip install -e .)",
        )

"""Curated shape files: check and complete them against upstream's class keys.

FlagGems' ``Benchmark.set_shapes`` looks a shape file up by op name, then by each
class name along the benchmark's class chain, then falls back to built-in 1-D
defaults. A curated file that lists only a few operators therefore still needs every
class key upstream ``core_shapes.yaml`` has: without ``BlasBenchmark`` the BLAS family
gets 1-D shapes and crashes unpacking ``(b, m, n, k)``.

Class keys are the CamelCase keys (class names); operator keys are aten names, which
are lower case.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import yaml

from ..opsdata import OpsDataError, parse_yaml
from ..safe_read import describe_error, read_bytes_capped
from .layout import UPSTREAM_SHAPES, bench_dir_name

_CLASS_KEY = re.compile(r"^[A-Z][A-Za-z0-9_]*$")


class ShapeFileError(OpsDataError):
    pass


@dataclass
class ShapeCheck:
    path: Path
    missing_class_keys: List[str]
    unknown_keys: List[str] = field(default_factory=list)  # neither an operator nor a class

    @property
    def ok(self) -> bool:
        return not self.missing_class_keys


def is_class_key(key: str) -> bool:
    return bool(_CLASS_KEY.match(str(key)))


def class_keys(shapes: Dict[str, Any]) -> List[str]:
    return sorted(k for k in shapes if is_class_key(k))


def load_shape_file(path: Path) -> Dict[str, Any]:
    return _read_shape_file(Path(path))[1]


def _read_shape_file(path: Path) -> Tuple[str, Dict[str, Any]]:
    """(text, keys) of a shape file; merge keeps the text, so it is read once."""
    if not path.is_file():
        raise ShapeFileError(f"shape file {path} does not exist")
    text = path.read_text(encoding="utf-8")
    data = parse_yaml(text, path, ShapeFileError, "shape file ")
    if data is None:
        return text, {}
    if not isinstance(data, dict):
        raise ShapeFileError(
            f"shape file {path} must map keys to {{shapes: [...]}}, found a {type(data).__name__}"
        )
    return text, data


def shape_file_problem(path: Path) -> str:
    """Why FlagGems could not use this shape file ("" when it can): checked before any
    operator runs, so a malformed file is one error, not a failed attempt per operator.
    FlagGems reads a mapping of key -> {shapes: [[...], ...], shape_desc: ...} (some keys
    map straight to a list)."""
    try:
        data_bytes, cut = read_bytes_capped(path, SHAPE_FILE_LIMIT)
    except OSError as e:
        return f"cannot read it ({describe_error(e)})"
    if cut:
        return f"larger than {SHAPE_FILE_LIMIT // (1024 * 1024)} MiB"
    try:
        text = data_bytes.decode("utf-8")
    except UnicodeDecodeError:
        return "not a text file (not UTF-8)"
    try:
        data = parse_yaml(text, path, ShapeFileError, "shape file ")
    except ShapeFileError as e:
        return str(e).splitlines()[0]
    if data is None:
        return ""
    if not isinstance(data, dict):
        return f"must map keys to {{shapes: [...]}}, found a YAML {type(data).__name__}"
    for key, value in data.items():
        shapes = value.get("shapes") if isinstance(value, dict) else value
        if isinstance(value, dict) and "shapes" not in value:
            continue
        if not isinstance(shapes, list) or not all(isinstance(s, (list, int)) for s in shapes):
            return f"key {key!r}: shapes must be a list of shapes (lists of sizes)"
    return ""


SHAPE_FILE_LIMIT = 16 * 1024 * 1024


def upstream_shapes_path(upstream: Path) -> Path:
    """``upstream`` may be a core_shapes.yaml or a checkout root holding benchmark/."""
    upstream = Path(upstream)
    if upstream.is_dir():
        return upstream / bench_dir_name(upstream) / UPSTREAM_SHAPES
    return upstream


def check_shape_file(
    path: Path, upstream_class_keys: List[str], known_keys: Optional[List[str]] = None
) -> ShapeCheck:
    """Missing upstream class keys (an error) and, given ``known_keys``, unknown keys."""
    data = load_shape_file(path)
    missing = sorted(k for k in upstream_class_keys if k not in data)
    unknown: List[str] = []
    if known_keys is not None:
        known = set(known_keys) | set(upstream_class_keys)
        unknown = sorted(k for k in data if k not in known and isinstance(data[k], dict))
    return ShapeCheck(Path(path), missing, unknown)


def merge_class_keys(path: Path, upstream: Dict[str, Any], out: Optional[Path] = None) -> List[str]:
    """Append upstream's missing class keys to a shape file; return the keys added.

    The file's own text (comments, anchors, order) is kept: the added keys go at the
    end, as plain YAML, and the result is re-read to make sure it parses.
    """
    path = Path(path)
    text, data = _read_shape_file(path)
    missing = [k for k in class_keys(upstream) if k not in data]
    target = Path(out) if out else path
    if missing:
        block = yaml.safe_dump(
            {k: upstream[k] for k in missing}, sort_keys=False, default_flow_style=None, width=100
        )
        if text and not text.endswith("\n"):
            text += "\n"
        text += (
            "\n# Class keys from upstream core_shapes.yaml (zlbench ops shapes merge):\n"
            "# FlagGems falls back to them for operators this file does not list.\n" + block
        )
    merged = yaml.safe_load(text) or {}
    still = [k for k in class_keys(upstream) if k not in merged]
    if still:
        raise ShapeFileError(f"merging into {target} left class keys missing: {', '.join(still)}")
    target.write_text(text, encoding="utf-8")
    return missing

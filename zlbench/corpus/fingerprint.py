"""What a batch measured against: the corpus' operator list, its shape files and its
benchmark sources, as one record (plan.json's "corpus").

A batch continued with --resume must measure its remaining operators against the same
corpus as the ones it kept: a changed shape file would give them other shapes under the
same caliber, an operator added would silently not run. ``changes`` says what differs
between two fingerprints, so the resume can refuse with it (or re-plan when asked).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence

from .layout import TreeError, bench_dir_name

SHAPE_SUFFIXES = (".yaml", ".yml")
SOURCE_SUFFIXES = (".py", ".ini", ".cfg", ".toml")
# Files beside benchmark/ that change how pytest collects and runs it.
ROOT_FILES = ("pytest.ini", "conftest.py")
# Names listed in a changes line before "and N more".
SHOWN = 8


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def fingerprint(root: Path, operators: Sequence[str], shape_file: Optional[str] = None) -> Dict[str, object]:
    """{"operators": [...], "shape_files": {path: sha256}, "sources": {path: sha256}};
    paths relative to ``root`` (a --shape-file outside the tree by its absolute path)."""
    root = Path(root)
    shapes: Dict[str, str] = {}
    sources: Dict[str, str] = {}
    try:
        bench = root / bench_dir_name(root)
        files = [p for p in sorted(bench.rglob("*")) if "__pycache__" not in p.parts]
    except (TreeError, OSError):
        files = []
    files += [root / name for name in ROOT_FILES]
    for path in files:
        if not path.is_file():
            continue
        rel = path.relative_to(root).as_posix()
        try:
            if path.suffix in SHAPE_SUFFIXES:
                shapes[rel] = _digest(path)
            elif path.suffix in SOURCE_SUFFIXES:
                sources[rel] = _digest(path)
        except OSError as e:
            sources[rel] = f"unreadable: {e.strerror or e}"
    if shape_file:
        path = Path(shape_file)
        try:
            shapes[str(path)] = _digest(path)
        except OSError as e:
            shapes[str(path)] = f"unreadable: {e.strerror or e}"
    return {"operators": sorted(operators), "shape_files": shapes, "sources": sources}


def _names(items: List[str]) -> str:
    shown = ", ".join(items[:SHOWN])
    return shown + (f" and {len(items) - SHOWN} more" if len(items) > SHOWN else "")


def _files(old: Mapping[str, str], new: Mapping[str, str]) -> List[str]:
    out = []
    for name in sorted(set(old) | set(new)):
        if name not in new:
            out.append(f"{name} (gone)")
        elif name not in old:
            out.append(f"{name} (new)")
        elif old[name] != new[name]:
            out.append(name)
    return out


def _list(value: object) -> List[str]:
    return [str(v) for v in value] if isinstance(value, list) else []


def _map(value: object) -> Dict[str, str]:
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}


def changes(old: Mapping[str, object], new: Mapping[str, object]) -> Dict[str, List[str]]:
    """What differs: keys "added", "removed" (operators), "shape_files", "sources"
    (files changed, new or gone); only the keys that differ."""
    out: Dict[str, List[str]] = {}
    old_ops, new_ops = set(_list(old.get("operators"))), set(_list(new.get("operators")))
    if new_ops - old_ops:
        out["added"] = sorted(new_ops - old_ops)
    if old_ops - new_ops:
        out["removed"] = sorted(old_ops - new_ops)
    for key in ("shape_files", "sources"):
        diff = _files(_map(old.get(key)), _map(new.get(key)))
        if diff:
            out[key] = diff
    return out


def describe(diff: Mapping[str, List[str]]) -> str:
    """One line: "operators added: a, b; shape files changed: benchmark/core_shapes.yaml"."""
    labels = {
        "added": "operators added",
        "removed": "operators removed",
        "shape_files": "shape files changed",
        "sources": "benchmark sources changed",
    }
    return "; ".join(f"{labels[k]}: {_names(v)}" for k, v in diff.items())

"""Where pytest nodes come from, and how an operator name becomes one.

Both providers hand out a FlagGems-format tree (a root whose benchmark/ holds a
conftest, a Benchmark base and test files); node resolution is shared and knows both
FlagGems layouts:

- HEAD: ``benchmark/test_<op>.py`` with ``@pytest.mark.<op>`` on each test function.
- v5.0.2: ``benchmark/test_*_perf.py`` where operators are marks inside parametrize;
  one is selected with ``-m <op>``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

from ..ops.scan import MIRROR_FILES as V502_DUPLICATE_FILES  # -m mm would run BLAS twice
from ..ops.tree import TreeError, bench_dir_name


class ResolveError(Exception):
    """An operator or node that cannot be found; ``check`` names the preflight check."""

    def __init__(self, check: str, path: Path, message: str):
        super().__init__(message)
        self.check = check
        self.path = path


@dataclass
class Target:
    """What to hand pytest for one operator."""

    root: Path                       # cwd of the benchmark process (parent of benchmark/)
    pytest_args: List[str]           # node/file selection, e.g. [file, "-m", op]
    test_node: str                   # human-readable resolved node, recorded in identity
    op: Optional[str]
    bench_files: List[Path]
    layout: str                      # "head" or "v5.0.2"
    upstream_shape_file: Path
    env: Dict[str, str] = field(default_factory=dict)


def detect_layout(bench_dir: Path) -> str:
    if (bench_dir / "base.py").is_file():
        return "head"
    if (bench_dir / "performance_utils.py").is_file():
        return "v5.0.2"
    if any(bench_dir.glob("test_*_perf.py")):
        return "v5.0.2"
    return "head"


def _mark_re(op: str) -> "re.Pattern[str]":
    return re.compile(r"(?:pytest\.mark\.|mark\.)" + re.escape(op) + r"\b(?!\w)")


def _files_with_mark(files: List[Path], op: str) -> List[Path]:
    pattern = _mark_re(op)
    quoted = re.compile(r"""["']""" + re.escape(op) + r"""["']""")
    hits = []
    for path in files:
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        if pattern.search(text) or quoted.search(text):
            hits.append(path)
    return hits


def _functions_with_mark(path: Path, op: str) -> List[str]:
    """Test functions decorated with @pytest.mark.<op> (HEAD layout), by text."""
    names: List[str] = []
    pending = False
    pattern = _mark_re(op)
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        stripped = line.strip()
        if stripped.startswith("@") and pattern.search(stripped):
            pending = True
        elif stripped.startswith("def ") and pending:
            names.append(stripped[4:].split("(", 1)[0].strip())
            pending = False
        elif stripped and not stripped.startswith("@"):
            pending = False
    return names


def resolve_node(root: Path, op: Optional[str], op_file: Optional[str],
                 test_node: Optional[str]) -> Target:
    try:
        # benchmark/ in a checkout, flaggems_benchmark/ in the installed package
        bench = root / bench_dir_name(root)
    except TreeError:
        raise ResolveError("benchmark_dir", root / "benchmark",
                           f"no benchmark/ under {root}: point --flaggems-dir at the FlagGems checkout root"
                           ) from None
    layout = detect_layout(bench)
    upstream = bench / "core_shapes.yaml"

    if test_node:
        file_part = test_node.split("::", 1)[0]
        path = (root / file_part) if not Path(file_part).is_absolute() else Path(file_part)
        if not path.exists():
            raise ResolveError("benchmark_file", path,
                               f"TEST_NODE file {file_part} does not exist under {root}")
        return Target(root, [test_node], test_node, op, [path], layout, upstream)

    if not op:
        raise ResolveError("op", root, "nothing to run: give --op (OP) or --test-node (TEST_NODE)")

    if op_file:
        path = Path(op_file)
        if not path.is_absolute():
            path = root / op_file if (root / op_file).exists() else bench / op_file
        if not path.is_file():
            raise ResolveError("benchmark_file", path, f"OP_FILE {op_file} does not exist under {root}")
        candidates = [path]
    elif layout == "head" and (bench / f"test_{op}.py").is_file():
        candidates = [bench / f"test_{op}.py"]
    else:
        pool = sorted(p for p in bench.rglob("test_*.py")
                      if p.name not in V502_DUPLICATE_FILES)
        candidates = _files_with_mark(pool, op)
        if not candidates:
            raise ResolveError("benchmark_file", bench / f"test_{op}.py",
                               f"no benchmark file marks operator {op!r} under {bench}; "
                               "check the name or give --op-file / --test-node")

    rel = [str(p.relative_to(root)) if p.is_relative_to(root) else str(p) for p in candidates]
    functions = []
    for path, relpath in zip(candidates, rel):
        functions += [f"{relpath}::{fn}" for fn in _functions_with_mark(path, op)]
    display = " ".join(functions) if functions else f"{' '.join(rel)} -m {op}"
    return Target(root, [*rel, "-m", op], display, op, candidates, layout, upstream)


def list_ops(root: Path) -> List[str]:
    """Every operator mark of a tree, in either layout (v5.0.2's marks live inside
    parametrize), read by AST without importing anything."""
    from ..ops.scan import scan_tree

    return sorted({mark for entry in scan_tree(root) for mark in entry.marks})

"""Which pytest node measures operator X, read from the tree's AST.

Both providers hand out a FlagGems-format tree (a root whose benchmark/ holds a
conftest, a Benchmark base and test files); resolution knows both FlagGems layouts:

- HEAD: ``benchmark/test_<op>.py`` with ``@pytest.mark.<op>`` on each test function.
- v5.0.2: ``benchmark/test_*_perf.py`` where operators are marks inside parametrize;
  one is selected with ``-m <op>``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

from ..suggest import close_names
from .layout import UPSTREAM_SHAPES, TreeError, bench_dir_name, detect_layout
from .scan import TestEntry, scan_module, scan_tree
from .tree import BenchTree


class ResolveError(Exception):
    """An operator or node that cannot be found; ``check`` names the preflight check."""

    def __init__(self, check: str, path: Path, message: str):
        super().__init__(message)
        self.check = check
        self.path = path


@dataclass
class Target:
    """What to hand pytest for one operator."""

    root: Path  # cwd of the benchmark process (parent of benchmark/)
    pytest_args: List[str]  # node/file selection, e.g. [file, "-m", op]
    test_node: str  # human-readable resolved node, recorded in identity
    op: Optional[str]
    bench_files: List[Path]
    layout: str  # "head" or "v5.0.2"
    upstream_shape_file: Path
    env: Dict[str, str] = field(default_factory=dict)


def resolve_node(root: Path, op: Optional[str], op_file: Optional[str], test_node: Optional[str]) -> Target:
    try:
        # benchmark/ in a checkout, flaggems_benchmark/ in the installed package
        bench = root / bench_dir_name(root)
    except TreeError:
        raise ResolveError(
            "benchmark_dir",
            root / "benchmark",
            f"no benchmark/ under {root}: point --flaggems-dir at the FlagGems checkout root",
        ) from None
    try:
        layout = detect_layout(root)
    except TreeError as e:
        raise ResolveError("benchmark_dir", bench, str(e)) from None
    upstream = bench / UPSTREAM_SHAPES

    if test_node:
        file_part = test_node.split("::", 1)[0]
        path = (root / file_part) if not Path(file_part).is_absolute() else Path(file_part)
        if not path.exists():
            raise ResolveError(
                "benchmark_file", path, f"TEST_NODE file {file_part} does not exist under {root}"
            )
        return Target(root, [test_node], test_node, op, [path], layout, upstream)

    if not op:
        raise ResolveError("op", root, "nothing to run: give --op (OP) or --test-node (TEST_NODE)")

    tree = BenchTree(root)
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
        # Mirror files re-run other files' benchmarks: -m mm would run BLAS twice.
        marked = {e.file for e in _entries_marking(tree, op) if not e.mirror}
        candidates = [root / rel for rel in sorted(marked)]
        if not candidates:
            # Only on the way out: the scan of every file costs about a second on FlagGems.
            near = close_names(op, list_ops(root))
            hint = f"did you mean {' or '.join(near)}? If not, " if near else "check the name or "
            raise ResolveError(
                "benchmark_file",
                bench / f"test_{op}.py",
                f"no benchmark file marks operator {op!r} under {bench}; {hint}give --op-file / --test-node",
            )

    rel = [str(p.relative_to(root)) if p.is_relative_to(root) else str(p) for p in candidates]
    functions = []
    for path, relpath in zip(candidates, rel):
        functions += [
            f"{relpath}::{e.function}" for e in _file_entries(tree, path) if _marked_outside_params(e, op)
        ]
    display = " ".join(functions) if functions else f"{' '.join(rel)} -m {op}"
    return Target(root, [*rel, "-m", op], display, op, candidates, layout, upstream)


def _file_entries(tree: BenchTree, path: Path) -> List[TestEntry]:
    try:
        module = tree.module_at(path.resolve().relative_to(tree.root).as_posix())
    except ValueError:  # an --op-file outside the tree: nothing to list by name
        return []
    return scan_module(tree, module) if module is not None else []


def _entries_marking(tree: BenchTree, op: str) -> List[TestEntry]:
    """Test functions carrying operator mark ``op``, either layout. Only files that spell
    the name are scanned (a mark, even ``getattr(pytest.mark, name)``, names it)."""
    out = []
    for name, path in sorted(tree.paths().items()):
        if not path.name.startswith("test_"):
            continue
        try:
            if op not in path.read_text(encoding="utf-8", errors="replace"):
                continue
        except OSError:
            continue
        module = tree.module(name)
        if module is not None:
            out += [e for e in scan_module(tree, module) if op in e.marks]
    return out


def _marked_outside_params(entry: TestEntry, op: str) -> bool:
    """The function carries ``op`` itself (a decorator), not through pytest.param: a
    node id then names exactly what runs (HEAD); v5.0.2 needs ``-m``."""
    return any(op in case.marks and not case.from_params for case in entry.cases)


@dataclass
class CorpusListing:
    """The operators of a tree, and its benchmark files that do not parse (checkout-
    relative path -> why): their operators are unknown, and a batch must say so."""

    ops: List[str]
    unparsed: Dict[str, str] = field(default_factory=dict)


def read_corpus(root: Path) -> CorpusListing:
    """Every operator mark of a tree, in either layout (v5.0.2's marks live inside
    parametrize), read by AST without importing anything; and the files that did not parse."""
    tree = BenchTree(Path(root))
    ops = sorted({mark for entry in scan_tree(tree) for mark in entry.marks})
    unparsed = {rel: why for rel, why in tree.parse_errors.items() if _is_test_file(rel)}
    return CorpusListing(ops, dict(sorted(unparsed.items())))


def _is_test_file(rel: str) -> bool:
    """What pytest would collect: a file no test module imports is still a test file."""
    name = Path(rel).name
    return name.startswith("test_") or name.endswith("_test.py") or name == "conftest.py"


def list_ops(root: Path) -> List[str]:
    """Every operator mark of a tree (see read_corpus)."""
    return read_corpus(root).ops

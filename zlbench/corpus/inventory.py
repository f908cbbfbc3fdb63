"""Operator inventories: ``ops/inventory/<repo>.yaml``, built from a scan.

One entry per operator mark (and per unmarked test, under its printed name): the
pytest nodes that measure it (checkout-relative), whether ``-m <op>`` is needed to
pick its parametrizations out of a shared test, the files, and per test the printed
operator names, the Benchmark class chain and the shape-file key upstream's
core_shapes.yaml resolves to. Nodes of mirror files (test_blas_perf_parallel.py) are
listed as duplicates, not selected, whenever another file measures the same operator.
The file is sorted and stable so that a diff of two scans shows exactly what an
upstream bump changed.
"""

from __future__ import annotations

import difflib
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Union

import yaml

from ..atomic import write_atomic
from ..opsdata import OpsDataError, inventory_path, read_yaml
from .collect import Comparison, compare, run_collect
from .layout import detect_layout
from .scan import MIRROR_FILES, OpCase, TestEntry, scan_tree, shape_key_for
from .shapes import class_keys, load_shape_file, upstream_shapes_path
from .tree import BenchTree

FORMAT = 1
# libyaml's loader where PyYAML has it: the HEAD inventory is ~400 kB.
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

HEADER = (
    "# Operator inventory written by `zlbench ops scan`; regenerate it, do not edit.\n"
    "# ops.<op>.nodes run with `pytest <nodes> [-m <mark>]` from the checkout root.\n"
)


class UnknownOperator(KeyError):
    def __str__(self) -> str:  # KeyError would quote the whole message
        return str(self.args[0])


@dataclass
class OpSelection:
    """What to hand pytest for one operator."""

    op: str
    nodes: List[str]
    files: List[str]
    mark: Optional[str]  # select with -m <mark> when set
    duplicates: List[str] = field(default_factory=list)  # nodes left out: they re-measure

    @property
    def pytest_args(self) -> List[str]:
        return list(self.nodes) + (["-m", self.mark] if self.mark else [])


# ---------------------------------------------------------------------------------------
# build


def inventory_from_tree(
    root: Path, repo: str, verify: bool = True, python: str = sys.executable, ref: Optional[str] = None
):
    """Scan a checkout, check the scan with pytest --collect-only, build its inventory.

    Returns ``(inventory, comparison)``; comparison is None without ``verify``.
    """
    root = Path(root).resolve()
    tree = BenchTree(root)
    entries = scan_tree(tree)
    comparison = compare(entries, run_collect(root, python=python)) if verify else None
    shapes_file = upstream_shapes_path(root)
    upstream = load_shape_file(shapes_file) if shapes_file.is_file() else None
    inventory = build_inventory(
        entries, repo, detect_layout(root), ref or git_ref(root), comparison, upstream, tree.parse_errors
    )
    return inventory, comparison


def _git(root: Path, *args: str) -> Optional[str]:
    try:
        out = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else None


def checkout_commit(root: Path) -> Optional[str]:
    """HEAD of the git checkout whose top level is ``root``, else None.

    A tree copied into some other repository (a FlagGems snapshot under a project dir)
    is not a checkout: git would answer with the outer repository's commit."""
    top = _git(root, "rev-parse", "--show-toplevel")
    if top is None or Path(top).resolve() != Path(root).resolve():
        return None
    return _git(root, "rev-parse", "HEAD")


def git_ref(root: Path) -> str:
    """``<commit> (<describe>)`` for a git checkout, else "unknown"."""
    ref = checkout_commit(root)
    if ref is None:
        return "unknown"
    desc = _git(root, "describe", "--tags", "--always")
    if desc and desc != ref[: len(desc)]:
        ref += f" ({desc})"
    return ref


def build_inventory(
    entries: List[TestEntry],
    repo: str,
    layout: str,
    ref: str,
    comparison: Optional[Comparison] = None,
    upstream_shapes: Optional[Dict[str, Any]] = None,
    parse_errors: Optional[Dict[str, str]] = None,
) -> Dict[str, Any]:
    """``parse_errors``: checkout-relative files the scan could not parse -> why."""
    unverified_files = set(comparison.unverified_files) if comparison and comparison.verified else set()
    per_op: Dict[str, List[tuple]] = {}
    for entry in entries:
        for case in entry.cases:
            for mark in case.marks:
                per_op.setdefault(mark, []).append((entry, case))
    # A test with no operator mark is still an operator's only measurement: list it
    # under its printed name, selectable by node id only.
    unmarked = set()
    for entry in entries:
        if not entry.marks and len(entry.op_names) == 1 and entry.op_names[0] not in per_op:
            per_op[entry.op_names[0]] = [(entry, case) for case in entry.cases]
            unmarked.add(entry.op_names[0])
    ops = {
        op: _op_record(op, hits, entries, upstream_shapes, unverified_files)
        for op, hits in sorted(per_op.items())
    }
    for op in unmarked:
        ops[op]["unmarked"] = True
    inventory: Dict[str, Any] = {
        "format": FORMAT,
        "repo": repo,
        "layout": layout,
        "ref": ref,
        "counts": {"test_functions": len(entries), "operators": len(ops)},
        "verified": _verified_block(comparison, parse_errors or {}),
    }
    if upstream_shapes is not None:
        inventory["shape_class_keys"] = class_keys(upstream_shapes)
    inventory["mirror_files"] = dict(sorted(MIRROR_FILES.items()))
    no_mark = sorted(e.node for e in entries if not e.marks)
    if no_mark:
        inventory["tests_without_operator_mark"] = no_mark
    inventory["ops"] = ops
    return inventory


def _op_record(
    op: str,
    hits: List[tuple],
    entries: List[TestEntry],
    upstream_shapes: Optional[Dict[str, Any]],
    unverified_files: set,
) -> Dict[str, Any]:
    by_node: Dict[str, List[OpCase]] = {}
    entry_of: Dict[str, TestEntry] = {}
    for entry, case in hits:
        by_node.setdefault(entry.node, []).append(case)
        entry_of[entry.node] = entry
    regular = [n for n in by_node if not entry_of[n].mirror]
    selected = sorted(regular) if regular else sorted(by_node)
    duplicates = sorted(n for n in by_node if n not in selected)
    need_mark = any(len(entry_of[n].cases) > len(by_node[n]) for n in selected)
    record: Dict[str, Any] = {
        "nodes": selected,
        "mark": op if need_mark else None,
        "files": sorted({entry_of[n].file for n in selected}),
        "tests": [
            _test_record(n, by_node[n], entry_of[n], upstream_shapes, unverified_files)
            for n in sorted(by_node)
        ],
    }
    shared = {}
    for node in selected:
        others = sorted({m for c in by_node[node] for m in c.marks if m != op})
        if others:
            shared[node] = others
    if shared:
        record["shared"] = shared
    if duplicates:
        record["duplicates"] = [{"node": n, "of": selected} for n in duplicates]
    return record


def _test_record(
    node: str,
    cases: List[OpCase],
    entry: TestEntry,
    upstream_shapes: Optional[Dict[str, Any]],
    unverified_files: set,
) -> Dict[str, Any]:
    constructions = [c for case in cases for c in case.constructions]
    names = []
    for c in constructions:
        name = c.op_name or c.op_name_text
        if name and name not in names:
            names.append(name)
    first = constructions[0] if constructions else None
    record: Dict[str, Any] = {
        "node": node,
        "op_names": names,
        "class_chain": first.class_chain if first else [],
    }
    if first is None:
        record["note"] = "no Benchmark construction found"
    elif first.shapes_from != "shape file":
        record["shapes_from"] = first.shapes_from
    elif upstream_shapes is not None:
        record["shape_key"] = shape_key_for(first, upstream_shapes)[0]
    if entry.file in unverified_files:
        record["unverified"] = True
    return record


def _verified_block(cmp: Optional[Comparison], parse_errors: Dict[str, str]) -> Dict[str, Any]:
    block = _collect_block(cmp)
    if parse_errors:
        # Their tests are missing from ops whatever pytest collected: never "verified".
        if block["status"] == "verified":
            block["status"] = "partial"
        block["unparsed_files"] = dict(sorted(parse_errors.items()))
    return block


def _collect_block(cmp: Optional[Comparison]) -> Dict[str, Any]:
    if cmp is None:
        return {"status": "unverified", "reason": "pytest --collect-only was not run (--no-verify)"}
    if not cmp.verified:
        return {"status": "unverified", "reason": cmp.reason}
    block: Dict[str, Any] = {
        "status": "verified" if cmp.clean and not cmp.unverified_files else "partial",
        "by": "pytest --collect-only",
        "collected_items": cmp.collected_items,
        "collected_functions": cmp.collected_functions,
    }
    if cmp.unverified_files:
        block["unverified_files"] = dict(cmp.unverified_files)
    mismatch: Dict[str, Any] = {}
    if cmp.ast_only_functions:
        mismatch["scan_only"] = cmp.ast_only_functions
    if cmp.collect_only_functions:
        mismatch["collect_only"] = cmp.collect_only_functions
    if cmp.mark_mismatches:
        mismatch["marks"] = {
            n: {"scan_only": a, "collect_only": c} for n, (a, c) in cmp.mark_mismatches.items()
        }
    if cmp.case_mismatches:
        mismatch["parametrizations"] = sorted(cmp.case_mismatches)
    if mismatch:
        block["mismatches"] = mismatch
    return block


# ---------------------------------------------------------------------------------------
# read / write


class _Dumper(yaml.SafeDumper):
    """Block style, except short lists of scalars, which read better on one line."""

    def ignore_aliases(self, data):  # no &id anchors: every entry reads on its own
        return True


def _represent_list(dumper, data):
    flow = (
        all(isinstance(x, (str, int, float, bool)) for x in data)
        and len(data) <= 8
        and sum(len(str(x)) for x in data) < 100
    )
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flow)


_Dumper.add_representer(list, _represent_list)


def dump_inventory(inventory: Dict[str, Any]) -> str:
    return HEADER + yaml.dump(
        inventory, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=120, allow_unicode=True
    )


def write_inventory(inventory: Dict[str, Any], path: Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, dump_inventory(inventory))


def load_inventory(name: Union[str, Path] = "flaggems") -> Dict[str, Any]:
    """An inventory by name (``flaggems`` -> ops/inventory/flaggems.yaml) or by path."""
    text = str(name)
    path = Path(text) if (text.endswith((".yaml", ".yml")) or "/" in text) else inventory_path(text)
    data = read_yaml(
        path,
        OpsDataError,
        f"no inventory at {path}; run `zlbench ops scan --repo {Path(text).stem}=DIR` to write it",
        "inventory ",
        loader=_Loader,
    )
    if not isinstance(data, dict) or data.get("format") != FORMAT or "ops" not in data:
        raise OpsDataError(
            f"{path} is not a format-{FORMAT} inventory; regenerate it with `zlbench ops scan`"
        )
    return data


def select_op(inventory: Dict[str, Any], op: str) -> OpSelection:
    record = _record(inventory, op)
    return OpSelection(
        op=op,
        nodes=list(record["nodes"]),
        files=list(record["files"]),
        mark=record.get("mark"),
        duplicates=[d["node"] for d in record.get("duplicates", [])],
    )


def _record(inventory: Dict[str, Any], op: str) -> Dict[str, Any]:
    ops = inventory["ops"]
    if op not in ops:
        close = difflib.get_close_matches(op, list(ops), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise UnknownOperator(f"operator {op!r} is not in the {inventory.get('repo', '?')} inventory{hint}")
    return ops[op]


# ---------------------------------------------------------------------------------------
# diff


@dataclass
class InventoryDiff:
    added: List[str]
    removed: List[str]
    changed: Dict[str, List[str]]  # op -> what changed

    @property
    def empty(self) -> bool:
        return not (self.added or self.removed or self.changed)


def diff_inventories(old: Dict[str, Any], new: Dict[str, Any]) -> InventoryDiff:
    old_ops, new_ops = old["ops"], new["ops"]
    changed: Dict[str, List[str]] = {}
    for op in sorted(set(old_ops) & set(new_ops)):
        a, b = old_ops[op], new_ops[op]
        what = []
        if a["nodes"] != b["nodes"]:
            what.append(f"nodes {a['nodes']} -> {b['nodes']}")
        if a.get("mark") != b.get("mark"):
            what.append(f"mark {a.get('mark')} -> {b.get('mark')}")
        chains_a = {t["node"]: t["class_chain"] for t in a["tests"]}
        chains_b = {t["node"]: t["class_chain"] for t in b["tests"]}
        for node in sorted(set(chains_a) & set(chains_b)):
            if chains_a[node] != chains_b[node]:
                what.append(f"class chain of {node}: {chains_a[node]} -> {chains_b[node]}")
        keys_a = {t["node"]: t.get("shape_key") for t in a["tests"]}
        keys_b = {t["node"]: t.get("shape_key") for t in b["tests"]}
        for node in sorted(set(keys_a) & set(keys_b)):
            if keys_a[node] != keys_b[node]:
                what.append(f"shape key of {node}: {keys_a[node]} -> {keys_b[node]}")
        if what:
            changed[op] = what
    return InventoryDiff(sorted(set(new_ops) - set(old_ops)), sorted(set(old_ops) - set(new_ops)), changed)


def format_diff(diff: InventoryDiff, old_name: str, new_name: str) -> List[str]:
    if diff.empty:
        return [f"{old_name} and {new_name} list the same operators and nodes"]
    lines = [
        f"{old_name} -> {new_name}: {len(diff.added)} added, {len(diff.removed)} removed, "
        f"{len(diff.changed)} changed"
    ]
    lines += [f"+ {op}" for op in diff.added]
    lines += [f"- {op}" for op in diff.removed]
    for op, what in diff.changed.items():
        lines += [f"~ {op}: {w}" for w in what]
    return lines

"""Check an AST scan against what ``pytest --collect-only`` collects from the same tree.

pytest runs in a subprocess (this process never imports flag_gems), from the
checkout root, with ``GEMS_VENDOR=nvidia`` (unless set) so flag_gems skips its
vendor probes, and ``FLAGGEMS_DB_URL`` pointing at a throwaway sqlite file so the
user's tuning cache is never touched. Installed pytest plugins are not auto-loaded.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Set, Tuple

from .. import backends
from ..proc import importable_pythonpath
from .collect_dump import OUT_ENV
from .layout import bench_dir_name
from .scan import NON_OPERATOR_MARKS, TestEntry

COLLECT_TIMEOUT_S = 600


@dataclass
class Collected:
    ok: bool  # pytest got as far as collecting
    items: List[dict] = field(default_factory=list)
    errors: Dict[str, str] = field(default_factory=dict)  # file -> import error
    reason: str = ""  # why not ok
    cpu_driver_shim: bool = False
    command: str = ""


@dataclass
class Comparison:
    verified: bool
    collected_items: int
    collected_functions: int
    ast_functions: int
    unverified_files: Dict[str, str]  # file -> why pytest could not check it
    ast_only_functions: List[str]  # node ids pytest did not collect
    collect_only_functions: List[str]  # node ids the scan missed
    mark_mismatches: Dict[str, Tuple[List[str], List[str]]]  # node -> (ast only, collect only)
    # node -> (scan's per-parametrization mark sets, pytest's per-item mark sets), when they differ
    case_mismatches: Dict[str, Tuple[List[List[str]], List[List[str]]]]
    ast_only_ops: List[str]
    collect_only_ops: List[str]
    reason: str = ""

    @property
    def clean(self) -> bool:
        return self.verified and not (
            self.ast_only_functions
            or self.collect_only_functions
            or self.mark_mismatches
            or self.case_mismatches
        )


def run_collect(
    root: Path, python: str = sys.executable, timeout: int = COLLECT_TIMEOUT_S, cpu_driver: bool = True
) -> Collected:
    root = Path(root).resolve()
    bench = bench_dir_name(root)
    with tempfile.TemporaryDirectory(prefix="zl-collect-") as tmp:
        out = Path(tmp) / "collected.json"
        env = dict(os.environ)
        env.setdefault("GEMS_VENDOR", backends.BACKENDS["cuda"].gems_vendor or "")
        env["FLAGGEMS_DB_URL"] = f"sqlite:///{Path(tmp) / 'flaggems.db'}"
        env[OUT_ENV] = str(out)
        # Collection needs FlagGems' conftest, not whatever pytest plugins this
        # environment happens to have (some cost seconds to load).
        env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
        paths = [str(root / "src")] if (root / "src").is_dir() else []
        if env.get("PYTHONPATH"):
            paths.append(env["PYTHONPATH"])
        env["PYTHONPATH"] = importable_pythonpath(os.pathsep.join(paths))
        cmd = [
            python,
            "-m",
            "pytest",
            bench,
            "--collect-only",
            "-q",
            "--continue-on-collection-errors",
            "-p",
            "no:cacheprovider",
            "-p",
            "zlbench.corpus.collect_dump",
        ]
        if cpu_driver:
            cmd += ["-p", "zlbench.corpus.cpu_collect_driver"]
        shown = " ".join(cmd[1:])
        try:
            proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return Collected(False, reason=f"pytest --collect-only ran past {timeout}s", command=shown)
        except OSError as exc:
            return Collected(False, reason=f"cannot start {python}: {exc}", command=shown)
        if not out.is_file():
            return Collected(False, reason=_why(proc.stdout + proc.stderr), command=shown)
        data = json.loads(out.read_text(encoding="utf-8"))
    errors = {_file_of(k): v for k, v in data.get("errors", {}).items()}
    if not data["items"] and errors:
        return Collected(
            False,
            errors=errors,
            reason="every file failed to import: " + next(iter(errors.values())),
            command=shown,
        )
    return Collected(
        True, data["items"], errors, cpu_driver_shim=data.get("cpu_driver_shim", False), command=shown
    )


def compare(entries: List[TestEntry], collected: Collected) -> Comparison:
    ast_marks: Dict[str, Set[str]] = {e.node: set(e.marks) for e in entries}
    if not collected.ok:
        files = sorted({e.file for e in entries})
        return Comparison(
            False,
            0,
            0,
            len(entries),
            {f: collected.reason for f in files},
            [],
            [],
            {},
            {},
            [],
            [],
            reason=collected.reason,
        )
    got: Dict[str, Set[str]] = {}
    got_cases: Dict[str, Set[frozenset]] = {}
    for item in collected.items:
        node = "::".join([item["file"]] + ([item["class"]] if item["class"] else []) + [item["function"]])
        marks = frozenset(m for m in item["marks"] if m not in NON_OPERATOR_MARKS)
        got.setdefault(node, set()).update(marks)
        got_cases.setdefault(node, set()).add(marks)
    ast_cases = {e.node: {frozenset(c.marks) for c in e.cases} for e in entries}
    unverified = dict(sorted(collected.errors.items()))
    checkable = {n: m for n, m in ast_marks.items() if n.split("::")[0] not in unverified}
    ast_only = sorted(n for n in checkable if n not in got)
    collect_only = sorted(n for n in got if n not in ast_marks)
    mismatches = {}
    for node in sorted(set(checkable) & set(got)):
        a, c = checkable[node], got[node]
        if a != c:
            mismatches[node] = (sorted(a - c), sorted(c - a))
    case_mismatches = {}
    for node in sorted(set(checkable) & set(got)):
        if node not in mismatches and ast_cases[node] != got_cases[node]:
            case_mismatches[node] = (
                sorted(sorted(s) for s in ast_cases[node]),
                sorted(sorted(s) for s in got_cases[node]),
            )
    ops_ast = {m for ms in checkable.values() for m in ms}
    ops_got = {m for ms in got.values() for m in ms}
    return Comparison(
        verified=True,
        collected_items=len(collected.items),
        collected_functions=len(got),
        ast_functions=len(entries),
        unverified_files=unverified,
        ast_only_functions=ast_only,
        collect_only_functions=collect_only,
        mark_mismatches=mismatches,
        case_mismatches=case_mismatches,
        ast_only_ops=sorted(ops_ast - ops_got),
        collect_only_ops=sorted(ops_got - ops_ast),
    )


def format_comparison(cmp: Comparison) -> List[str]:
    if not cmp.verified:
        return [
            f"UNVERIFIED: pytest --collect-only could not check the scan: {cmp.reason}",
            f"  keeping the AST result ({cmp.ast_functions} test functions), marked unverified",
        ]
    lines = [
        f"pytest --collect-only: {cmp.collected_items} items in {cmp.collected_functions} "
        f"test functions; AST scan: {cmp.ast_functions} test functions"
    ]
    for f, why in cmp.unverified_files.items():
        lines.append(f"  unverified (failed to import under collect-only): {f}: {why}")
    for node in cmp.ast_only_functions:
        lines.append(f"  scan only (pytest did not collect): {node}")
    for node in cmp.collect_only_functions:
        lines.append(f"  collect only (scan missed): {node}")
    for node, (a, c) in cmp.mark_mismatches.items():
        lines.append(f"  marks differ at {node}: scan only {a}, collect only {c}")
    for node, (scan_cases, collect_cases) in cmp.case_mismatches.items():
        lines.append(
            f"  marks per parametrization differ at {node}: scan {scan_cases}, collect {collect_cases}"
        )
    if cmp.ast_only_ops:
        lines.append(f"  operators only the scan found: {', '.join(cmp.ast_only_ops)}")
    if cmp.collect_only_ops:
        lines.append(f"  operators only pytest found: {', '.join(cmp.collect_only_ops)}")
    if cmp.clean:
        lines.append("  scan and collection agree on every checked test and mark")
    return lines


def _file_of(nodeid: str) -> str:
    return nodeid.split("::")[0].replace(os.sep, "/")


def _why(output: str) -> str:
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("E ")]
    if errors:
        return errors[-1][1:].strip()
    return lines[-1] if lines else "pytest produced no output"

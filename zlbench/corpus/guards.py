"""``torch.cuda.is_available()`` guards in a benchmark tree, and the decision table.

On a non-CUDA vendor whose torch extension does not make ``torch.cuda`` available
(MThreads: torch_musa), such a guard turns an operator that FlagGems dispatches
through ``flag_gems.device`` into "not measured". A compat plugin may remove a guard
only where the table says so: ``ops/compat/<backend>_skip_overrides.yaml``.

Guard kinds:
- ``skipif``: a ``@pytest.mark.skipif`` on one test; removable (pinned by file, test,
  exact reason).
- ``module-skipif``: a module-level ``pytestmark`` skipif; removable the same way
  (``test: "*"``).
- ``runtime``: a check inside a function body (a helper, a fixture, a test); it
  decides at run time, there is no marker to remove.
- ``import-time``: a check at module level outside ``pytestmark``.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Union

from ..opsdata import OpsDataError, compat_table_path, read_yaml
from .tree import BenchTree, Module

MARKER_KINDS = ("skipif", "module-skipif")
KINDS = MARKER_KINDS + ("runtime", "import-time")
DECISIONS = ("remove", "keep")


@dataclass(frozen=True)
class Guard:
    file: str  # checkout-relative
    kind: str
    test: Optional[str]  # test function for skipif, "*" for module-skipif
    where: Optional[str]  # enclosing function for runtime guards
    reason: Optional[str]
    line: int
    condition: str  # the skipif condition or the enclosing statement's source

    @property
    def key(self) -> Tuple:
        # The same key as a table entry's, so coverage can match the two.
        return entry_key(vars(self))


class CompatTableError(OpsDataError):
    pass


# ---------------------------------------------------------------------------------------
# finding guards


def find_guards(root: Union[Path, BenchTree]) -> List[Guard]:
    """Every guard of the tree; given a BenchTree, its ``parse_errors`` then names the
    files left out because they do not parse."""
    tree = root if isinstance(root, BenchTree) else BenchTree(Path(root))
    out: List[Guard] = []
    for _, module in sorted(tree.modules.items()):
        out.extend(_module_guards(module))
    return sorted(out, key=lambda g: (g.file, g.line))


def _is_cuda_check(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "is_available"
        and isinstance(node.func.value, ast.Attribute)
        and node.func.value.attr == "cuda"
        and isinstance(node.func.value.value, ast.Name)
        and node.func.value.value.id == "torch"
    )


def _contains_check(node: ast.AST) -> bool:
    return any(_is_cuda_check(n) for n in ast.walk(node))


def _skipif_parts(call: ast.AST) -> Optional[Tuple[str, Any]]:
    """(condition source, reason) for a ``pytest.mark.skipif(...)`` call."""
    if not (
        isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "skipif"
    ):
        return None
    reason = None
    for kw in call.keywords:
        if kw.arg == "reason" and isinstance(kw.value, ast.Constant):
            reason = kw.value.value
    if reason is None and len(call.args) > 1 and isinstance(call.args[1], ast.Constant):
        reason = call.args[1].value
    condition = ast.unparse(call.args[0]) if call.args else ""
    return condition, reason


def _module_guards(module: Module) -> List[Guard]:
    out: List[Guard] = []
    claimed: set = set()

    def claim(node: ast.AST) -> None:
        claimed.update(id(n) for n in ast.walk(node))

    for node in module.tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for deco in node.decorator_list:
                parts = _skipif_parts(deco)
                if parts and _contains_check(deco):
                    out.append(Guard(module.rel, "skipif", node.name, None, parts[1], deco.lineno, parts[0]))
                    claim(deco)
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets
        ):
            values = node.value.elts if isinstance(node.value, (ast.List, ast.Tuple)) else [node.value]
            for value in values:
                parts = _skipif_parts(value)
                if parts and _contains_check(value):
                    out.append(
                        Guard(module.rel, "module-skipif", "*", None, parts[1], value.lineno, parts[0])
                    )
                    claim(value)
    for node in module.tree.body:
        for sub in ast.walk(node):
            if _is_cuda_check(sub) and id(sub) not in claimed:
                where = (
                    node.name
                    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                    else None
                )
                kind = "runtime" if where else "import-time"
                stmt = _enclosing_statement(node, sub)
                out.append(
                    Guard(
                        module.rel,
                        kind,
                        None,
                        where or "<module>",
                        None,
                        sub.lineno,  # type: ignore[attr-defined]
                        ast.unparse(stmt).splitlines()[0][:160],
                    )
                )
    return out


def _enclosing_statement(top: ast.AST, target: ast.AST) -> ast.AST:
    best = top
    for node in ast.walk(top):
        if isinstance(node, ast.stmt) and any(n is target for n in ast.walk(node)):
            if getattr(node, "lineno", 0) >= getattr(best, "lineno", 0):
                best = node
    return best


# ---------------------------------------------------------------------------------------
# the decision table


def load_table(path_or_backend: Union[str, Path] = "musa") -> Dict[str, Any]:
    text = str(path_or_backend)
    path = Path(text) if text.endswith((".yaml", ".yml")) else compat_table_path(text)
    data = read_yaml(path, CompatTableError, f"no compat decision table at {path}")
    errors = table_errors(data, path)
    if errors:
        raise CompatTableError("invalid compat decision table:\n  " + "\n  ".join(errors))
    return data


def table_errors(data: Any, path: Path) -> List[str]:
    if not isinstance(data, dict) or not isinstance(data.get("guards"), list):
        return [f"{path}: the top level needs `vendor:` and a `guards:` list"]
    if not isinstance(data.get("vendor"), str):
        return [f"{path}: `vendor:` must name the flag_gems vendor the table applies to"]
    errors = []
    seen = set()
    for i, g in enumerate(data["guards"]):
        where = f"{path}: guard {i + 1}"
        if not isinstance(g, dict):
            errors.append(f"{where}: must be a mapping")
            continue
        where += f" ({g.get('file')}::{g.get('test') or g.get('where')})"
        if not isinstance(g.get("file"), str) or not g["file"].endswith(".py"):
            errors.append(f"{where}: `file:` must be a checkout-relative .py path")
        if g.get("kind") not in KINDS:
            errors.append(f"{where}: `kind:` must be one of {', '.join(KINDS)}")
        if g.get("decision") not in DECISIONS:
            errors.append(f"{where}: `decision:` must be remove or keep")
        if not (isinstance(g.get("why"), str) and g["why"].strip()):
            errors.append(f"{where}: `why:` must say why the guard is removed or kept")
        if g.get("kind") in MARKER_KINDS:
            if not (isinstance(g.get("reason"), str) and g["reason"]):
                errors.append(f"{where}: a marker guard needs the exact skip `reason:` string")
            if not isinstance(g.get("test"), str):
                errors.append(f'{where}: a marker guard needs `test:` (the function, or "*")')
        elif g.get("decision") == "remove":
            errors.append(
                f"{where}: only skipif markers can be removed; a {g.get('kind')} guard "
                "decides at run time, so it must be `keep`"
            )
        key = entry_key(g)
        if key in seen:
            errors.append(f"{where}: listed twice")
        seen.add(key)
    return errors


def entry_key(entry: Dict[str, Any]) -> Tuple:
    """What identifies a guard: a marker by its test and reason, any other by where it is."""
    kind = entry.get("kind")
    if kind in MARKER_KINDS:
        return (entry.get("file"), kind, entry.get("test"), entry.get("reason"))
    return (entry.get("file"), kind, entry.get("where"), None)


def removals(table: Dict[str, Any]) -> List[Dict[str, Any]]:
    return [g for g in table["guards"] if g["decision"] == "remove"]


def coverage(table: Dict[str, Any], guards: List[Guard], root: Path) -> Tuple[List[Guard], List[Dict]]:
    """(guards in the tree the table does not decide, entries matching no guard).

    An entry whose file the tree does not have is about another FlagGems version and
    is not reported as stale.
    """
    keys = {entry_key(g) for g in table["guards"]}
    undecided = [g for g in guards if g.key not in keys]
    found = {g.key for g in guards}
    stale = [e for e in table["guards"] if (Path(root) / e["file"]).is_file() and entry_key(e) not in found]
    return undecided, stale

"""Evaluate the literal parts of a benchmark module without running it.

v5.0.2 puts operator marks inside parametrize values built from module-level lists
(``[pytest.param(name, op, dtype, marks=getattr(pytest.mark, name, None)) for name, op,
dtype in forward_operations]``). This evaluator understands exactly that much Python:
literals, names bound at module level or by the caller, list/tuple concatenation, list
comprehensions, ``pytest.param``, ``pytest.mark.<name>`` and ``getattr(pytest.mark, x)``.
Anything else becomes an ``Opaque`` value carrying its source text.
"""

from __future__ import annotations

import ast
import itertools
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from .tree import BenchTree, ClassRef, FuncRef, Module


@dataclass(frozen=True)
class Mark:
    name: str


@dataclass(frozen=True)
class Opaque:
    text: str


@dataclass(frozen=True)
class Template:
    """An f-string whose holes are not static: ``to_copy_{src_dtype}_to_{dst_dtype}``."""

    text: str


@dataclass
class Param:
    values: Tuple[Any, ...]
    marks: Tuple[Mark, ...] = ()


@dataclass
class Case:
    """One parametrization of a test function: argument bindings and param marks."""

    bindings: Dict[str, Any] = field(default_factory=dict)
    marks: Tuple[Mark, ...] = ()


_MAX_CASES = 4096


class Evaluator:
    def __init__(self, tree: BenchTree, module: Module):
        self.tree = tree
        self.module = module
        self._busy: set = set()

    # -- pytest.mark recognition -------------------------------------------------
    def _is_pytest(self, expr: ast.expr) -> bool:
        return isinstance(expr, ast.Name) and (
            expr.id == "pytest" or self.module.imports.get(expr.id) == ("module", "pytest")
        )

    def is_mark_namespace(self, expr: ast.expr) -> bool:
        """``pytest.mark`` or a ``mark`` imported from pytest."""
        if isinstance(expr, ast.Attribute) and expr.attr == "mark":
            return self._is_pytest(expr.value)
        if isinstance(expr, ast.Name):
            return self.module.imports.get(expr.id) == ("symbol", "pytest", "mark")
        return False

    def mark_name(self, expr: ast.expr) -> Optional[str]:
        """The mark a decorator or ``marks=`` item names: ``pytest.mark.abs(...)`` -> abs."""
        target = expr.func if isinstance(expr, ast.Call) else expr
        if isinstance(target, ast.Attribute) and self.is_mark_namespace(target.value):
            return target.attr
        # getattr(pytest.mark, "dash-op"), called or not: a mark whose name is no
        # Python identifier (pytest takes it; the batch refuses it if no file can be named so).
        for call in (expr, target):
            if (
                isinstance(call, ast.Call)
                and isinstance(call.func, ast.Name)
                and call.func.id == "getattr"
                and len(call.args) >= 2
                and self.is_mark_namespace(call.args[0])
            ):
                name = self.eval(call.args[1])
                return name if isinstance(name, str) else None
        return None

    # -- evaluation --------------------------------------------------------------
    def eval(self, expr: Optional[ast.expr], bindings: Optional[Dict[str, Any]] = None) -> Any:
        if expr is None:
            return None
        bindings = bindings or {}
        try:
            return self._eval(expr, bindings)
        except RecursionError:
            return Opaque(ast.unparse(expr))

    def _eval(self, expr: ast.expr, env: Dict[str, Any]) -> Any:
        if isinstance(expr, ast.Constant):
            return expr.value
        if isinstance(expr, (ast.List, ast.Tuple)):
            out: List[Any] = []
            for elt in expr.elts:
                if isinstance(elt, ast.Starred):
                    inner = self._eval(elt.value, env)
                    if isinstance(inner, (list, tuple)):
                        out.extend(inner)
                    else:
                        out.append(Opaque(ast.unparse(elt)))
                else:
                    out.append(self._eval(elt, env))
            return out if isinstance(expr, ast.List) else tuple(out)
        if isinstance(expr, ast.Name):
            return self._name(expr.id, env)
        if isinstance(expr, ast.Attribute):
            name = self.mark_name(expr)
            if name is not None:
                return Mark(name)
            target = self.tree.resolve_expr(self.module, expr)
            if isinstance(target, (ClassRef, FuncRef)):
                return target
            return Opaque(ast.unparse(expr))
        if isinstance(expr, ast.JoinedStr):
            return self._fstring(expr, env)
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
            left, right = self._eval(expr.left, env), self._eval(expr.right, env)
            if isinstance(left, list) and isinstance(right, list):
                return left + right
            if isinstance(left, tuple) and isinstance(right, tuple):
                return left + right
            if isinstance(left, str) and isinstance(right, str):
                return left + right
            return Opaque(ast.unparse(expr))
        if isinstance(expr, ast.ListComp):
            return self._listcomp(expr, env)
        if isinstance(expr, ast.Compare):
            return self._compare(expr, env)
        if isinstance(expr, ast.IfExp):
            test = self._eval(expr.test, env)
            if isinstance(test, bool):
                return self._eval(expr.body if test else expr.orelse, env)
            return Opaque(ast.unparse(expr))
        if isinstance(expr, ast.Call):
            return self._call(expr, env)
        return Opaque(ast.unparse(expr))

    def _name(self, name: str, env: Dict[str, Any]) -> Any:
        if name in env:
            return env[name]
        if name in self.module.assigns and name not in self._busy:
            self._busy.add(name)
            try:
                return self._eval(self.module.assigns[name], {})
            finally:
                self._busy.discard(name)
        target = self.tree.resolve_symbol(self.module, name)
        if isinstance(target, (ClassRef, FuncRef)):
            return target
        return Opaque(name)

    def _fstring(self, expr: ast.JoinedStr, env: Dict[str, Any]) -> Any:
        parts: List[str] = []
        static = True
        for value in expr.values:
            if isinstance(value, ast.Constant):
                parts.append(str(value.value))
                continue
            inner = self._eval(value.value, env) if isinstance(value, ast.FormattedValue) else None
            if isinstance(inner, (str, int, float)) and not getattr(value, "format_spec", None):
                parts.append(str(inner))
            else:
                static = False
                parts.append("{" + ast.unparse(value.value) + "}")  # type: ignore[attr-defined]
        text = "".join(parts)
        return text if static else Template(text)

    def _compare(self, expr: ast.Compare, env: Dict[str, Any]) -> Any:
        if len(expr.ops) != 1:
            return Opaque(ast.unparse(expr))
        left, right = self._eval(expr.left, env), self._eval(expr.comparators[0], env)
        if not (_plain(left) and _plain(right)):
            return Opaque(ast.unparse(expr))
        op = expr.ops[0]
        if isinstance(op, ast.Eq):
            return left == right
        if isinstance(op, ast.NotEq):
            return left != right
        if isinstance(op, (ast.In, ast.NotIn)) and isinstance(right, (list, tuple, str)):
            return (left in right) == isinstance(op, ast.In)
        return Opaque(ast.unparse(expr))

    def _listcomp(self, expr: ast.ListComp, env: Dict[str, Any]) -> Any:
        envs = [dict(env)]
        for gen in expr.generators:
            next_envs = []
            for scope in envs:
                items = self._eval(gen.iter, scope)
                if not isinstance(items, (list, tuple)):
                    return Opaque(ast.unparse(expr))
                for item in items:
                    bound = _bind_target(gen.target, item)
                    if bound is None:
                        return Opaque(ast.unparse(expr))
                    inner = {**scope, **bound}
                    if all(self._truthy(cond, inner) for cond in gen.ifs):
                        next_envs.append(inner)
            envs = next_envs
        return [self._eval(expr.elt, scope) for scope in envs]

    def _truthy(self, cond: ast.expr, env: Dict[str, Any]) -> bool:
        value = self._eval(cond, env)
        # A filter we cannot decide keeps the element: better an extra case than a lost one.
        return True if isinstance(value, Opaque) else bool(value)

    def _call(self, expr: ast.Call, env: Dict[str, Any]) -> Any:
        func = expr.func
        if isinstance(func, ast.Attribute) and func.attr == "param" and self._is_pytest(func.value):
            values = tuple(self._eval(a, env) for a in expr.args)
            marks: Tuple[Mark, ...] = ()
            for kw in expr.keywords:
                if kw.arg == "marks":
                    marks = marks_of(self._eval(kw.value, env))
            return Param(values, marks)
        if (
            isinstance(func, ast.Name)
            and func.id == "getattr"
            and len(expr.args) >= 2
            and self.is_mark_namespace(expr.args[0])
        ):
            name = self._eval(expr.args[1], env)
            return Mark(name) if isinstance(name, str) else Opaque(ast.unparse(expr))
        name = self.mark_name(expr)
        if name is not None:
            return Mark(name)
        return Opaque(ast.unparse(expr))

    # -- parametrize -------------------------------------------------------------
    def parametrize_cases(
        self, decorators: List[ast.expr], env: Optional[Dict[str, Any]] = None
    ) -> Tuple[List[Case], List[str]]:
        """Cases from stacked ``@pytest.mark.parametrize`` decorators (their product).

        Returns the cases and notes about values that could not be read statically.
        """
        notes: List[str] = []
        groups: List[List[Case]] = []
        for deco in decorators:
            if not (isinstance(deco, ast.Call) and self.mark_name(deco) == "parametrize"):
                continue
            if len(deco.args) < 2:
                notes.append(f"parametrize without literal argvalues: {ast.unparse(deco)[:80]}")
                continue
            argnames = self.eval(deco.args[0], env)
            if isinstance(argnames, str):
                names = [n.strip() for n in argnames.split(",") if n.strip()]
            elif isinstance(argnames, (list, tuple)) and all(isinstance(n, str) for n in argnames):
                names = list(argnames)
            else:
                notes.append(f"parametrize argnames not literal: {ast.unparse(deco.args[0])[:80]}")
                continue
            values = self.eval(deco.args[1], env)
            if not isinstance(values, (list, tuple)):
                notes.append(f"parametrize values not static: {ast.unparse(deco.args[1])[:80]}")
                groups.append([Case({n: Opaque(n) for n in names})])
                continue
            group = []
            for value in values:
                if isinstance(value, Param):
                    vals, marks = value.values, value.marks
                else:
                    vals, marks = (value,) if len(names) == 1 else value, ()
                if not isinstance(vals, (list, tuple)) or len(vals) != len(names):
                    vals = tuple(Opaque(n) for n in names)
                group.append(Case(dict(zip(names, vals)), marks))
            groups.append(group or [Case({n: Opaque(n) for n in names})])
        total = 1
        for group in groups:
            total *= len(group)
        if total > _MAX_CASES:
            # Cases past the cap are not scanned: their marks and constructions are unknown.
            notes.append(f"parametrize product has {total} cases; only the first {_MAX_CASES} were scanned")
        cases = [Case()]
        for group in groups:
            cases = [
                Case({**a.bindings, **b.bindings}, a.marks + b.marks)
                for a, b in itertools.islice(itertools.product(cases, group), _MAX_CASES)
            ]
        return cases, notes


def _plain(value: Any) -> bool:
    """A value fully known statically (no Opaque inside)."""
    if isinstance(value, (list, tuple)):
        return all(_plain(v) for v in value)
    return isinstance(value, (str, int, float, bool, type(None)))


def marks_of(value: Any) -> Tuple[Mark, ...]:
    """The marks in a ``marks=`` value or a ``pytestmark``: one mark or a list of them."""
    if isinstance(value, Mark):
        return (value,)
    if isinstance(value, (list, tuple)):
        return tuple(v for v in value if isinstance(v, Mark))
    return ()


def _bind_target(target: ast.expr, value: Any) -> Optional[Dict[str, Any]]:
    if isinstance(target, ast.Name):
        return {target.id: value}
    if isinstance(target, (ast.Tuple, ast.List)):
        if not isinstance(value, (list, tuple)) or len(value) != len(target.elts):
            return None
        out: Dict[str, Any] = {}
        for sub, val in zip(target.elts, value):
            bound = _bind_target(sub, val)
            if bound is None:
                return None
            out.update(bound)
        return out
    return None

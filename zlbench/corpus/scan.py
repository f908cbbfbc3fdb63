"""AST scan of a FlagGems benchmark tree: which test measures which operator, and how.

Both layouts are read the same way:

- HEAD: ``@pytest.mark.<op>`` decorates ``test_<op>`` in ``benchmark/test_<op>.py``.
- v5.0.2: ``test_*_perf.py`` functions are parametrized and each ``pytest.param``
  carries its operator mark (``marks=getattr(pytest.mark, name)``).

For every test function the scan records its operator marks, and per parametrization
("case") the Benchmark class it builds (the class called with ``op_name=``), that
class's chain (its MRO, by class name) and the printed operator name.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple, Union

from .layout import bench_dir_name
from .static_eval import Evaluator, Opaque, Template, marks_of
from .tree import ROOT_CLASS, BenchTree, ClassRef, FuncRef, Module

# FlagGems' own list of marks that are not operators (conftest BUILTIN_MARKS), plus
# "performance", which one HEAD test carries as a category next to its operator mark.
NON_OPERATOR_MARKS = frozenset(
    {
        "parametrize",
        "skip",
        "skipif",
        "xfail",
        "usefixtures",
        "filterwarnings",
        "timeout",
        "tryfirst",
        "trylast",
        "performance",
    }
)

# Files that re-run benchmarks defined elsewhere (split across GPUs): selecting their
# marks would measure the same operator twice, so their nodes are only used for an
# operator no other file measures.
MIRROR_FILES = {
    "test_blas_perf_parallel.py": "re-runs the BLAS benchmarks of other files across GPUs",
}

_MAX_HELPER_DEPTH = 2


@dataclass
class Construction:
    """One Benchmark object a test builds."""

    bench_class: Optional[str]
    class_file: Optional[str]  # where the class is defined (checkout-relative)
    class_chain: List[str]
    op_name: Optional[str]  # printed operator name; None when not static
    op_name_text: Optional[str] = None  # the template/expression when not static
    shapes_from: str = "shape file"  # or "<Class>.set_shapes" when a class overrides it


@dataclass
class OpCase:
    """One parametrization of a test function (the whole function when unparametrized)."""

    marks: List[str]
    constructions: List[Construction]
    from_params: bool = False  # some of its marks come from pytest.param(marks=)


@dataclass
class TestEntry:
    file: str  # checkout-relative, e.g. benchmark/test_abs.py
    function: str
    line: int
    marks: List[str]  # operator marks of any case, in order
    bench_class: Optional[str]
    class_chain: List[str]
    op_names: List[str]
    cases: List[OpCase] = field(default_factory=list)
    test_class: Optional[str] = None
    notes: List[str] = field(default_factory=list)

    @property
    def node(self) -> str:
        parts = [self.file] + ([self.test_class] if self.test_class else []) + [self.function]
        return "::".join(parts)

    @property
    def mirror(self) -> bool:
        return Path(self.file).name in MIRROR_FILES


# ---------------------------------------------------------------------------------------
# public entry points


def scan_tree(root: Union[Path, BenchTree]) -> List[TestEntry]:
    """Every benchmark test function under ``<root>/benchmark``, sorted by node id.

    Files that do not parse are left out; given a BenchTree, its ``parse_errors``
    names them afterwards."""
    tree = root if isinstance(root, BenchTree) else BenchTree(Path(root))
    entries: List[TestEntry] = []
    for _, module in sorted(tree.modules.items()):
        if Path(module.rel).name.startswith("test_") or Path(module.rel).name.endswith("_test.py"):
            entries.extend(scan_module(tree, module))
    return sorted(entries, key=lambda e: e.node)


def scan_module(tree: BenchTree, module: Module) -> List[TestEntry]:
    ev = Evaluator(tree, module)
    module_marks = [m.name for m in marks_of(ev.eval(module.assigns.get("pytestmark")))]
    out = []
    for node in module.tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            out.append(_scan_function(tree, module, ev, node, module_marks, None))
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test") and _collectable(node):
            class_marks = module_marks + _decorator_marks(ev, node.decorator_list)
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name.startswith("test"):
                    out.append(_scan_function(tree, module, ev, item, class_marks, node.name))
    return out


def resolve_shape_key(
    root: Path, test_file: str, test_func: str, shapes_yaml_dict: Dict[str, Any], op: Optional[str] = None
) -> Tuple[Optional[str], List[str]]:
    """Which key of a shape file FlagGems' ``set_shapes`` would pick for this test.

    Static replay of ``Benchmark.set_shapes``: the op name first, then the class names
    along the class chain (BLAS lives under ``BlasBenchmark``). Returns ``(key,
    candidates_tried)``; key is None when nothing matches (FlagGems then uses its 1-D
    defaults). ``candidates_tried`` is empty when no Benchmark construction was found
    or the class overrides ``set_shapes`` (the shape file is not consulted at all).
    ``test_func`` may carry a ``[param-id]`` suffix; ``op`` picks the parametrization
    whose marks (or printed name) match it, for v5.0.2's one-function-many-ops tests.
    """
    construction = find_construction(root, test_file, test_func, op)
    if construction is None or construction.shapes_from != "shape file":
        return None, []
    return shape_key_for(construction, shapes_yaml_dict)


def shape_key_for(construction: Construction, shapes: Mapping[str, Any]) -> Tuple[Optional[str], List[str]]:
    """``(key, candidates_tried)``: the op name, then each class name along the chain,
    as ``Benchmark.set_shapes`` looks them up; key is None when none is in ``shapes``."""
    candidates = ([construction.op_name] if construction.op_name else []) + construction.class_chain
    tried: List[str] = []
    for key in candidates:
        tried.append(key)
        if key in shapes:
            return key, tried
    return None, tried


def find_construction(
    root: Path, test_file: str, test_func: str, op: Optional[str] = None
) -> Optional[Construction]:
    """The Benchmark a test builds (for ``op`` when the test measures several)."""
    tree = _tree_for(Path(root))
    rel = _normalise_rel(tree, test_file)
    module = tree.module_at(rel)
    if module is None:
        raise FileNotFoundError(f"{rel} is not a module under {tree.root}")
    func = test_func.split("[", 1)[0].split("::")[-1]
    entry = next((e for e in scan_module(tree, module) if e.function == func), None)
    if entry is None:
        raise LookupError(f"no test function {func} in {rel}")
    for case in entry.cases:
        for c in case.constructions:
            if op is None or op in case.marks or op == c.op_name:
                return c
    return None


# ---------------------------------------------------------------------------------------
# one test function


def _scan_function(
    tree: BenchTree,
    module: Module,
    ev: Evaluator,
    node: Union[ast.FunctionDef, ast.AsyncFunctionDef],
    outer_marks: List[str],
    test_class: Optional[str],
) -> TestEntry:
    own_marks = outer_marks + _decorator_marks(ev, node.decorator_list)
    param_cases, notes = ev.parametrize_cases(node.decorator_list)
    cases: List[OpCase] = []
    seen = set()
    for pc in param_cases:
        marks = _operator_marks(own_marks + [m.name for m in pc.marks])
        constructions = _constructions(tree, module, node, pc.bindings, 0, set())
        key = (tuple(marks), tuple((c.bench_class, c.op_name, c.op_name_text) for c in constructions))
        if key in seen:
            continue
        seen.add(key)
        cases.append(
            OpCase(marks, constructions, from_params=bool(_operator_marks([m.name for m in pc.marks])))
        )
    marks = _unique(m for c in cases for m in c.marks)
    first = next((c for case in cases for c in case.constructions), None)
    op_names = _unique(c.op_name or c.op_name_text or "" for case in cases for c in case.constructions)
    if first is None:
        notes.append("no Benchmark construction found")
    return TestEntry(
        file=module.rel,
        function=node.name,
        line=node.lineno,
        marks=marks,
        bench_class=first.bench_class if first else None,
        class_chain=first.class_chain if first else [],
        op_names=[n for n in op_names if n],
        cases=cases,
        test_class=test_class,
        notes=notes,
    )


def _constructions(
    tree: BenchTree, module: Module, func: ast.AST, env: Dict[str, Any], depth: int, visiting: set
) -> List[Construction]:
    ev = Evaluator(tree, module)
    found: List[Construction] = []
    locals_ = _local_assigns(func)
    for call in _calls_in(func):
        callee = _callee(tree, module, call, env, getattr(func, "name", None), locals_)
        if isinstance(callee, ClassRef) and not callee.external and tree.is_benchmark_class(callee):
            found.append(_construction(tree, ev, callee, call, env))
        elif any(kw.arg == "op_name" for kw in call.keywords) and isinstance(callee, (ClassRef, type(None))):
            # A class we cannot follow (external or dynamic) but clearly a Benchmark call.
            found.append(_construction(tree, ev, callee, call, env))
        elif isinstance(callee, FuncRef) and depth < _MAX_HELPER_DEPTH and callee not in visiting:
            helper_module = tree.module(callee.module)
            helper = helper_module.functions.get(callee.name) if helper_module else None
            if helper is not None:
                helper_env = _bind_call(ev, helper, call, env, skip_self=False)
                found.extend(
                    _constructions(tree, helper_module, helper, helper_env, depth + 1, visiting | {callee})
                )
    return found


def _local_assigns(func: ast.AST) -> Dict[str, ast.expr]:
    """Names assigned exactly once in a function body (simple ``x = expr``)."""
    counts: Dict[str, int] = {}
    values: Dict[str, ast.expr] = {}
    for node in ast.walk(func):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            counts[name] = counts.get(name, 0) + 1
            values[name] = node.value
    return {n: v for n, v in values.items() if counts[n] == 1}


def _calls_in(func: ast.AST) -> Iterable[ast.Call]:
    body = func.body if isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)) else [func]
    for stmt in body:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Call):
                yield node


def _callee(
    tree: BenchTree,
    module: Module,
    call: ast.Call,
    env: Dict[str, Any],
    scope: Optional[str],
    locals_: Dict[str, ast.expr],
):
    if isinstance(call.func, ast.Name):
        if call.func.id in env:
            value = env[call.func.id]
            return value if isinstance(value, (ClassRef, FuncRef)) else None
        if scope and (scope, call.func.id) in module.local_classes:
            return ClassRef(module.name, call.func.id, scope)
        local = locals_.get(call.func.id)
        if local is not None:  # bench_cls = A if op_name == "x" else B
            value = Evaluator(tree, module).eval(local, env)
            return value if isinstance(value, (ClassRef, FuncRef)) else None
    return tree.resolve_expr(module, call.func)


def _construction(
    tree: BenchTree, ev: Evaluator, cls: Optional[ClassRef], call: ast.Call, env: Dict[str, Any]
) -> Construction:
    value = _op_name_value(tree, ev, cls, call, env)
    backward = _kw_value(ev, call, "is_backward", env) is True
    op_name, text = _as_name(value)
    if op_name is not None and backward and "_backward" not in op_name:
        op_name += "_backward"  # Benchmark.__init__ does the same
    chain = tree.chain_names(cls) if cls is not None else []
    class_file = None
    if cls is not None and not cls.external:
        class_file = tree.module(cls.module).rel
    return Construction(
        bench_class=cls.name if cls else None,
        class_file=class_file,
        class_chain=chain,
        op_name=op_name,
        op_name_text=text,
        shapes_from=_shapes_from(tree, cls),
    )


def _shapes_from(tree: BenchTree, cls: Optional[ClassRef]) -> str:
    if cls is None or cls.external:
        return "shape file"
    found = tree.find_method(cls, "set_shapes")
    if found is None or found[0].name == ROOT_CLASS:
        return "shape file"
    return f"{found[0].name}.set_shapes"


def _op_name_value(
    tree: BenchTree, ev: Evaluator, cls: Optional[ClassRef], call: ast.Call, env: Dict[str, Any]
) -> Any:
    for kw in call.keywords:
        if kw.arg == "op_name":
            return ev.eval(kw.value, env)
    if cls is None or cls.external:
        return None
    return _op_name_through_init(tree, cls, call, ev, env, 0)


def _op_name_through_init(
    tree: BenchTree, cls: ClassRef, call: ast.Call, ev: Evaluator, env: Dict[str, Any], depth: int
) -> Any:
    """op_name passed positionally, or fixed by a subclass __init__ via super().__init__."""
    found = tree.find_method(cls, "__init__")
    if found is None or depth > 4:
        return None
    owner, init = found
    init_env = _bind_call(ev, init, call, env, skip_self=True)
    if "op_name" in _param_names(init):
        return init_env.get("op_name")
    init_module = tree.module(owner.module)
    init_ev = Evaluator(tree, init_module)
    mro = tree.mro(cls)
    parents = mro[mro.index(owner) + 1 :] if owner in mro else []
    for sub in ast.walk(init):
        if isinstance(sub, ast.Call) and _is_super_init(sub) and parents:
            return _op_name_through_init(tree, parents[0], sub, init_ev, init_env, depth + 1)
    return None


def _is_super_init(call: ast.Call) -> bool:
    func = call.func
    return (
        isinstance(func, ast.Attribute)
        and func.attr == "__init__"
        and isinstance(func.value, ast.Call)
        and isinstance(func.value.func, ast.Name)
        and func.value.func.id == "super"
    )


def _param_names(func: ast.FunctionDef) -> List[str]:
    return [a.arg for a in func.args.posonlyargs + func.args.args + func.args.kwonlyargs]


def _bind_call(
    ev: Evaluator, func: ast.FunctionDef, call: ast.Call, env: Dict[str, Any], skip_self: bool
) -> Dict[str, Any]:
    """Bind a call's static argument values to the callee's parameter names."""
    positional = [a.arg for a in func.args.posonlyargs + func.args.args]
    if skip_self and positional:
        positional = positional[1:]
    out: Dict[str, Any] = {}
    defaults = func.args.defaults
    for name, default in zip(positional[len(positional) - len(defaults) :], defaults):
        out[name] = ev.eval(default, {})
    for name, default in zip([a.arg for a in func.args.kwonlyargs], func.args.kw_defaults):
        if default is not None:
            out[name] = ev.eval(default, {})
    for name, arg in zip(positional, call.args):
        if isinstance(arg, ast.Starred):
            break
        out[name] = ev.eval(arg, env)
    for kw in call.keywords:
        if kw.arg is not None:
            out[kw.arg] = ev.eval(kw.value, env)
    return out


def _kw_value(ev: Evaluator, call: ast.Call, name: str, env: Dict[str, Any]) -> Any:
    for kw in call.keywords:
        if kw.arg == name:
            return ev.eval(kw.value, env)
    return None


def _as_name(value: Any) -> Tuple[Optional[str], Optional[str]]:
    if isinstance(value, str):
        return value, None
    if isinstance(value, (Template, Opaque)):
        return None, value.text
    return None, None


# ---------------------------------------------------------------------------------------
# marks


def _decorator_marks(ev: Evaluator, decorators: List[ast.expr]) -> List[str]:
    out = []
    for deco in decorators:
        name = ev.mark_name(deco)
        if name is not None and name != "parametrize":
            out.append(name)
    return out


def _operator_marks(names: Iterable[str]) -> List[str]:
    return _unique(n for n in names if n not in NON_OPERATOR_MARKS)


def _collectable(node: ast.ClassDef) -> bool:
    """pytest skips a Test* class that sets ``__test__ = False`` or defines __init__."""
    for item in node.body:
        if isinstance(item, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__test__" for t in item.targets
        ):
            if isinstance(item.value, ast.Constant) and not item.value.value:
                return False
        if isinstance(item, ast.FunctionDef) and item.name == "__init__":
            return False
    return True


def _unique(items: Iterable[str]) -> List[str]:
    seen, out = set(), []
    for item in items:
        if item not in seen:
            seen.add(item)
            out.append(item)
    return out


# ---------------------------------------------------------------------------------------
# trees reused across resolve_shape_key calls (a warmup plugin asks once per test)

_TREES: Dict[Path, BenchTree] = {}


def _tree_for(root: Path) -> BenchTree:
    key = root.resolve()
    if key not in _TREES:
        _TREES[key] = BenchTree(key)
    return _TREES[key]


def _normalise_rel(tree: BenchTree, test_file: str) -> str:
    path = Path(test_file)
    if path.is_absolute():
        path = path.resolve().relative_to(tree.root)
    rel = path.as_posix()
    bench = bench_dir_name(tree.root)
    if not rel.startswith(bench + "/"):
        rel = f"{bench}/{rel}"
    return rel

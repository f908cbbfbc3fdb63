"""A parsed FlagGems benchmark tree: modules, their classes, imports and class chains.

Everything is read with ``ast``; nothing is imported. Names are resolved across the
tree's own modules (``from . import base``, ``from benchmark.performance_utils import
Benchmark``, ``import benchmark.test_blas_perf as blas_perf``); anything outside the
tree (torch, flag_gems) stays an external name.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from .layout import TreeError, bench_dir_name

# Every FlagGems benchmark class derives from this one (benchmark/base.py at HEAD,
# benchmark/performance_utils.py at v5.0.2).
ROOT_CLASS = "Benchmark"


@dataclass(frozen=True)
class ClassRef:
    """A class: defined in a tree module, or an external name we cannot follow."""

    module: Optional[str]
    name: str
    scope: Optional[str] = None  # the function a local class is defined in

    @property
    def external(self) -> bool:
        return self.module is None


@dataclass(frozen=True)
class FuncRef:
    module: str
    name: str


@dataclass
class Module:
    name: str  # dotted, e.g. benchmark.test_abs
    path: Path
    rel: str  # posix path relative to the checkout root
    tree: ast.Module
    classes: Dict[str, ast.ClassDef] = field(default_factory=dict)
    functions: Dict[str, ast.FunctionDef] = field(default_factory=dict)
    assigns: Dict[str, ast.expr] = field(default_factory=dict)
    # classes defined inside a module-level function: (function, class) -> node
    local_classes: Dict[Tuple[str, str], ast.ClassDef] = field(default_factory=dict)
    # local name -> ("module", dotted) or ("symbol", dotted module, attribute)
    imports: Dict[str, Tuple[str, ...]] = field(default_factory=dict)

    @property
    def package(self) -> str:
        if self.path.name == "__init__.py":
            return self.name
        return self.name.rpartition(".")[0]


@dataclass(frozen=True)
class Package:
    """A dotted name that is a directory of modules, not a module we parsed."""

    name: str


def _module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _absolute(module: Module, level: int, target: Optional[str]) -> str:
    if level == 0:
        return target or ""
    base = module.package.split(".") if module.package else []
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join(base + ([target] if target else []))


def _index(module: Module) -> None:
    for node in module.tree.body:
        if isinstance(node, ast.ClassDef):
            module.classes[node.name] = node
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            module.functions[node.name] = node  # type: ignore[assignment]
            for sub in ast.walk(node):
                if isinstance(sub, ast.ClassDef):
                    module.local_classes[(node.name, sub.name)] = sub
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    module.assigns[target.id] = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value:
            module.assigns[node.target.id] = node.value
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    module.imports[alias.asname] = ("module", alias.name)
                else:
                    head = alias.name.split(".")[0]
                    module.imports[head] = ("module", head)
        elif isinstance(node, ast.ImportFrom):
            source = _absolute(module, node.level, node.module)
            for alias in node.names:
                local = alias.asname or alias.name
                module.imports[local] = ("symbol", source, alias.name)


def conftest_imports(root: Path) -> List[str]:
    """Module names the tree's benchmark conftest.py imports at its top level (absolute
    imports only), in order; [] when it is missing or does not parse."""
    try:
        path = Path(root) / bench_dir_name(Path(root)) / "conftest.py"
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError, TreeError):
        return []
    names: List[str] = []
    for node in tree.body:
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
    return names


class BenchTree:
    """The python modules under ``<root>/benchmark``, each parsed on first use."""

    def __init__(self, root: Path):
        self.root = Path(root).resolve()
        bench = self.root / bench_dir_name(self.root)
        self._paths: Dict[str, Path] = {_module_name(self.root, p): p for p in sorted(bench.rglob("*.py"))}
        self._parsed: Dict[str, Optional[Module]] = {}
        # checkout-relative path -> why it did not parse; such a module is left out of
        # every scan, so callers report these rather than lose the file silently.
        self.parse_errors: Dict[str, str] = {}

    def module(self, name: str) -> Optional[Module]:
        if name not in self._parsed:
            path = self._paths.get(name)
            self._parsed[name] = self._parse(name, path) if path else None
        return self._parsed[name]

    def paths(self) -> Dict[str, Path]:
        """Dotted module name -> file, for every module of the tree (nothing parsed)."""
        return dict(self._paths)

    def module_at(self, rel: str) -> Optional[Module]:
        """The module at a checkout-relative path such as ``benchmark/test_abs.py``."""
        path = self.root / rel
        return self.module(_module_name(self.root, path)) if path.is_file() else None

    @property
    def modules(self) -> Dict[str, Module]:
        """Every module of the tree (parses them all)."""
        out = {}
        for name in self._paths:
            module = self.module(name)
            if module is not None:
                out[name] = module
        return out

    def _parse(self, name: str, path: Path) -> Optional[Module]:
        rel = path.relative_to(self.root).as_posix()
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        except (SyntaxError, UnicodeDecodeError) as exc:
            self.parse_errors[rel] = f"{type(exc).__name__}: {exc}"
            return None
        module = Module(name, path, rel, tree)
        _index(module)
        return module

    def _module_or_package(self, dotted: str):
        if dotted in self._paths:
            return self.module(dotted)
        if any(name.startswith(dotted + ".") for name in self._paths):
            return Package(dotted)
        return None

    def resolve_symbol(self, module, name: str, _depth: int = 0):
        """What ``name`` means at module level: ClassRef, FuncRef, Module, Package or None."""
        if _depth > 8:
            return None
        if isinstance(module, Package):
            return self._module_or_package(f"{module.name}.{name}")
        if name in module.classes:
            return ClassRef(module.name, name)
        if name in module.functions:
            return FuncRef(module.name, name)
        imported = module.imports.get(name)
        if imported is None:
            return self._module_or_package(f"{module.name}.{name}")
        if imported[0] == "module":
            return self._module_or_package(imported[1])
        _, source, attr = imported
        sub = self._module_or_package(f"{source}.{attr}" if source else attr)
        if sub is not None:
            return sub
        target = self._module_or_package(source)
        if target is None:
            # Imported from outside the tree (torch, flag_gems): a name we cannot follow.
            return ClassRef(None, attr) if attr[:1].isupper() else None
        return self.resolve_symbol(target, attr, _depth + 1)

    def resolve_expr(self, module: Module, expr: ast.expr):
        """Resolve a Name or dotted Attribute naming a module, class or function."""
        if isinstance(expr, ast.Name):
            return self.resolve_symbol(module, expr.id)
        if isinstance(expr, ast.Attribute):
            owner = self.resolve_expr(module, expr.value)
            if isinstance(owner, (Module, Package)):
                return self.resolve_symbol(owner, expr.attr)
            if owner is None and expr.attr[:1].isupper():
                return ClassRef(None, expr.attr)  # torch.nn.Module and the like
        return None

    # -- classes ---------------------------------------------------------------
    def class_def(self, ref: ClassRef) -> Optional[ast.ClassDef]:
        if ref.external:
            return None
        module = self.module(ref.module)
        if module is None:
            return None
        if ref.scope is not None:
            return module.local_classes.get((ref.scope, ref.name))
        return module.classes.get(ref.name)

    def bases(self, ref: ClassRef) -> List[ClassRef]:
        node = self.class_def(ref)
        if node is None:
            return []
        module = self.module(ref.module)
        out: List[ClassRef] = []
        for base in node.bases:
            target = self.resolve_expr(module, base)
            if ref.scope and isinstance(base, ast.Name) and (ref.scope, base.id) in module.local_classes:
                target = ClassRef(module.name, base.id, ref.scope)
            if isinstance(target, ClassRef):
                out.append(target)
            elif isinstance(base, (ast.Name, ast.Attribute)):
                out.append(ClassRef(None, ast.unparse(base).split(".")[-1]))
        return [b for b in out if b.name != "object"]

    def mro(self, ref: ClassRef) -> List[ClassRef]:
        """C3 linearisation, as ``type(self).__mro__`` would give (without object)."""
        return _c3(ref, self.bases, set())

    def chain_names(self, ref: ClassRef) -> List[str]:
        return [c.name for c in self.mro(ref)]

    def is_benchmark_class(self, ref: ClassRef) -> bool:
        """Whether the class derives from FlagGems' root ``Benchmark`` class."""
        return any(c.name == ROOT_CLASS for c in self.mro(ref))

    def find_method(self, ref: ClassRef, name: str) -> Optional[Tuple[ClassRef, ast.FunctionDef]]:
        """The first definition of method ``name`` along the chain (tree classes only)."""
        for cls in self.mro(ref):
            node = self.class_def(cls)
            if node is None:
                continue
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == name:
                    return cls, item
        return None


def _c3(ref: ClassRef, bases_of, seen: set) -> List[ClassRef]:
    if ref in seen:  # a cycle through unresolved names: stop rather than loop
        return [ref]
    seen = seen | {ref}
    bases = bases_of(ref)
    seqs = [_c3(b, bases_of, seen) for b in bases] + [list(bases)]
    out = [ref]
    seqs = [list(s) for s in seqs if s]
    while seqs:
        for seq in seqs:
            head = seq[0]
            if not any(head in s[1:] for s in seqs):
                break
        else:  # inconsistent hierarchy: fall back to depth-first order
            head = seqs[0][0]
        out.append(head)
        seqs = [[c for c in s if c != head] for s in seqs]
        seqs = [s for s in seqs if s]
    return out

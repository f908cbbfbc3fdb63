"""Which printed table row a ``do_bench`` call is timing.

FlagGems' ``Benchmark.run`` calls ``get_input_iter(dtype)`` once per dtype, then per
input ``record_shapes(*args, **kwargs)`` (the printed Size Detail) followed by
``get_latency(torch_op, ...)`` and ``get_latency(gems_op, ...)``. Wrapping those three
methods on ``Benchmark`` and every subclass that defines its own tells the timer plugins
the (op, dtype, shape, side) of each timing call without touching the benchmark code.

Only calls made inside ``get_latency`` have a row; anything else that reaches a patched
``do_bench`` (an autotuner, say) is passed through untouched.
"""

from __future__ import annotations

import functools
import itertools
import sys
from typing import Any, Callable, Dict, Iterable, List, NamedTuple, Optional, Tuple

from zlbench.corpus.layout import BENCHMARK_BASE_MODULES
from zlbench.timing import TimedRow

BASE_MODULES = BENCHMARK_BASE_MODULES
WRAPPED_METHODS = ("get_input_iter", "record_shapes", "get_latency")
_MARK = "__zl_row_context__"


class Timing(NamedTuple):
    row_id: int
    row: TimedRow


class _RowState:
    __slots__ = ("row_id", "shape", "calls")

    def __init__(self, row_id: int, shape: Optional[str]):
        self.row_id = row_id
        self.shape = shape
        self.calls = 0


# --- pure helpers ---------------------------------------------------------------------


def dtype_text(value: Any) -> Optional[str]:
    """``str(dtype)`` for a torch.dtype (as the table header prints it), else None."""
    kind = type(value)
    if kind.__name__ == "dtype" and kind.__module__ == "torch":
        return str(value)
    return None


def first_tensor_dtype(args: Iterable[Any], kwargs: Dict[str, Any]) -> Optional[str]:
    stack = list(args) + list(kwargs.values())
    stack.reverse()
    while stack:
        item = stack.pop()
        dtype = getattr(item, "dtype", None) if hasattr(item, "data_ptr") else None
        if dtype is not None:
            return dtype_text(dtype)
        if isinstance(item, (list, tuple)):
            stack.extend(reversed(item))
        elif isinstance(item, dict):
            stack.extend(reversed(list(item.values())))
    return None


def sides_for(metrics: Optional[Iterable[str]]) -> List[str]:
    """Order of get_latency calls in a row: torch (latency_base) first, then gems."""
    metrics = list(metrics) if metrics else ["latency_base", "latency"]
    sides = [s for m, s in (("latency_base", "torch"), ("latency", "gems")) if m in metrics]
    return sides or ["torch", "gems"]


def side_for_call(index: int, metrics: Optional[Iterable[str]]) -> str:
    sides = sides_for(metrics)
    return sides[index] if index < len(sides) else f"call{index + 1}"


# --- installing the wrappers ------------------------------------------------------------


def is_benchmark_base(obj: Any) -> bool:
    return (
        isinstance(obj, type)
        and obj.__name__ == "Benchmark"
        and "get_latency" in obj.__dict__
        and "record_shapes" in obj.__dict__
    )


def find_benchmark_bases(modules: Optional[Dict[str, Any]] = None) -> List[type]:
    """Benchmark base classes among loaded modules, the known module names first."""
    modules = dict(sys.modules if modules is None else modules)
    names = [n for n in BASE_MODULES if n in modules]
    names += [n for n in modules if n not in BASE_MODULES]
    found: List[type] = []
    for name in names:
        try:
            candidate = vars(modules[name]).get("Benchmark")
        except TypeError:
            continue
        if is_benchmark_base(candidate) and candidate not in found:
            found.append(candidate)
    return found


def _all_subclasses(base: type) -> List[type]:
    out, stack = [], [base]
    while stack:
        cls = stack.pop()
        if cls not in out:
            out.append(cls)
            stack.extend(cls.__subclasses__())
    return out


class RowContext:
    """The row being timed in this process: what the wrapped Benchmark methods share.

    A timer session owns one (and puts it on ``config.stash[ROW_CONTEXT]`` for the
    autotune plugin); ``install`` wraps the Benchmark classes, ``uninstall`` restores them.
    """

    def __init__(self, after_latency: Optional[List[Callable[[Optional[Timing]], None]]] = None) -> None:
        # Called with the Timing after every get_latency call (the phases plugin counts rows).
        self.after_latency = after_latency if after_latency is not None else []
        self._row_ids = itertools.count(1)
        self._current: Optional[Timing] = None
        self._latency_depth = 0
        self._shape_depth = 0
        self._timed_in_call = False
        self._installed: List[Tuple[type, str, Any]] = []
        self._subclass_hooks: List[Tuple[type, Any]] = []
        self.stats: Dict[str, int] = {"latency_calls": 0, "latency_calls_untimed": 0}

    def current(self) -> Optional[Timing]:
        """The row being timed, or None outside ``Benchmark.get_latency``."""
        return self._current

    def mark_timed(self) -> None:
        """A timer measured the current get_latency call (see ``stats``)."""
        self._timed_in_call = True

    # -- the row of one get_latency call

    def _row_for_call(self, bench: Any, args: tuple, kwargs: dict) -> Timing:
        state = bench.__dict__.get("_zl_row")
        if state is None:
            # No record_shapes call seen for this instance: derive the shape the same way.
            try:
                shape = str(bench.record_shapes(*args, **kwargs))
            except Exception:
                shape = None
            auto = bench.__dict__.get("_zl_auto_row")
            limit = len(sides_for(getattr(bench, "to_bench_metrics", None)))
            if auto is None or auto.shape != shape or auto.calls >= limit:
                auto = _RowState(next(self._row_ids), shape)
                bench.__dict__["_zl_auto_row"] = auto
            state = auto
        side = side_for_call(state.calls, getattr(bench, "to_bench_metrics", None))
        state.calls += 1
        dtype = bench.__dict__.get("_zl_dtype")
        source = None
        if dtype is None:
            dtype = first_tensor_dtype(args, kwargs)
            source = "guess" if dtype else "unknown"
        op = getattr(bench, "op_name", None)
        return Timing(state.row_id, TimedRow(op, dtype, state.shape, side, source))

    def _wrap_get_input_iter(self, original):
        @functools.wraps(original)
        def get_input_iter(bench, *args, **kwargs):
            value = args[0] if args else next(iter(kwargs.values()), None)
            text = dtype_text(value)
            if text is not None:
                bench.__dict__["_zl_dtype"] = text
            return original(bench, *args, **kwargs)

        return get_input_iter

    def _wrap_record_shapes(self, original):
        ctx = self

        @functools.wraps(original)
        def record_shapes(bench, *args, **kwargs):
            ctx._shape_depth += 1
            try:
                result = original(bench, *args, **kwargs)
            finally:
                ctx._shape_depth -= 1
            # The outermost call outside get_latency is the one whose text is printed.
            if ctx._shape_depth == 0 and ctx._latency_depth == 0:
                bench.__dict__["_zl_row"] = _RowState(next(ctx._row_ids), str(result))
            return result

        return record_shapes

    def _wrap_get_latency(self, original):
        ctx = self

        @functools.wraps(original)
        def get_latency(bench, op, *args, **kwargs):
            if ctx._latency_depth:
                # A subclass override calling super().get_latency: same timing call.
                return original(bench, op, *args, **kwargs)
            ctx._latency_depth = 1
            previous, ctx._timed_in_call = ctx._current, False
            timing = None
            try:
                ctx._current = timing = ctx._row_for_call(bench, args, kwargs)
                ctx.stats["latency_calls"] += 1
                return original(bench, op, *args, **kwargs)
            finally:
                if not ctx._timed_in_call:
                    ctx.stats["latency_calls_untimed"] += 1
                ctx._current, ctx._latency_depth = previous, 0
                for listener in ctx.after_latency:
                    listener(timing)

        return get_latency

    # -- installing the wrappers

    def _wrap_class(self, cls: type) -> None:
        wrappers = {
            "get_input_iter": self._wrap_get_input_iter,
            "record_shapes": self._wrap_record_shapes,
            "get_latency": self._wrap_get_latency,
        }
        for name in WRAPPED_METHODS:
            original = cls.__dict__.get(name)
            if original is None or getattr(original, _MARK, False) or not callable(original):
                continue
            wrapped = wrappers[name](original)
            setattr(wrapped, _MARK, True)
            setattr(cls, name, wrapped)
            self._installed.append((cls, name, original))

    def _hook_subclass_creation(self, base: type) -> None:
        """Wrap classes defined later too (FlagGems defines some inside test functions)."""
        if any(b is base for b, _ in self._subclass_hooks):
            return
        previous = base.__dict__.get("__init_subclass__")
        wrap_class = self._wrap_class

        def __init_subclass__(cls, **kwargs):
            if previous is not None:
                previous.__get__(None, cls)(**kwargs)
            else:
                super(base, cls).__init_subclass__(**kwargs)
            wrap_class(cls)

        base.__init_subclass__ = classmethod(__init_subclass__)  # type: ignore[method-assign,assignment]
        self._subclass_hooks.append((base, previous))

    def install(self, modules: Optional[Dict[str, Any]] = None) -> List[type]:
        """Wrap every Benchmark class found; returns the base classes (empty if none)."""
        bases = find_benchmark_bases(modules)
        for base in bases:
            for cls in _all_subclasses(base):
                self._wrap_class(cls)
            self._hook_subclass_creation(base)
        return bases

    def uninstall(self) -> None:
        while self._installed:
            cls, name, original = self._installed.pop()
            setattr(cls, name, original)
        while self._subclass_hooks:
            base, previous = self._subclass_hooks.pop()
            if previous is None:
                del base.__init_subclass__
            else:
                base.__init_subclass__ = previous  # type: ignore[method-assign]
        self._current, self._latency_depth, self._shape_depth = None, 0, 0
        for key in self.stats:
            self.stats[key] = 0

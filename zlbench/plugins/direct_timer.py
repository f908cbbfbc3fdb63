"""pytest plugin: the upstream timer, repeated ZL_DIRECT_REPEAT times (median of calls).

Loaded with ``-p zlbench.plugins.direct_timer`` where the backend cannot capture graphs
or ZL_ENABLE_CUDAGRAPH=0. After collection it replaces the benchmark's ``do_bench``
(triton's, the vendor variants, and ``zlbench.cpu_timer``'s) with one that calls the
original N times for each timed row and returns the median. N=1 measures exactly what
FlagGems' kernel mode measures. The graph timer reuses this for its fallback rows.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import os
import sys
from contextlib import contextmanager
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from zlbench.plugins import row_context, run_dir, write_plugin_json
from zlbench.timing import footer_line, parse_repeat, repeat_median

PLUGIN = "direct_timer"
# Where benchmark code looks its timer up at call time: (module, attribute).
DIRECT_TARGETS = (
    ("triton.testing", "do_bench"),
    ("triton.musa_testing", "do_bench"),
    ("triton.backends.ascend.testing", "do_bench_npu"),
    ("zlbench.cpu_timer", "do_bench"),
)
# Modules worth importing to patch; vendor ones are patched only if already loaded.
IMPORTABLE = ("triton.testing", "zlbench.cpu_timer")


# --- patching do_bench ---------------------------------------------------------------

_patched: List[Tuple[Any, str, Any]] = []
_busy = False


@contextmanager
def timing_in_progress():
    """While a timer runs, nested do_bench calls (autotuners) go to the original."""
    global _busy
    saved, _busy = _busy, True
    try:
        yield
    finally:
        _busy = saved


def should_intercept() -> bool:
    return not _busy and row_context.current() is not None


def _load(module_name: str) -> Optional[Any]:
    module = sys.modules.get(module_name)
    if module is not None or module_name not in IMPORTABLE:
        return module
    try:
        return importlib.import_module(module_name)
    except Exception:  # triton missing or broken: nothing to patch there
        return None


def patch_do_bench(targets: Sequence[Tuple[str, str]],
                   make: Callable[[Callable], Callable]) -> List[str]:
    """Replace each target with ``make(original)``; returns the patched names."""
    done = []
    for module_name, attr in targets:
        module = _load(module_name)
        original = getattr(module, attr, None) if module is not None else None
        if original is None or getattr(original, "__zl_timer__", False):
            continue
        replacement = make(original)
        replacement.__zl_timer__ = True
        setattr(module, attr, replacement)
        _patched.append((module, attr, original))
        done.append(f"{module_name}.{attr}")
    return done


def unpatch_all() -> None:
    while _patched:
        module, attr, original = _patched.pop()
        setattr(module, attr, original)


def call_options(original: Callable, fn: Callable, args: tuple, kwargs: dict) -> Dict[str, Any]:
    """The caller's do_bench arguments by name, defaults filled in from ``original``."""
    try:
        bound = inspect.signature(original).bind(fn, *args, **kwargs)
        bound.apply_defaults()
        return dict(bound.arguments)
    except (TypeError, ValueError):
        return dict(kwargs)


# --- the timer -------------------------------------------------------------------------

class DirectTimer:
    """Median over ``repeat`` whole calls of the upstream do_bench, with counts."""

    def __init__(self, repeat: int):
        self.repeat = repeat
        self.rows = set()
        self.timings = 0
        self.timings_repeated = 0
        self.timings_single_by_request = 0   # quantiles or return_mode="all" asked

    def measure(self, original: Callable, fn: Callable, args: tuple, kwargs: dict) -> Any:
        timing = row_context.current()
        opts = call_options(original, fn, args, kwargs)
        result, calls = repeat_median(
            lambda: original(fn, *args, **kwargs),
            self.repeat,
            opts.get("quantiles"),
            opts.get("return_mode", "mean"),
        )
        if calls > 1:
            self.timings_repeated += 1
        elif self.repeat > 1:
            self.timings_single_by_request += 1
        # The graph timer's fallbacks land here too; it reports its own counts, not these.
        if timing is not None:
            self.record(timing.row_id)
        return result

    def record(self, row_id: int) -> None:
        self.rows.add(row_id)
        self.timings += 1

    def counts(self) -> dict:
        return {
            "timer": "direct",
            "repeat": self.repeat,
            "rows_direct": len(self.rows),
            "timings": self.timings,
            "timings_repeated": self.timings_repeated,
            "timings_single_by_request": self.timings_single_by_request,
        }


def make_replacement(timer: Any) -> Callable[[Callable], Callable]:
    """``make`` for patch_do_bench: rows inside get_latency go to ``timer.measure``."""
    def make(original: Callable) -> Callable:
        @functools.wraps(original)
        def do_bench(fn, *args, **kwargs):
            if not should_intercept():
                return original(fn, *args, **kwargs)
            with timing_in_progress():
                result = timer.measure(original, fn, args, kwargs)
            row_context.mark_timed()
            return result

        return do_bench

    return make


# --- pytest hooks ----------------------------------------------------------------------

class TimerSession:
    """The pytest glue both timer plugins share: create the timer at configure, patch
    the timer sites once the benchmark classes are imported, write counts after every
    test (a killed run keeps them), print the footer, undo everything at the end."""

    def __init__(self, plugin: str, make_timer: Callable[[int], Any], targets):
        self.plugin = plugin
        self.make_timer = make_timer
        self.targets = targets
        self.timer: Optional[Any] = None
        self.info: Dict[str, Any] = {}

    def report(self) -> dict:
        data = dict(self.timer.counts())
        data.update(self.info)
        data["latency_calls"] = row_context.stats["latency_calls"]
        data["latency_calls_untimed"] = row_context.stats["latency_calls_untimed"]
        return data

    # Hook signatures, so a plugin module can bind them as its own hooks.
    def pytest_configure(self, config) -> None:
        if run_dir() is None:
            return
        self.timer = self.make_timer(parse_repeat(os.environ.get("ZL_DIRECT_REPEAT")))
        self.info["requested_timer"] = os.environ.get("ZL_TIMER")

    def pytest_collection_finish(self, session) -> None:
        if self.timer is None:
            return
        bases = row_context.install()
        self.info["benchmark_classes"] = [f"{b.__module__}.{b.__qualname__}" for b in bases]
        self.info["patched"] = patch_do_bench(self.targets, make_replacement(self.timer))

    def pytest_runtest_logfinish(self, nodeid, location) -> None:
        if self.timer is not None:
            write_plugin_json(self.plugin, self.report())

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if self.timer is None:
            return
        data = self.report()
        write_plugin_json(self.plugin, data)
        terminalreporter.write_line(footer_line(self.plugin, data))

    def pytest_unconfigure(self, config) -> None:
        if self.timer is None:
            return
        write_plugin_json(self.plugin, self.report())
        unpatch_all()
        row_context.uninstall()
        self.timer = None


_session = TimerSession(PLUGIN, DirectTimer, DIRECT_TARGETS)
pytest_configure = _session.pytest_configure
pytest_collection_finish = _session.pytest_collection_finish
pytest_runtest_logfinish = _session.pytest_runtest_logfinish
pytest_terminal_summary = _session.pytest_terminal_summary
pytest_unconfigure = _session.pytest_unconfigure

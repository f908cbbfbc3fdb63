"""pytest plugin: the direct timer, for rows that are not timed by graph replay.

Loaded with ``-p zlbench.plugins.direct_timer`` where the backend cannot capture graphs
or ZL_ENABLE_CUDAGRAPH=0. After collection it replaces the benchmark's ``do_bench``
(triton's, the vendor variants, and ``zlbench.cpu_timer``'s). ZL_DIRECT_TIMER says how
it measures: ``kernels`` (default) and ``percall`` time every call on its own until the
median is pinned to ZL_DIRECT_NOISE (``zlbench.plugins.percall``: the device time of its
kernels from the profiler's trace, or device events around it); ``do_bench`` is the
original, ZL_DIRECT_REPEAT times, median (N=1 is exactly FlagGems' kernel mode). The
graph timer reuses this for its fallback rows. Every timing appends its row's samples,
spread and device state to row_stats.jsonl (``zlbench.rowstats``).
"""

from __future__ import annotations

import functools
import importlib
import inspect
import os
import statistics
import sys
import time
from contextlib import contextmanager
from typing import Any, Callable, Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple

import pytest

from zlbench import backends, benchenv, knobs, rowstats
from zlbench.markers import (
    DEVICE_THROTTLED,
    DIRECT_TIMER_HOST_CLOCK,
    DIRECT_TIMER_UNTRACED,
    NO_DEVICE_WORK,
    POWER_CAP_WINDOW,
    format_marker,
)
from zlbench.plugins import print_line, run_dir, write_plugin_json
from zlbench.plugins.keys import ROW_CONTEXT, ROW_LISTENERS, ROW_RECORD_FIELDS
from zlbench.plugins.percall import NothingTraced, PercallResult, choose_clock, percall_bench
from zlbench.plugins.row_context import RowContext
from zlbench.timing import (
    CapWatch,
    Measured,
    StopRule,
    TimedRow,
    WarmupRule,
    cpu_share,
    footer_line,
    host_time_stop,
    host_time_warmup,
    measured_from,
    relative_spread,
    repeat_median,
    throttle_reason,
    working_clock,
)

PLUGIN = "direct_timer"
# Where benchmark code looks its timer up at call time: (module, attribute), as each
# backend module lists them (backends/<vendor>.py timer_targets).
DIRECT_TARGETS = backends.union("timer_targets")
# Modules worth importing to patch; vendor ones are patched only if already loaded.
IMPORTABLE = ("triton.testing", "zlbench.cpu_timer")


# --- patching do_bench ---------------------------------------------------------------

Patched = List[Tuple[Any, str, Any]]  # (module, attribute, original)


def _load(module_name: str) -> Optional[Any]:
    module = sys.modules.get(module_name)
    if module is not None or module_name not in IMPORTABLE:
        return module
    try:
        return importlib.import_module(module_name)
    except Exception:  # triton missing or broken: nothing to patch there
        return None


def patch_do_bench(
    targets: Sequence[Tuple[str, str]], make: Callable[[Callable], Callable], patched: Patched
) -> List[str]:
    """Replace each target with ``make(original)``, noting it in ``patched``; returns
    the patched names."""
    done = []
    for module_name, attr in targets:
        module = _load(module_name)
        original = getattr(module, attr, None) if module is not None else None
        if original is None or getattr(original, "__zl_timer__", False):
            continue
        replacement = make(original)
        setattr(replacement, "__zl_timer__", True)
        setattr(module, attr, replacement)
        patched.append((module, attr, original))
        done.append(f"{module_name}.{attr}")
    return done


def unpatch_all(patched: Patched) -> None:
    while patched:
        module, attr, original = patched.pop()
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


class DirectSettings(NamedTuple):
    mode: str  # kernels | percall | do_bench (ZL_DIRECT_TIMER)
    repeat: int  # do_bench mode: whole upstream calls per timing (ZL_DIRECT_REPEAT)
    noise: float  # kernels/percall: target relative CI half-width (ZL_DIRECT_NOISE)
    warmup_rule: str = "settle"  # kernels/percall: ZL_WARMUP_RULE (timing.WarmupRule)

    @classmethod
    def from_env(cls, env=None) -> "DirectSettings":
        """Read through the knobs table (``zlbench run`` set them); raises KnobError."""
        return cls(
            knobs.env_value("direct_timer", env),
            knobs.env_value("direct_repeat", env),
            knobs.env_value("direct_noise", env) / 100.0,
            knobs.env_value("warmup_rule", env),
        )


class DirectTimer:
    """Per-call timing with adaptive stopping, or FlagGems' do_bench (median of
    ``repeat`` whole calls); every timing leaves a row record."""

    def __init__(self, settings: DirectSettings, recorder: "RowRecorder", row_context: RowContext):
        self.settings = settings
        self.repeat = settings.repeat
        self.recorder = recorder
        self.row_context = row_context
        self.clock, self.clock_note = (None, None)
        self.rows: set = set()  # ids of the rows this timer measured
        self.timings = 0
        self.timings_repeated = 0
        self.timings_single_by_request = 0  # quantiles or return_mode="all" asked
        self.stops: Dict[str, int] = {}
        self.clocks: Dict[str, int] = {}  # timings per clock that measured them
        self.untraced: Optional[str] = None  # why the last untraced timing fell back
        # (op, side) whose empty-graph timing the tracer found without device work: a
        # later empty graph of theirs is timed by events at once, without a trace.
        self.host_only: set = set()
        self.timings_untraced_by_empty_graph = 0

    @property
    def per_call(self) -> bool:
        return self.settings.mode in ("kernels", "percall")

    def _clock(self):
        if self.clock is None:
            activity = self.recorder.profiler_activity if self.settings.mode == "kernels" else None
            self.clock, self.clock_note = choose_clock(self.recorder.torch_device, activity)
            if self.clock_note and self.clock.name == "host":
                print_line(format_marker(DIRECT_TIMER_HOST_CLOCK, reason=self.clock_note))
            elif self.clock_note:
                print_line(f"zlbench direct timer: {self.clock_note}; rows are timed by {self.clock.name}")
        return self.clock

    def measure(
        self,
        original: Callable,
        fn: Callable,
        args: tuple,
        kwargs: dict,
        empty_graph: bool = False,
        prewarmed_ms: Optional[float] = None,
    ) -> Any:
        """``empty_graph``: the graph timer's capture of these calls recorded no device work;
        ``prewarmed_ms``: its warm-up settled, a call costing that much wall time, before
        the capture failed (``percall_bench`` then warms up no more than it needs to size
        the samples; a host-time timing keeps its own warm-up, ``_bench``)."""
        timing = self.row_context.current()
        opts = call_options(original, fn, args, kwargs)
        self.recorder.start()
        clock = None
        if self.per_call:
            known = empty_graph and timing is not None and timing.row.op is not None
            key = (timing.row.op, timing.row.side) if known else None
            measured, clock, untraced = self._percall(fn, opts, key, prewarmed_ms)
            self.clocks[clock] = self.clocks.get(clock, 0) + 1
            if untraced is not None:
                self._say_untraced(timing.row if timing is not None else None, clock, untraced)
        else:
            measured = self._do_bench(original, fn, args, kwargs, opts)
        self.stops[measured.stop] = self.stops.get(measured.stop, 0) + 1
        if timing is not None:
            self.rows.add(timing.row_id)
            self.timings += 1
            self.recorder.finish(timing.row, measured, "direct", clock)
        return measured.value

    @staticmethod
    def _say_untraced(row: Optional[TimedRow], clock: str, untraced: NothingTraced) -> None:
        """The row's number is host time where device time was asked: a marker for the
        row, so summary --ab can say what it compared (host time on both sides: nothing,
        SAME; on one: no verdict); a plain line for a timing outside every row (a marker
        naming no row would attach to all of them)."""
        if row is None:
            print_line(f"zlbench direct timer: timed by {clock}: {untraced}")
            return
        print_line(
            format_marker(
                DIRECT_TIMER_UNTRACED,
                **row.marker_fields(),
                clock=clock,
                kind=untraced.kind,
                why=str(untraced),
            )
        )

    def _percall(
        self,
        fn: Callable,
        opts: dict,
        empty_key: Optional[Tuple[Any, Any]] = None,
        prewarmed_ms: Optional[float] = None,
    ) -> Tuple[Measured, str, Optional[NothingTraced]]:
        """(what it measured, the name of the clock that did, why the traced clock
        could not, if it was asked and could not). ``empty_key``: (op, side) of a timing
        whose graph capture was empty."""
        rule = StopRule.for_call(self.settings.noise, float(opts.get("rep", 100) or 100))
        clock = self._clock()
        untraced = None
        events = getattr(clock, "warmup_clock", None)
        if events is not None and empty_key is not None and empty_key in self.host_only:
            # An empty graph again, for an operator's side whose empty graph the tracer
            # already found without device work (a view, a metadata op): on an H200 the
            # trace cost each transpose timing a profiler session for the same answer.
            untraced = NothingTraced(
                "its CUDA graph was empty, and the tracer found no device work in an earlier "
                f"empty graph of {empty_key[0]}'s {empty_key[1]} side",
                NO_DEVICE_WORK,
            )
            self.timings_untraced_by_empty_graph += 1
            clock = events
            result = self._bench(fn, clock, opts, rule, host_time=True)
        else:
            try:
                result = self._bench(fn, clock, opts, rule, prewarmed_ms=prewarmed_ms)
            except NothingTraced as e:
                # Work the tracer does not see (host-only, or an unsupported launch path):
                # this timing goes to the events around each call.
                untraced = e
                if e.kind == NO_DEVICE_WORK and empty_key is not None:
                    self.host_only.add(empty_key)
                clock = clock.warmup_clock
                result = self._bench(
                    fn, clock, opts, rule, host_time=e.kind == NO_DEVICE_WORK, prewarmed_ms=prewarmed_ms
                )
        if untraced is not None:
            self.untraced = str(untraced)
        measured = measured_from(
            result.samples, opts.get("quantiles"), opts.get("return_mode", "mean"), result.stop
        )
        return measured._replace(cost=result.cost), clock.name, untraced

    def _bench(
        self,
        fn: Callable,
        clock: Any,
        opts: dict,
        rule: StopRule,
        host_time: bool = False,
        prewarmed_ms: Optional[float] = None,
    ) -> PercallResult:
        warmup = WarmupRule(self.settings.warmup_rule, float(opts.get("warmup", 25) or 25))
        caller_rep_ms = rule.budget
        if host_time:
            warmup, rule = host_time_warmup(warmup), host_time_stop(rule)
            # Its own warm-up (judged by the fastest calls) costs a few milliseconds: on
            # an H200 a batch sized by the graph timer's warm-up, each call with its own
            # events here, cost transpose's host-time timings twice that.
            prewarmed_ms = None
        result = percall_bench(
            fn,
            clock,
            warmup,
            rule,
            opts.get("grad_to_none"),
            self.recorder.warm,
            self.recorder.device_ready,
            fastest=host_time,
            prewarmed_ms=prewarmed_ms,
        )
        if host_time:  # its budget (cost_ms.rep_ms) is smaller than the caller's
            result.cost["caller_rep_ms"] = caller_rep_ms
        return result

    def _do_bench(self, original, fn, args, kwargs, opts) -> Measured:
        self.recorder.warm()  # do_bench warms up inside: the state around the whole call
        values: List[float] = []

        def call():
            value = original(fn, *args, **kwargs)
            if isinstance(value, (int, float)):
                values.append(float(value))
            return value

        result, calls = repeat_median(
            call, self.repeat, opts.get("quantiles"), opts.get("return_mode", "mean")
        )
        if calls > 1:
            self.timings_repeated += 1
        elif self.repeat > 1:
            self.timings_single_by_request += 1
        ordered = sorted(values)
        median = statistics.median(ordered) if ordered else None
        # Spread over whole do_bench calls when there were several; none from one.
        return Measured(
            result,
            median,
            len(ordered) if calls > 1 else 0,
            relative_spread(ordered) if calls > 1 else None,
            "do_bench",
        )

    def counts(self) -> dict:
        data = {
            "timer": "direct",
            "mode": self.settings.mode,
            "repeat": self.repeat,
            "rows_direct": len(self.rows),
            "timings": self.timings,
        }
        if self.per_call:
            data["noise_target_pct"] = round(self.settings.noise * 100, 4)
            data["clock"] = self.clock.name if self.clock is not None else None
            if self.clock_note:
                data["clock_note"] = self.clock_note
            data["clocks"] = dict(self.clocks)
            readers = getattr(self.clock, "readers", None)
            if readers:
                # Sessions read from raw events or torch's event tree (far slower), and why not raw.
                data["trace_readers"] = dict(readers)
                why_not = getattr(self.clock, "raw_unavailable", None)
                if why_not:
                    data["raw_events_unavailable"] = why_not
            if self.untraced:
                data["untraced"] = self.untraced
            data["untraced_by_empty_graph"] = self.timings_untraced_by_empty_graph
            data["stops"] = dict(self.stops)
        else:
            data["timings_repeated"] = self.timings_repeated
            data["timings_single_by_request"] = self.timings_single_by_request
        return data


class RowRecorder:
    """Device state around each timed row, and the row's record in row_stats.jsonl.

    ``start`` before a timing, ``warm`` once warm-up is over (the first device sample),
    ``finish`` after the last timed call (the second sample, the record, and a
    DEVICE_THROTTLED marker when the device was slow in between).
    """

    def __init__(self, backend_name: Optional[str], field_providers: Optional[list] = None):
        from zlbench.backends import BACKENDS

        self.field_providers = field_providers if field_providers is not None else []

        self.backend = BACKENDS.get(backend_name or "")
        self.backend_name = backend_name
        self.torch_device = self.backend.torch_device if self.backend is not None else None
        self.profiler_activity = self.backend.profiler_activity if self.backend is not None else None
        self._state = None
        self.reference_mhz: Optional[float] = None
        self.reference_speed: Optional[float] = None  # cpu: the median host_speed read
        self.speeds: List[float] = []
        self.before: Optional[dict] = None
        self.rows_throttled = 0
        self.records = 0
        self.last_end: Optional[float] = None
        self.gap_ms: Optional[float] = None

    @property
    def state(self):
        """Opened at the first timed row, when the benchmark has set up its device."""
        if self._state is None:
            from zlbench.backends.base import DeviceState, open_device_state

            self._state = (
                open_device_state(self.backend)
                if self.backend is not None
                else DeviceState(f"unknown backend {self.backend_name!r}")
            )
        return self._state

    def close(self) -> None:
        if self._state is not None:
            self._state.close()

    def start(self) -> None:
        self.before = None
        now = time.perf_counter()
        # The benchmark's own work since the last timing ended (inputs, reference calls,
        # its table): what a row costs beyond its timer, for the measure phase's account.
        self.gap_ms = None if self.last_end is None else round((now - self.last_end) * 1e3, 3)

    def warm(self) -> None:
        if self.before is None:
            self.before = self._sample(ending=False)

    def device_ready(self) -> Optional[bool]:
        """For a timer's warm-up: is the device at its working clock
        (``timing.working_clock`` against the highest SM clock read in the run)? None
        where that cannot be told. An answer other than False makes its sample the row's
        first."""
        sample = self._sample(ending=False)
        ready = working_clock(sample, self.reference_mhz)
        if ready is not False:
            self.before = sample
        return ready

    def cap_watch(self) -> Optional[CapWatch]:
        """A watch on the power cap for one timing (``timing.CapWatch``) from the run's
        highest clock so far, or None where the device's state cannot be read. The run's
        reference stays the row samples' own (what the watch reads while work runs is
        not what those samples read, and they are compared with it)."""
        if not self.state.available():
            return None
        return CapWatch(self.state.busy_sample, self.reference_mhz)

    def _sample(self, ending: bool = True) -> dict:
        try:
            return self.state.sample(ending=ending) if self.state.available() else {}
        except Exception as e:  # the driver went away mid-run: say so in the record
            return {"error": f"{type(e).__name__}: {e}"}

    def finish(self, row: TimedRow, measured: Measured, timer: str, clock: Optional[str] = None) -> None:
        self.warm()
        before, after = self.before or {}, self._sample()
        clocks = [c for c in (before.get("sm_mhz"), after.get("sm_mhz")) if c]
        if clocks:
            self.reference_mhz = max([self.reference_mhz or 0, *clocks])
        speeds = [v for v in (before.get("host_speed"), after.get("host_speed")) if v]
        if speeds:
            self.speeds += speeds
            self.reference_speed = statistics.median(self.speeds)
        at_cap = (measured.cost or {}).get("power_cap")
        why = throttle_reason(before, after, self.reference_mhz, self.reference_speed, at_cap=bool(at_cap))
        if at_cap:
            # Timed again over the power cap's period (timing.CAP_WINDOW_MS): the row is a
            # sustained figure at the cap, which an A/B must find on both sides to compare.
            print_line(
                format_marker(
                    POWER_CAP_WINDOW,
                    **row.marker_fields(),
                    window_ms=at_cap.get("window_ms"),
                    replays=at_cap.get("replays"),
                    median_mhz=at_cap.get("median_mhz"),
                    min_mhz=at_cap.get("min_mhz"),
                    ref_mhz=at_cap.get("ref_mhz"),
                )
            )
        if why:
            self.rows_throttled += 1
            share = cpu_share(before, after)
            print_line(
                format_marker(
                    DEVICE_THROTTLED,
                    **row.marker_fields(),
                    why=why,
                    sm_mhz=f"{before.get('sm_mhz')}->{after.get('sm_mhz')}" if clocks else None,
                    ref_mhz=self.reference_mhz,
                    host_speed=f"{before.get('host_speed')}->{after.get('host_speed')}" if speeds else None,
                    ref_speed=self.reference_speed,
                    temp_c=after.get("temp_c"),
                    power_w=after.get("power_w"),
                    cpu_share=None if share is None else round(share, 3),
                    load1=after.get("load1"),
                    other_procs=after.get("other_procs") or None,
                )
            )
        record = {
            "op": row.op,
            "dtype": row.dtype,
            "shape": row.shape,
            "side": row.side,
            "timer": timer,
            "median_ms": measured.median_ms,
            "samples": measured.samples,
            "spread": measured.spread,
            "stop": measured.stop,
            "throttled": why,
        }
        if clock:
            record["clock"] = clock
        if timer == "graph":
            record["placements"] = measured.placements
        if measured.cost is not None:
            record["cost_ms"] = measured.cost
        if self.gap_ms is not None:
            record["gap_ms"] = self.gap_ms
        for provide in self.field_providers:
            record.update(provide(row) or {})
        if before or after:
            record["device"] = {"before": before, "after": after}
        root = run_dir()
        if root is not None:
            rowstats.append(root, record)
            self.records += 1
        self.last_end = time.perf_counter()

    def report(self) -> dict:
        if self._state is None:
            return {
                "source": "not opened",
                "reason": "no row was timed",
                "clocks_locked": "unknown",
                "rows_throttled": 0,
                "row_records": 0,
            }
        data = dict(self.state.describe())
        data["rows_throttled"] = self.rows_throttled
        data["row_records"] = self.records
        if self.reference_mhz:
            data["highest_sm_mhz"] = self.reference_mhz
        if self.reference_speed:
            data["median_host_speed"] = self.reference_speed
        return data


def pin_host_threads() -> Optional[int]:
    """torch.set_num_threads(ZL_CPU_THREADS) where the backend pins threads (cpu sets the
    variable; elsewhere it is absent and nothing is pinned)."""
    if not os.environ.get(knobs.BY_NAME["cpu_threads"].env):
        return None
    import torch

    torch.set_num_threads(knobs.env_value("cpu_threads"))
    return torch.get_num_threads()


def keep_host_memory() -> Optional[bool]:
    """Fix glibc's malloc thresholds where the backend asks (cpu sets ZL_CPU_KEEP_MEMORY;
    elsewhere it is absent): whether they were set, or None when not asked."""
    if not os.environ.get(knobs.BY_NAME["cpu_keep_memory"].env) or not knobs.env_value("cpu_keep_memory"):
        return None
    from zlbench.backends.cpu import keep_freed_memory

    kept = keep_freed_memory()
    if not kept:
        print_line("zlbench cpu: ZL_CPU_KEEP_MEMORY=1 not applied (no glibc mallopt here)")
    return kept


def make_replacement(session: "TimerSession") -> Callable[[Callable], Callable]:
    """``make`` for patch_do_bench: rows inside get_latency go to the session's timer."""

    def make(original: Callable) -> Callable:
        @functools.wraps(original)
        def do_bench(fn, *args, **kwargs):
            if not session.should_intercept():
                return original(fn, *args, **kwargs)
            with session.timing_in_progress():
                result = session.timer.measure(original, fn, args, kwargs)
            session.row_context.mark_timed()
            return result

        return do_bench

    return make


# --- pytest hooks ----------------------------------------------------------------------

# The timer plugin's session (direct or graph: one is loaded), for other plugins to find.
TIMER_SESSION = pytest.StashKey["TimerSession"]()


class TimerSession:
    """The pytest glue both timer plugins share, registered with pytest's plugin
    manager when a run dir is given: create the timer (its settings read through the
    knobs table), patch the timer sites once the benchmark classes are imported, write
    counts after every test (a killed run keeps them), print the footer, undo
    everything at the end."""

    def __init__(
        self,
        plugin: str,
        make_timer: Callable[[DirectSettings, "RowRecorder", RowContext], Any],
        targets,
        row_listeners: Optional[list] = None,
    ):
        self.plugin = plugin
        self.make_timer = make_timer
        self.targets = targets
        self.timer: Optional[Any] = None
        self.recorder: Optional[RowRecorder] = None
        self.info: Dict[str, Any] = {}
        self.patched: Patched = []
        self.busy = False
        self.row_context = RowContext(row_listeners)

    @classmethod
    def install(cls, config, plugin: str, make_timer, targets) -> None:
        """The plugin module's pytest_configure: a silent no-op without ZL_RUN_DIR."""
        if run_dir() is None:
            return
        try:
            settings = DirectSettings.from_env()
        except knobs.KnobError as e:
            raise pytest.UsageError(f"{plugin}: {e}") from None
        session = cls(plugin, make_timer, targets, config.stash.setdefault(ROW_LISTENERS, []))
        session.recorder = RowRecorder(
            benchenv.backend_name(), config.stash.setdefault(ROW_RECORD_FIELDS, [])
        )
        session.timer = make_timer(settings, session.recorder, session.row_context)
        session.info["requested_timer"] = benchenv.requested_timer()
        threads = pin_host_threads()
        if threads is not None:
            session.info["host_threads"] = threads
        kept = keep_host_memory()
        if kept is not None:
            session.info["keep_freed_memory"] = kept
        config.stash[TIMER_SESSION] = session
        config.stash[ROW_CONTEXT] = session.row_context
        config.pluginmanager.register(session, f"zlbench-{plugin}")

    @contextmanager
    def timing_in_progress(self) -> Iterator[None]:
        """While a timer runs, nested do_bench calls (autotuners) go to the original."""
        saved, self.busy = self.busy, True
        try:
            yield
        finally:
            self.busy = saved

    def should_intercept(self) -> bool:
        return not self.busy and self.row_context.current() is not None

    def report(self) -> dict:
        data = dict(self.timer.counts())
        data.update(self.info)
        data["device_state"] = self.recorder.report()
        data["latency_calls"] = self.row_context.stats["latency_calls"]
        data["latency_calls_untimed"] = self.row_context.stats["latency_calls_untimed"]
        return data

    # -- hooks (the session is a registered plugin)
    def pytest_collection_finish(self, session) -> None:
        if self.timer is None:
            return
        bases = self.row_context.install()
        self.info["benchmark_classes"] = [f"{b.__module__}.{b.__qualname__}" for b in bases]
        self.info["patched"] = patch_do_bench(self.targets, make_replacement(self), self.patched)

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
        unpatch_all(self.patched)
        self.row_context.uninstall()
        self.recorder.close()
        self.timer = None


def pytest_configure(config) -> None:
    TimerSession.install(config, PLUGIN, DirectTimer, DIRECT_TARGETS)

"""pytest plugin: time each row by CUDA-graph capture and replay, per-shape fallback.

Loaded with ``-p zlbench.plugins.graph_timer`` on backends that can capture. It replaces
``triton.testing.do_bench`` (and ``zlbench.cpu_timer.do_bench``) for the rows FlagGems
times in kernel mode. For one timing call:

1. warmup: run ``fn`` eagerly on a side stream for at least ``warmup`` ms and until
   per-call time stops drifting, so JIT and autotuning finish outside the graph;
2. capture: a probe graph sizes the real one (``timing.plan_graph``), both captured
   under a throwaway RNG state so an aborted capture cannot leave the default CUDA
   generator in capturing state;
3. replay: time each replay with CUDA events; reduce like triton (median by default);
4. placements: capture and replay again with the inputs moved to fresh copies, up to
   ZL_GRAPH_PLACEMENTS times (``zlbench.plugins.placement``), the replays pooled.

If any phase fails with an error that leaves the context alive (host synchronisation,
RNG seeding, capture-illegal stream work), the capture is ended, the context checked,
and that shape alone is timed by the direct timer (ZL_DIRECT_TIMER), with a
``BENCHMARK_DIRECT_NO_CUDAGRAPH`` marker naming op, dtype, shape and side. A fatal
error (illegal address, device-side assert, ...) is re-raised.
"""

from __future__ import annotations

import gc
import statistics
import time
import warnings
from contextlib import contextmanager
from typing import Any, Callable, Dict, List, Optional

import pytest

from zlbench import knobs
from zlbench.plugins import print_line
from zlbench.plugins.direct_timer import DirectSettings, DirectTimer, RowRecorder, TimerSession, call_options
from zlbench.plugins.placement import Placements, replays_per_placement
from zlbench.plugins.row_context import RowContext
from zlbench.timing import (
    MIN_REPLAYS,
    Measured,
    clear_grads,
    fallback_decision,
    fallback_marker,
    measured_from,
    plan_graph,
    warmup_batch_size,
    warmup_settled,
)

PLUGIN = "graph_timer"
GRAPH_TARGETS = (("triton.testing", "do_bench"), ("zlbench.cpu_timer", "do_bench"))
WARMUP_CAP_MS = 500.0  # stop waiting for stable eager times after this
PROBE_TARGET_MS = 1.0  # the probe graph should last about this long


class CaptureFailed(Exception):
    """A phase of graph timing failed; ``error`` is what was raised."""

    def __init__(self, phase: str, error: BaseException):
        super().__init__(f"{phase}: {error}")
        self.phase = phase
        self.error = error


class ContextNotClean(RuntimeError):
    """After a failed capture the stream was still capturing: do not go on."""


# --- torch glue ------------------------------------------------------------------------


@contextmanager
def throwaway_rng(torch):
    """Point the default CUDA generator at a copy of its state for the duration.

    Whatever a capture does to generator state (or leaves behind when it aborts)
    happens to the copy; the real state is put back unchanged.
    """
    gen = torch.cuda.default_generators[torch.cuda.current_device()]
    if hasattr(gen, "graphsafe_set_state"):
        saved = gen.graphsafe_get_state()
        gen.graphsafe_set_state(gen.clone_state())
        try:
            yield
        finally:
            gen.graphsafe_set_state(saved)
    else:  # older torch: restore the bytes of the state
        saved = torch.cuda.get_rng_state()
        try:
            yield
        finally:
            torch.cuda.set_rng_state(saved)


# One side stream per device for the whole run. The caching allocator keeps freed
# blocks per stream: a fresh stream per timing call (torch hands out 32 in turn) would
# strand a copy of every large buffer in each (seen: OOM on rows of 2**30 elements).
_streams: Dict[int, Any] = {}


def side_stream(torch):
    device = torch.cuda.current_device()
    if device not in _streams:
        _streams[device] = torch.cuda.Stream()
    return _streams[device]


def free_cached_memory(torch, collect: bool = False) -> None:
    """What torch.cuda.graph does before each capture: give the graph's private pool
    (and, after running out of memory, the direct timer) the memory caches hold."""
    if collect:  # buffers kept alive only by reference cycles
        gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


def ensure_not_capturing(torch, stream) -> None:
    torch.cuda.synchronize()
    for s in (stream, torch.cuda.current_stream()):
        with torch.cuda.stream(s):
            if torch.cuda.is_current_stream_capturing():
                raise ContextNotClean("a CUDA stream is still capturing after a failed capture")


def capture(torch, fn: Callable, calls: int, stream, grad_to_none):
    """Capture ``calls`` calls of fn into a new CUDAGraph; the capture always ends."""
    free_cached_memory(torch)
    graph = torch.cuda.CUDAGraph()
    error: Optional[BaseException] = None
    with throwaway_rng(torch), torch.cuda.stream(stream):
        graph.capture_begin()
        try:
            for _ in range(calls):
                clear_grads(grad_to_none)
                fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised below after cleanup
            error = exc
        finally:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                try:
                    graph.capture_end()
                except BaseException as exc:  # noqa: BLE001
                    error = error or exc
    if error is None:
        empty = [w for w in caught if "graph is empty" in str(w.message).lower()]
        if empty:
            error = RuntimeError(f"The CUDA Graph is empty: {empty[0].message}")
    if error is not None:
        del graph  # its reset() drops any generator state registered for this capture
        ensure_not_capturing(torch, stream)
        try:
            raise error
        finally:
            error = None  # no frame <-> traceback cycle keeping buffers alive
    return graph


def time_replays(torch, graph, replays: int, stream) -> List[float]:
    with torch.cuda.stream(stream):
        graph.replay()  # the first replay uploads the graph
        stream.synchronize()
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(replays)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(replays)]
        for start, end in zip(starts, ends):
            start.record()
            graph.replay()
            end.record()
        stream.synchronize()
    return [s.elapsed_time(e) for s, e in zip(starts, ends)]


def warmup(torch, fn: Callable, warmup_ms: float, stream, grad_to_none) -> float:
    """Eager calls until the budget is spent and per-call time is stable; returns ms."""
    with torch.cuda.stream(stream):
        clear_grads(grad_to_none)
        fn()  # JIT compilation and autotuning happen here
        stream.synchronize()
        begin = time.perf_counter()
        batches: List[float] = []
        calls = 1
        while True:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(calls):
                clear_grads(grad_to_none)
                fn()
            end.record()
            end.synchronize()
            batches.append(start.elapsed_time(end) / calls)
            calls = warmup_batch_size(batches[-1])
            elapsed = (time.perf_counter() - begin) * 1e3
            if warmup_settled(batches, elapsed, warmup_ms) or elapsed > max(WARMUP_CAP_MS, 4 * warmup_ms):
                return statistics.median(batches[-3:])


def graph_bench(
    fn: Callable,
    warmup_ms: float,
    rep_ms: float,
    grad_to_none,
    quantiles,
    return_mode: str,
    on_warm: Optional[Callable[[], None]] = None,
    places: int = 1,
    on_placed: Optional[Callable[[int, Optional[str]], None]] = None,
) -> Measured:
    """Time fn by graph replay over up to ``places`` placements of its inputs
    (``zlbench.plugins.placement``); raises CaptureFailed(phase, error) on any failure."""
    import torch

    if not torch.cuda.is_available():
        raise CaptureFailed("capture", RuntimeError("CUDA is not available in this process"))
    stream = side_stream(torch)
    stream.wait_stream(torch.cuda.current_stream())
    phase = "warmup"
    graph = None
    placements = Placements.plan(torch, fn, places)
    timed_placements = 0
    try:
        eager_ms = warmup(torch, fn, warmup_ms, stream, grad_to_none)
        if on_warm is not None:
            on_warm()
        phase = "capture"
        probe_calls = max(1, min(100, round(PROBE_TARGET_MS / max(eager_ms, 1e-6))))
        graph = capture(torch, fn, probe_calls, stream, grad_to_none)
        phase = "replay"
        per_call = statistics.median(time_replays(torch, graph, 3, stream)) / probe_calls
        plan = plan_graph(per_call, rep_ms)
        if plan.calls_per_graph != probe_calls:
            graph = None  # free the probe's buffers before the real capture
            phase = "capture"
            graph = capture(torch, fn, plan.calls_per_graph, stream, grad_to_none)
            phase = "replay"
        # Each placement gets at least MIN_REPLAYS: no more placements than the budget holds.
        placements.limit(max(1, plan.replays // MIN_REPLAYS), "the replay budget")
        per_placement = replays_per_placement(plan.replays, placements.count, MIN_REPLAYS)
        times = [t / plan.calls_per_graph for t in time_replays(torch, graph, per_placement, stream)]
        timed_placements = 1
        graph = None  # placement 0 (where the inputs are) is timed
        for index in range(1, placements.count):
            try:
                phase = "capture"
                times += replay_elsewhere(
                    torch, fn, placements, index, plan.calls_per_graph, per_placement, stream, grad_to_none
                )
            except ContextNotClean:
                raise
            except Exception as exc:  # noqa: BLE001 - an extra placement failing costs only itself
                torch.cuda.synchronize()  # a dead context raises here, handled below
                placements.restore()
                placements.fewer(f"placement {index + 1} failed: {type(exc).__name__}")
                if isinstance(exc, torch.cuda.OutOfMemoryError):
                    free_cached_memory(torch, collect=True)
                break
            timed_placements = index + 1
    except ContextNotClean:
        raise
    except BaseException as exc:  # noqa: BLE001 - classified by the caller
        graph = None
        try:
            torch.cuda.synchronize()
        except BaseException as sync_exc:  # the context died: report that, not the capture
            raise CaptureFailed(phase, sync_exc) from exc
        placements.restore()  # the copies go before the cache is emptied
        if isinstance(exc, torch.cuda.OutOfMemoryError):
            free_cached_memory(torch, collect=True)
        raise CaptureFailed(phase, exc) from exc
    finally:
        graph = None
        placements.restore()
        try:
            torch.cuda.current_stream().wait_stream(stream)
        except Exception:  # a dead context was reported above
            pass
    if on_placed is not None:
        on_placed(timed_placements, placements.why_fewer)
    # Each replay is one sample of the per-call time, pooled over the placements: the
    # row's spread includes how much the inputs' addresses move it.
    return measured_from(times, quantiles, return_mode, "graph")._replace(placements=timed_placements)


def replay_elsewhere(
    torch, fn: Callable, placements: Placements, index: int, calls: int, replays: int, stream, grad_to_none
) -> List[float]:
    """Per-call times of ``replays`` replays with the inputs at placement ``index``."""
    placements.move(index)
    stream.wait_stream(torch.cuda.current_stream())  # the copies are made there
    graph = capture(torch, fn, calls, stream, grad_to_none)
    # time_replays synchronises the stream: the copies outlive every replay that reads them.
    return [t / calls for t in time_replays(torch, graph, replays, stream)]


# --- the plugin ------------------------------------------------------------------------


class GraphTimer:
    def __init__(self, settings: DirectSettings, recorder: RowRecorder, row_context: RowContext):
        self.row_context = row_context
        self.direct = DirectTimer(settings, recorder, row_context)
        try:
            self.places = knobs.env_value("graph_placements")
        except knobs.KnobError as e:
            raise pytest.UsageError(f"{PLUGIN}: {e}") from None
        self.placement_counts: Dict[int, int] = {}  # timings per placements pooled
        self.fewer_placements: Dict[str, int] = {}  # timings per reason for fewer than asked
        self.recorder = recorder
        self.row_modes: Dict[int, set] = {}
        self.timings_graph = 0
        self.timings_fallback = 0
        self.fallbacks: List[dict] = []

    def measure(self, original: Callable, fn: Callable, args: tuple, kwargs: dict) -> Any:
        timing = self.row_context.current()
        opts = call_options(original, fn, args, kwargs)
        self.recorder.start()
        try:
            measured = graph_bench(
                fn,
                float(opts.get("warmup", 25) or 25),
                float(opts.get("rep", 100) or 100),
                opts.get("grad_to_none"),
                opts.get("quantiles"),
                opts.get("return_mode", "mean"),
                self.recorder.warm,
                self.places,
                self.note_placements,
            )
        except CaptureFailed as failed:
            decision = fallback_decision(failed.phase, failed.error)
            if not decision.fallback:
                raise failed.error
            print_line(
                fallback_marker(
                    failed.phase, self.direct.repeat, timing.row, decision.reason, self.direct.settings.mode
                )
            )
            self.fallbacks.append(
                dict(
                    timing.row._asdict(),
                    phase=failed.phase,
                    direct=self.direct.settings.mode,
                    repeat=self.direct.repeat,
                    reason=decision.reason,
                )
            )
            self.timings_fallback += 1
            self.row_modes.setdefault(timing.row_id, set()).add("direct")
            return self.direct.measure(original, fn, args, kwargs)
        self.timings_graph += 1
        self.row_modes.setdefault(timing.row_id, set()).add("graph")
        self.recorder.finish(timing.row, measured, "graph")
        return measured.value

    def note_placements(self, count: int, why_fewer: Optional[str]) -> None:
        self.placement_counts[count] = self.placement_counts.get(count, 0) + 1
        if count < self.places and why_fewer:
            if why_fewer not in self.fewer_placements:  # run.log says each reason once
                print_line(
                    f"zlbench graph timer: timed over fewer input placements than "
                    f"ZL_GRAPH_PLACEMENTS={self.places}: {why_fewer} (counts in plugins/{PLUGIN}.json)"
                )
            self.fewer_placements[why_fewer] = self.fewer_placements.get(why_fewer, 0) + 1

    def counts(self) -> dict:
        rows_fallback = sum(1 for m in self.row_modes.values() if "direct" in m)
        return {
            "timer": "graph",
            "direct": self.direct.settings.mode,
            "repeat": self.direct.repeat,
            "rows_graph": len(self.row_modes) - rows_fallback,
            "rows_direct_fallback": rows_fallback,
            "timings_graph": self.timings_graph,
            "timings_direct_fallback": self.timings_fallback,
            "direct_stops": dict(self.direct.stops),
            "fallbacks": self.fallbacks,
            "placements_wanted": self.places,
            "timings_per_placements": {str(k): v for k, v in sorted(self.placement_counts.items())},
            "timings_fewer_placements": sum(self.fewer_placements.values()),
            "fewer_placements": dict(self.fewer_placements),
        }


def pytest_configure(config) -> None:
    TimerSession.install(config, PLUGIN, GraphTimer, GRAPH_TARGETS)

"""pytest plugin: time each row by CUDA-graph capture and replay, per-shape fallback.

Loaded with ``-p zlbench.plugins.graph_timer`` on backends that can capture. It replaces
``triton.testing.do_bench`` (and ``zlbench.cpu_timer.do_bench``) for the rows FlagGems
times in kernel mode. For one timing call:

1. warmup: run ``fn`` eagerly on a side stream until per-call time stops drifting and
   the device is at its working clock (ZL_WARMUP_RULE, ``timing.WarmupRule``; the
   caller's ``warmup`` is the cap), so JIT and autotuning finish outside the graph;
2. capture: a probe graph sizes the real one (``timing.plan_graph`` from the fastest of
   its replays, ``timing.probe_per_call``), both captured
   under a throwaway RNG state so an aborted capture cannot leave the default CUDA
   generator in capturing state; where the plan keeps the probe's calls
   (``timing.probe_fits``), the probe is the real graph;
3. replay: time each replay with CUDA events; reduce like triton (median by default);
4. placements: capture and replay again with the inputs moved to fresh copies, up to
   ZL_GRAPH_PLACEMENTS times (``zlbench.plugins.placement``; small inputs in
   INTERLEAVED_GRAPHS graphs of segments at each placement instead); a first round of a
   few replays each, later ones only while the pooled median is not yet pinned to
   ZL_GRAPH_NOISE and more replays can pin it (``timing.ReplayRule``); the row's median
   is the trimmed mean of its graphs' own medians (``timing.over_placements``), its
   spread its graphs' where they are further apart than its replays;
5. power cap: where the device, read while the warm-up's and replays' work ran, was held
   down by its power cap, the samples are replaced by a cap window: one placement's
   graph replayed for ``timing.CAP_WINDOW_MS`` (the cap's own period), stop
   "power_cap", and a ``POWER_CAP_WINDOW`` marker instead of ``DEVICE_THROTTLED``; the
   replays end where the cap is first seen (no further placement or round).

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
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import pytest

from zlbench import knobs
from zlbench.plugins import print_line
from zlbench.plugins.direct_timer import DirectSettings, DirectTimer, RowRecorder, TimerSession, call_options
from zlbench.plugins.graph_tiles import MAX_TILE, Tiles, TileSizes, Tiling, default_tile_dir
from zlbench.plugins.placement import Placements
from zlbench.plugins.row_context import RowContext
from zlbench.timing import (
    CAP_CHUNK_MS,
    DEFAULT_NOISE_TARGET,
    MAX_REPLAYS,
    MIN_REPLAYS,
    PROBE_REPLAYS,
    TARGET_REPLAY_MS,
    CapWatch,
    Cost,
    Measured,
    ReplayRule,
    WarmupRule,
    cap_window_done,
    cap_window_spread,
    clear_grads,
    fallback_decision,
    fallback_marker,
    is_fatal_error,
    measured_from,
    placement_failure,
    placement_spread,
    placements_dominate,
    plan_graph,
    plan_with_calls,
    probe_fits,
    probe_per_call,
    replays_per_placement,
    tiled_plan,
    warmup_batch_size,
)

PLUGIN = "graph_timer"
GRAPH_TARGETS = (("triton.testing", "do_bench"), ("zlbench.cpu_timer", "do_bench"))
PROBE_TARGET_MS = 1.0  # the probe graph should last about this long
LOW_MEMORY_SHARE = 0.25  # empty the allocator's cache before a capture below this much free
L2_SHARE = 0.5  # interleave placements when all their copies fit in this much L2
MIN_SEGMENT = 8  # ... and each placement's segment of a graph holds this many calls
# Interleaved placements are timed over this many graphs, each taking its own share of
# them. A replay of one graph averages its placements, so replay to replay it cannot show
# how far new copies and a new graph move the row: on an H200 every unexplained verdict
# of an A/A was such a row (tiny kernels 1.1-5.2% apart at spreads of 0.01-0.04%). Two
# graphs' medians give the row the spread of a second capture of the same calls
# (``timing.placement_spread``): benchmarks/capture_spread.py, FlagGems' cumsum int32
# 256x256 on an H200, timings moved by a standard deviation of 0.12% within a process
# and 0.02% between four, at spreads of 0.70%.
INTERLEAVED_GRAPHS = 2


class CaptureFailed(Exception):
    """A phase of graph timing failed; ``error`` is what was raised. ``warm_ms``: the
    warm-up had settled, a call then costing that much wall time (the direct timer
    taking the row over need not warm it up again), else None."""

    def __init__(self, phase: str, error: BaseException, warm_ms: Optional[float] = None):
        super().__init__(f"{phase}: {error}")
        self.phase = phase
        self.error = error
        self.warm_ms = warm_ms


class PlacementFailed(Exception):
    """Timing at a moved placement (``index``) failed with ``error``."""

    def __init__(self, index: int, error: BaseException):
        super().__init__(f"placement {index + 1}: {error}")
        self.index = index
        self.error = error


class ContextNotClean(RuntimeError):
    """After a failed capture the stream was still capturing: do not go on."""


class EmptyGraph(RuntimeError):
    """The capture recorded no device work: the calls launched nothing on the stream."""


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


def free_cached_memory(torch, collect: bool = False, when_short: bool = False) -> None:
    """What torch.cuda.graph does before each capture: give the graph's private pool
    (and, after running out of memory, the direct timer) the memory caches hold.

    ``when_short``: only when less than LOW_MEMORY_SHARE of the device is free. Emptying
    the cache before every capture made every later allocation a new cudaMalloc (several
    per placement), which cost more than the capture itself.
    """
    if collect:  # buffers kept alive only by reference cycles
        gc.collect()
    torch.cuda.synchronize()
    if when_short:
        try:
            free, total = torch.cuda.mem_get_info()
            if free >= LOW_MEMORY_SHARE * total:
                return
        except Exception:  # noqa: BLE001 - no query: empty it, as torch.cuda.graph does
            pass
    torch.cuda.empty_cache()


def device_name(torch) -> str:
    """The current device's name (``NVIDIA H100 80GB HBM3``): kept tiles are per device."""
    try:
        return str(torch.cuda.get_device_name(torch.cuda.current_device()))
    except Exception:  # noqa: BLE001 - unnamed: one shelf for all
        return "unknown-device"


def l2_bytes(torch) -> Optional[int]:
    try:
        return int(torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size) or None
    except Exception:  # noqa: BLE001 - unknown: never interleave
        return None


def interleave(placements: Placements, calls_per_graph: int, l2: Optional[int]) -> bool:
    """Time the placements in INTERLEAVED_GRAPHS graphs (segments of consecutive calls at
    each placement a graph takes: ``interleaved_sets``) where that measures what separate
    graphs would: every copy stays in L2 (so no segment starts
    colder than a graph of its own would), and each segment is long enough that the
    switch is a small part of it. Then INTERLEAVED_GRAPHS captures replace one per
    placement: for a kernel of a microsecond, 650 launches through a library's Python
    wrapper each."""
    if placements.count < 2 or not l2:
        return False
    fits = placements.count * placements.nbytes <= L2_SHARE * l2
    return fits and calls_per_graph >= MIN_SEGMENT * placements.count


def ensure_not_capturing(torch, stream) -> None:
    torch.cuda.synchronize()
    for s in (stream, torch.cuda.current_stream()):
        with torch.cuda.stream(s):
            if torch.cuda.is_current_stream_capturing():
                raise ContextNotClean("a CUDA stream is still capturing after a failed capture")


def capture(
    torch, fn: Callable, calls: int, stream, grad_to_none, before_call=None, tiles: Optional[Tiles] = None
):
    """A graph of ``calls`` calls of fn: where ``tiles`` makes them a whole number of
    tiles, one tile captured and chained (``graph_tiles``), else every call captured.
    ``before_call(i, n)`` runs on the host before call i of the n captured (an
    interleaved placement's move: a tile holds every placement's segment)."""
    copies = tiles.copies(calls) if tiles is not None else 0
    if copies:
        tile = capture_calls(
            torch, fn, tiles.tile, stream, grad_to_none, before_call, tiles.tiling.new_tile()
        )
        try:
            return tiles.tiling.chain(tile, copies)
        except Exception as exc:  # noqa: BLE001 - the driver refused: capture every call from now on
            tiles.tiling.off(f"{type(exc).__name__}: {exc}")
        del tile
    graph = tiles.tiling.new_tile() if tiles is not None and tiles.tiling.on else torch.cuda.CUDAGraph()
    return capture_calls(torch, fn, calls, stream, grad_to_none, before_call, graph)


def capture_calls(torch, fn: Callable, calls: int, stream, grad_to_none, before_call, graph):
    """Capture ``calls`` calls of fn into ``graph`` (a new CUDAGraph); the capture always ends."""
    free_cached_memory(torch, when_short=True)
    error: Optional[BaseException] = None
    with throwaway_rng(torch), torch.cuda.stream(stream):
        graph.capture_begin()
        try:
            for i in range(calls):
                if before_call is not None:
                    before_call(i, calls)
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
            error = EmptyGraph(f"The CUDA Graph is empty: {empty[0].message}")
    if error is not None:
        del graph  # its reset() drops any generator state registered for this capture
        ensure_not_capturing(torch, stream)
        try:
            raise error
        finally:
            error = None  # no frame <-> traceback cycle keeping buffers alive
    return graph


def call_once(torch, fn: Callable, stream, grad_to_none) -> None:
    """One eager call of fn on ``stream``, finished."""
    with torch.cuda.stream(stream):
        clear_grads(grad_to_none)
        fn()
    stream.synchronize()


def call_first(torch, exc: BaseException) -> bool:
    """Is ``exc``, raised by a capture at moved inputs, worth one eager call there and a
    second capture? A library may cache what it learnt of an input by its address
    (FlagGems' segment_reduce checks its lengths on the host once per ``data_ptr``), so
    the first call at a new address does host work that a capture forbids; on an H200
    that cost segment_reduce and segment_reduce_backward_out their moved placements in
    125 of 300 timings. Not for a dead context, memory, or a graph without device work."""
    return (
        isinstance(exc, Exception)
        and not is_fatal_error(exc)
        and not isinstance(exc, (torch.cuda.OutOfMemoryError, EmptyGraph, ContextNotClean))
    )


def capture_moved(
    torch,
    fn: Callable,
    calls: int,
    stream,
    grad_to_none,
    cost: Optional[Cost] = None,
    tiles: Optional[Tiles] = None,
):
    """``capture`` at inputs moved to another placement; where it fails as ``call_first``
    says, fn is called once there, eagerly, and captured again (``cost_ms.called_first``
    counts such placements); a second failure is raised."""
    try:
        return capture(torch, fn, calls, stream, grad_to_none, tiles=tiles)
    except Exception as exc:  # noqa: BLE001 - re-raised unless worth the eager call
        if not call_first(torch, exc):
            raise
    call_once(torch, fn, stream, grad_to_none)
    if cost is not None:
        cost.notes["called_first"] = cost.notes.get("called_first", 0) + 1
    return capture(torch, fn, calls, stream, grad_to_none, tiles=tiles)


# The power-cap watch of the timing under way (``timing.CapWatch``): every replay path
# goes through time_replays, and the warm-up's batches through warmup, which read the
# device once their work is queued, while it runs. Set and cleared by graph_bench alone.
_watch: Optional[CapWatch] = None


def _look() -> None:
    if _watch is not None:
        _watch.look()


def _cap_seen() -> bool:
    """Has the timing's watch seen the power cap? Its replays are then set aside for a
    cap window (``cap_window``): no more placements or rounds are worth timing."""
    return _watch is not None and _watch.seen


def queue_replays(torch, graph, replays: int) -> Callable[[], List[float]]:
    """Queue ``replays`` replays of ``graph``, each between two events, on the current
    stream; returns what waits for them and gives their times (ms)."""
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(replays)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(replays)]
    for start, end in zip(starts, ends):
        start.record()
        graph.replay()
        end.record()

    def times() -> List[float]:
        ends[-1].synchronize()
        return [s.elapsed_time(e) for s, e in zip(starts, ends)]

    return times


def time_replays(torch, graph, replays: int, stream) -> List[float]:
    """``replays`` timed replays of ``graph`` (ms each), queued behind one untimed replay
    that uploads it. The timed ones follow it on the stream with no wait on the host in
    between: a replay queued on an idle device times its own launch too (the host walks
    the graph's nodes after its start event ran). On an H200 the first of three replays
    after a host wait read 0.26-1.37% over the other two (``benchmarks/first_replay.py``),
    which took 377 of a sample pass's 998 graph timings into later rounds."""
    with torch.cuda.stream(stream):
        graph.replay()  # uploads the graph; untimed, and the device is busy while the timed ones queue
        times = queue_replays(torch, graph, replays)
        _look()
        return times()


def cap_window(torch, graph, calls: int, stream, watch: CapWatch, cost: Cost) -> List[float]:
    """The timing again at the power cap: ``graph`` (``calls`` calls at the inputs' own
    placement) replayed in chunks of about CAP_CHUNK_MS until CAP_WINDOW_MS of device
    time (the cap's own period: ``timing.CAP_WINDOW_MS``); returns its per-call times,
    which replace the timing's samples."""
    watch.in_window = True
    window: List[float] = []
    chunk = 1
    with torch.cuda.stream(stream):
        graph.replay()  # the upload, once: the chunks follow one another at the cap
        while not cap_window_done(window):
            times = queue_replays(torch, graph, chunk)
            watch.look()
            got = times()
            window += got
            chunk = max(1, min(MAX_REPLAYS, round(CAP_CHUNK_MS / max(statistics.median(got), 1e-3))))
    cost.lap("cap window")
    cost.notes["power_cap"] = watch.notes(sum(window), len(window))
    return [t / calls for t in window]


def warmup(
    torch, fn: Callable, rule: WarmupRule, stream, grad_to_none, device_ready=None
) -> Tuple[float, str, int, float]:
    """Eager calls until ``rule`` says warm-up has done its job (``timing.WarmupRule``);
    returns (per-call ms of the last batches on the stream, why it ended, batches, their
    wall ms per call: what a call costs host and device together)."""
    with torch.cuda.stream(stream):
        clear_grads(grad_to_none)
        fn()  # JIT compilation and autotuning happen here
        stream.synchronize()
        begin = time.perf_counter()
        batches: List[float] = []
        walls: List[float] = []
        calls = 1
        while True:
            batch_begin = time.perf_counter()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(calls):
                clear_grads(grad_to_none)
                fn()
            end.record()
            _look()
            end.synchronize()
            batches.append(start.elapsed_time(end) / calls)
            walls.append((time.perf_counter() - batch_begin) * 1e3 / calls)
            calls = warmup_batch_size(batches[-1])
            stop = rule.verdict(batches, (time.perf_counter() - begin) * 1e3, device_ready)
            if stop is not None:
                return statistics.median(batches[-3:]), stop, len(batches), statistics.median(walls[-3:])


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
    warmup_rule: str = "settle",
    noise: float = DEFAULT_NOISE_TARGET,
    device_ready: Optional[Callable[[], Optional[bool]]] = None,
    replay_ms: float = TARGET_REPLAY_MS,
    cap_watch: Optional[Callable[[], Optional[CapWatch]]] = None,
    tiling: Optional[Tiling] = None,
    tile_size: Optional[Callable[[int], Tuple[int, bool]]] = None,
    graph_calls: Optional[Callable[[int, int], Tuple[int, bool]]] = None,
) -> Measured:
    """Time fn by graph replay over up to ``places`` placements of its inputs
    (``zlbench.plugins.placement``): warm-up by ``warmup_rule`` (capped at ``warmup_ms``
    under "settle"), then replays by ``timing.ReplayRule(noise)`` within ``rep_ms``;
    where ``cap_watch()`` gives a watch and it saw the power cap while the work ran, the
    samples are those of a cap window instead (``cap_window``, stop "power_cap");
    where ``tiling`` is on, graphs of many calls are chained copies of a tile of the
    probe's calls (``graph_tiles``), or of the tile ``tile_size(probe's calls)`` gives
    (``TileSizes.tile``: the row's tile kept from an earlier timing), to the calls
    ``graph_calls(plan's calls, tile)`` gives (``TileSizes.calls``: the row's graph
    length kept likewise, in whole tiles of its own; an interleaved graph's longer tile,
    ``interleaved_tiles``, rounds it); raises CaptureFailed(phase, error) on any failure."""
    global _watch
    import torch

    if not torch.cuda.is_available():
        raise CaptureFailed("capture", RuntimeError("CUDA is not available in this process"))
    cost = Cost(("warmup", "capture", "replay", "move"))
    stream = side_stream(torch)
    stream.wait_stream(torch.cuda.current_stream())
    phase = "warmup"
    graph = None
    placements = Placements.plan(torch, fn, places)
    kept = KeptGraphs(torch)
    timed_placements = 0
    rule = ReplayRule(noise)
    watch = _watch = cap_watch() if cap_watch is not None else None
    warm_ms: Optional[float] = None  # a call's wall time in the warm-up, once it settled
    try:
        eager_ms, warm_stop, batches, wall_ms = warmup(
            torch, fn, WarmupRule(warmup_rule, warmup_ms), stream, grad_to_none, device_ready
        )
        warm_ms = wall_ms if warm_stop == "settled" else None
        cost.notes.update(warmup_stop=warm_stop, warmup_batches=batches, rep_ms=rep_ms)
        if on_warm is not None:
            on_warm()
        cost.lap("warmup")
        phase = "capture"
        probe_calls = max(1, min(MAX_TILE, round(PROBE_TARGET_MS / max(eager_ms, 1e-6))))
        tiles = None
        if tiling is not None and tiling.on:
            if tile_size is not None:
                probe_calls, kept_tile = tile_size(probe_calls)
                cost.notes["tile_kept"] = kept_tile
            tiles = Tiles(tiling, probe_calls)
        graph = capture(torch, fn, probe_calls, stream, grad_to_none, tiles=tiles)
        cost.lap("capture")
        phase = "replay"
        per_call = probe_per_call(time_replays(torch, graph, PROBE_REPLAYS, stream), probe_calls)
        cost.lap("replay")
        plan = plan_graph(per_call, rep_ms, replay_ms)
        if tiles is not None:
            plan = tiled_plan(plan, per_call, rep_ms, probe_calls)
            if graph_calls is not None:
                # The row's length, kept in whole tiles of its own: what decides below
                # whether its placements are interleaved, and what an interleaved graph
                # rounds to its longer tile, so that both come out alike in every run.
                calls, kept_calls = graph_calls(plan.calls_per_graph, probe_calls)
                if kept_calls:
                    plan = plan_with_calls(calls, per_call, rep_ms)
                cost.notes["calls_kept"] = kept_calls
        # A cap already seen (the warm-up ran at it) sends the timing straight to the
        # window: the replays would be set aside.
        at_cap = watch is not None and watch.seen
        interleaved = not at_cap and interleave(placements, plan.calls_per_graph, l2_bytes(torch))
        if tiles is not None and interleaved:
            tiles = interleaved_tiles(tiles, placements.count)
            plan = tiled_plan(plan, per_call, rep_ms, tiles.tile)
        if tiles is not None and tiles.copies(plan.calls_per_graph):
            cost.notes["tile_calls"] = tiles.tile
        times: List[float] = []
        placement_medians: List[float] = []  # each graph's, where there are two or more
        placements_held = False  # ... whose placements kept the row from being pinned
        rounds, spent = 0, False
        if at_cap:
            graph = None
        elif interleaved:
            graph = None  # the probe's buffers go before the real capture
            phase = "capture"
            try:
                times, timed_placements, rounds, spent, graph_groups = replay_interleaved(
                    torch, fn, placements, plan, rule, stream, grad_to_none, cost, tiles
                )
                if len(graph_groups) > 1:
                    # Each interleaved graph's own median: how far new copies of the
                    # inputs and a new graph move the row.
                    placement_medians, placements_held = note_graphs(cost, "graph_ms", graph_groups, rule)
            except PlacementFailed as failed:
                # As with separate graphs, a moved placement failing costs only itself:
                # the row is timed where its inputs are.
                torch.cuda.synchronize()  # a dead context raises here, handled below
                placements.restore()
                placements.limit(1, placement_failure(failed.index, failed.error))
                if isinstance(failed.error, torch.cuda.OutOfMemoryError):
                    free_cached_memory(torch, collect=True)
                interleaved = False
        if not interleaved and not at_cap:
            copies = tiles.copies(plan.calls_per_graph) if tiles is not None and graph is not None else 0
            chained = None
            if copies:
                try:
                    chained = tiles.tiling.chain(graph, copies)  # the probe is the real graph's tile
                except Exception as exc:  # noqa: BLE001 - the driver refused: capture every call from now on
                    tiles.tiling.off(f"{type(exc).__name__}: {exc}")
            if chained is not None:
                graph = chained
                cost.notes["probe_graph"] = True
            elif graph is not None and probe_fits(probe_calls, plan.calls_per_graph):
                plan = plan._replace(calls_per_graph=probe_calls)  # the probe is the real graph
                cost.notes["probe_graph"] = True
            else:
                graph = None  # free the probe's buffers before the real capture
                phase = "capture"
                graph = capture(torch, fn, plan.calls_per_graph, stream, grad_to_none, tiles=tiles)
                cost.lap("capture")
            phase = "replay"
            # Each placement gets at least MIN_REPLAYS of the budget: no more placements than it holds.
            placements.limit(max(1, plan.replays // MIN_REPLAYS), "the replay budget")
            per_placement = rule.first_round(plan.replays, placements.count)
            if per_placement >= replays_per_placement(plan.replays, placements.count, MIN_REPLAYS):
                kept.stop()  # the first round is the whole budget: no later round to keep them for
            kept.expect(placements.count)
            times = [t / plan.calls_per_graph for t in time_replays(torch, graph, per_placement, stream)]
            groups: Dict[int, List[float]] = {0: list(times)}  # each placement's samples
            cost.lap("replay")
            kept.keep(0, graph)  # placement 0 (where the inputs are) is timed
            graph = None
            timed_placements = replay_round(
                torch,
                fn,
                placements,
                range(1, placements.count),
                plan.calls_per_graph,
                per_placement,
                stream,
                grad_to_none,
                times,
                cost,
                kept,
                groups,
                tiles,
            )
            count = timed_placements

            def again(more: int) -> Optional[List[float]]:
                if kept.holds(count):
                    got = {
                        i: [t / plan.calls_per_graph for t in kept.replay(i, more, stream)]
                        for i in range(count)
                    }
                    cost.lap("replay")
                else:
                    got = recapture_round(
                        torch,
                        fn,
                        placements,
                        count,
                        plan.calls_per_graph,
                        more,
                        stream,
                        grad_to_none,
                        cost,
                        tiles,
                    )
                if got is None:
                    return None
                for i, samples in got.items():
                    groups.setdefault(i, []).extend(samples)
                return [t for i in range(count) for t in got[i]]

            def by_placement() -> List[List[float]]:
                return [groups[i] for i in range(count)]

            rounds, spent = rule.later_rounds(
                plan.replays,
                count,
                per_placement,
                times,
                again,
                by_placement if count > 1 else None,
                _cap_seen,
            )
            cost.notes.update(interleaved=False, graphs_kept=kept.holds(count))
            if count > 1:
                # Each placement's own median: how far the inputs' addresses move the row.
                placement_medians, placements_held = note_graphs(cost, "placement_ms", by_placement(), rule)
        ordered = sorted(times)
        stop = "noise" if times and rule.target > 0 and rule.pinned(ordered) and not spent else "budget"
        if stop == "budget" and not spent and placements_held:
            stop = "placements"  # more replays at the same placements would not narrow it
        if watch is not None and watch.seen:
            # The record then describes the window; what it replaced is kept apart.
            set_aside = {"replays": len(times), "rounds": rounds, "placements": timed_placements}
            placement_medians = []  # the window is one placement's
            for key in (
                "interleaved",
                "graphs_kept",
                "rounds_ended",
                "placement_ms",
                "graph_ms",
                "placement_spread",
                "probe_graph",
            ):
                if key in cost.notes:
                    set_aside[key] = cost.notes.pop(key)
            kept.drop()
            placements.restore()  # the inputs' own placement; the copies go
            phase = "capture"
            graph = capture(torch, fn, plan.calls_per_graph, stream, grad_to_none, tiles=tiles)
            cost.lap("capture")
            phase = "replay"
            times = cap_window(torch, graph, plan.calls_per_graph, stream, watch, cost)
            graph = None
            cost.notes["power_cap"]["set_aside"] = set_aside
            timed_placements, stop, rounds = 1, "power_cap", 0
            placements.fewer("timed again at the power cap, at one placement (timing.CAP_WINDOW_MS)")
        cost.notes.update(
            calls_per_graph=plan.calls_per_graph, replays=len(times), rounds=rounds, replay_stop=stop
        )
        if tiles is not None and not tiles.tiling.on:
            # The driver refused a chain during this timing: its graphs from then on
            # captured every call.
            cost.notes.pop("tile_calls", None)
    except ContextNotClean:
        raise
    except BaseException as exc:  # noqa: BLE001 - classified by the caller
        graph = None
        kept.drop()
        try:
            torch.cuda.synchronize()
        except BaseException as sync_exc:  # the context died: report that, not the capture
            raise CaptureFailed(phase, sync_exc) from exc
        placements.restore()  # the copies go before the cache is emptied
        if isinstance(exc, torch.cuda.OutOfMemoryError):
            free_cached_memory(torch, collect=True)
        raise CaptureFailed(phase, exc, warm_ms) from exc
    finally:
        _watch = None
        graph = None
        kept.drop()
        placements.restore()
        try:
            torch.cuda.current_stream().wait_stream(stream)
        except Exception:  # a dead context was reported above
            pass
    if on_placed is not None:
        on_placed(timed_placements, placements.why_fewer)
    # Each replay is one sample of the per-call time; at two placements or more (or two
    # graphs) the row is their medians' trimmed mean (``timing.over_placements``) and its
    # spread its graphs' where they are further apart than its replays
    # (``timing.row_spread``): replays come in clusters, one per graph, which the pooled
    # CI does not see.
    measured = measured_from(times, quantiles, return_mode, cost.notes["replay_stop"], placement_medians)
    if "power_cap" in cost.notes:
        cost.notes["power_cap"]["replay_spread"] = measured.spread
        measured = measured._replace(spread=cap_window_spread(measured.spread))
    return measured._replace(placements=timed_placements, cost=cost.report())


def note_graphs(
    cost: Cost, key: str, groups: List[List[float]], rule: ReplayRule
) -> Tuple[List[float], bool]:
    """Each graph's median (ms, under ``key`` in the record) and their spread
    (``placement_spread``); returns (the medians, whether the graphs kept the row from
    being pinned: ``placements_dominate``)."""
    medians = [statistics.median(g) for g in groups]
    cost.notes[key] = [round(m, 7) for m in medians]
    cost.notes["placement_spread"] = placement_spread(medians)
    return medians, placements_dominate(groups, rule.target)


def interleaved_tiles(tiles: Tiles, count: int) -> Tiles:
    """The tile of an interleaved graph over ``count`` placements: the fewest of the row's
    tiles that hold a segment of MIN_SEGMENT calls at each placement a graph takes
    (``interleaved_sets``). A row's tile is the probe's calls, for a FlagGems kernel of a
    microsecond 4-20 (its wrapper's 80-250 us a call); a tile of the row's own would
    leave the interleaved graphs captured call by call, on an H100 sample 41 ms a row
    (370-800 calls, twice), more than half the graph captures of the pass."""
    per_graph = len(interleaved_sets(count)[0])
    need = MIN_SEGMENT * per_graph
    return tiles if tiles.tile < 1 else tiles._replace(tile=tiles.tile * -(-need // tiles.tile))


def interleaved_sets(count: int, graphs: int = INTERLEAVED_GRAPHS) -> List[List[int]]:
    """The placements each interleaved graph takes in turn: every ``graphs``-th one, the
    inputs' own (0) in the first graph; fewer graphs where there are fewer placements."""
    graphs = max(1, min(graphs, count))
    return [list(range(g, count, graphs)) for g in range(graphs)]


def replay_interleaved(
    torch,
    fn,
    placements: Placements,
    plan,
    rule: ReplayRule,
    stream,
    grad_to_none,
    cost,
    tiles: Optional[Tiles] = None,
):
    """The placements in INTERLEAVED_GRAPHS graphs (``interleaved_sets``), each of
    ``plan.calls_per_graph`` calls in equal segments, one per placement it takes; every
    replay of a graph is one sample over its placements. Returns (per-call times pooled,
    placements, rounds of replays, whether they spent the budget, each graph's per-call
    times)."""
    count = placements.count
    placements.prepare(count)  # the copies exist before the capture: it may only swap storage
    stream.wait_stream(torch.cuda.current_stream())
    cost.lap("move")
    calls = plan.calls_per_graph
    current = [0]
    if tiles is not None and tiles.tile < MIN_SEGMENT * len(interleaved_sets(count)[0]):
        tiles = None  # a tile too short for a segment at each placement: every call captured
        cost.notes.pop("tile_calls", None)

    def capture_set(indices: List[int]):
        current[0] = 0  # the inputs are at their own placement when a capture begins

        def before_call(i: int, n: int) -> None:
            index = indices[i * len(indices) // n]
            if index != current[0]:
                placements.move(index)
                current[0] = index

        try:
            return capture(torch, fn, calls, stream, grad_to_none, before_call, tiles)
        finally:
            placements.move(0)  # current[0] keeps where a failed capture was

    graphs = []
    for indices in interleaved_sets(count):
        try:
            try:
                graphs.append(capture_set(indices))
            except Exception as exc:  # noqa: BLE001 - at placement 0 it is the row's own failure
                if current[0] == 0 or not call_first(torch, exc):
                    raise
                # As with separate graphs (capture_moved): one eager call at each moved
                # placement of this graph, then its capture again.
                for index in indices:
                    if index:
                        placements.move(index)
                        call_once(torch, fn, stream, grad_to_none)
                placements.move(0)
                cost.notes["called_first"] = cost.notes.get("called_first", 0) + sum(1 for i in indices if i)
                graphs.append(capture_set(indices))
        except ContextNotClean:
            raise
        except Exception as exc:  # noqa: BLE001
            if current[0] == 0:
                raise
            raise PlacementFailed(current[0], exc) from exc
    cost.lap("capture")

    def replay(more: int) -> List[List[float]]:
        return [[t / calls for t in time_replays(torch, graph, more, stream)] for graph in graphs]

    first = rule.first_round(plan.replays, len(graphs))
    groups = replay(first)
    times = [t for group in groups for t in group]

    def again(more: int) -> List[float]:
        got = replay(more)
        for group, samples in zip(groups, got):
            group.extend(samples)
        return [t for samples in got for t in samples]

    rounds, spent = rule.later_rounds(
        plan.replays,
        len(graphs),
        first,
        times,
        again,
        (lambda: groups) if len(graphs) > 1 else None,
        _cap_seen,
    )
    cost.lap("replay")
    cost.notes["interleaved"] = True
    return times, count, rounds, spent, groups


def replay_round(
    torch,
    fn: Callable,
    placements: Placements,
    indices,
    calls: int,
    replays: int,
    stream,
    grad_to_none,
    times: List[float],
    cost: Cost,
    kept: Optional["KeptGraphs"] = None,
    groups: Optional[Dict[int, List[float]]] = None,
    tiles: Optional[Tiles] = None,
) -> int:
    """Replays at each placement of ``indices`` in turn, appended to ``times`` (and under
    the placement's index in ``groups``); returns the placements timed so far (1 + the
    last index that worked). A placement that fails ends the round and keeps what was
    timed (an extra placement costs only itself); so does the power cap seen
    (``_cap_seen``: the window replaces the samples). ``kept`` keeps each placement's
    graph for a later round."""
    timed = indices.start
    for index in indices:
        if _cap_seen():
            break
        try:
            got = replay_elsewhere(
                torch, fn, placements, index, calls, replays, stream, grad_to_none, cost, kept, tiles
            )
            times += got
            if groups is not None:
                groups[index] = got
        except ContextNotClean:
            raise
        except Exception as exc:  # noqa: BLE001
            torch.cuda.synchronize()  # a dead context raises here, handled by the caller
            if kept is not None:
                kept.stop()  # the copies its graphs read go now
            placements.restore()
            placements.fewer(placement_failure(index, exc))
            if isinstance(exc, torch.cuda.OutOfMemoryError):
                free_cached_memory(torch, collect=True)
            break
        timed = index + 1
    return max(timed, 1)


def recapture_round(
    torch,
    fn: Callable,
    placements: Placements,
    count: int,
    calls: int,
    replays: int,
    stream,
    grad_to_none,
    cost: Cost,
    tiles: Optional[Tiles] = None,
) -> Optional[Dict[int, List[float]]]:
    """A later round where the graphs were not kept: every placement captured again and
    replayed, its samples by placement. They count only if every placement completes, so the pool stays
    balanced; placement 0 failing is the row's own failure and raises, as in the first
    round; another one failing ends the rounds (``cost_ms.rounds_ended`` says why) and the
    earlier rounds' samples stand."""
    got: Dict[int, List[float]] = {}
    for index in range(count):
        try:
            got[index] = replay_elsewhere(
                torch, fn, placements, index, calls, replays, stream, grad_to_none, cost, tiles=tiles
            )
        except ContextNotClean:
            raise
        except Exception as exc:  # noqa: BLE001
            if index == 0:
                raise
            torch.cuda.synchronize()  # a dead context raises here, handled by the caller
            placements.restore()
            cost.notes["rounds_ended"] = placement_failure(index, exc)
            if isinstance(exc, torch.cuda.OutOfMemoryError):
                free_cached_memory(torch, collect=True)
            return None
    return got


def replay_elsewhere(
    torch,
    fn: Callable,
    placements: Placements,
    index: int,
    calls: int,
    replays: int,
    stream,
    grad_to_none,
    cost: Optional[Cost] = None,
    kept: Optional["KeptGraphs"] = None,
    tiles: Optional[Tiles] = None,
) -> List[float]:
    """Per-call times of ``replays`` replays with the inputs at placement ``index``."""
    placements.move(index)
    stream.wait_stream(torch.cuda.current_stream())  # the copies are made there
    if cost is not None:
        cost.lap("move")
    graph = capture_moved(torch, fn, calls, stream, grad_to_none, cost, tiles)
    if cost is not None:
        cost.lap("capture")
    # time_replays synchronises the stream: the copies outlive every replay that reads them.
    times = [t / calls for t in time_replays(torch, graph, replays, stream)]
    if cost is not None:
        cost.lap("replay")
    if kept is not None:
        kept.keep(index, graph)
    return times


class KeptGraphs:
    """Each placement's graph, kept after its first round while the device has room, so
    that a later round replays it instead of capturing it again: a capture costs every
    call's launch through the library's wrapper (FlagGems: about 250 us each), a replay
    of the same calls about a millisecond. A graph holds its outputs in a private pool,
    and the copies it reads stay alive until the timing ends (``Placements``); below
    LOW_MEMORY_SHARE free, the kept ones go and later rounds capture again."""

    def __init__(self, torch):
        self.torch = torch
        self.graphs: Dict[int, Any] = {}
        self.on = True
        self.count = 1
        self.last_free: Optional[int] = None

    def expect(self, count: int) -> None:
        """``count`` placements are to come; the free memory now is the baseline. It is
        taken after placement 0's graph was captured, so what one placement takes is known
        from placement 1 on (placement 0 is kept while a quarter of the device is free)."""
        self.count = count
        if self.on:
            self.last_free = self._free()[0]

    def _free(self) -> Tuple[Optional[int], Optional[int]]:
        try:
            free, total = self.torch.cuda.mem_get_info()
            return int(free), int(total)
        except Exception:  # noqa: BLE001 - no query: nothing is kept
            return None, None

    def keep(self, index: int, graph) -> None:
        """Keep placement ``index``'s graph if what this one took (its pool and copy,
        since the last look), as much again for each placement still to come, leaves
        LOW_MEMORY_SHARE of the device free."""
        if not self.on:
            return
        free, total = self._free()
        if free is None or total is None:
            self.stop()
            return
        took = max(0, self.last_free - free) if self.last_free is not None else 0
        self.last_free = free
        still = max(0, self.count - index - 1)
        if free - still * took < LOW_MEMORY_SHARE * total:
            self.stop()
            return
        self.graphs[index] = graph

    def stop(self) -> None:
        """No graph kept from here on in this timing (later rounds capture again)."""
        self.drop()
        self.on = False

    def holds(self, count: int) -> bool:
        return self.on and all(i in self.graphs for i in range(count))

    def replay(self, index: int, replays: int, stream) -> List[float]:
        return time_replays(self.torch, self.graphs[index], replays, stream)

    def drop(self) -> None:
        self.graphs.clear()


# --- the plugin ------------------------------------------------------------------------


class GraphTimer:
    def __init__(self, settings: DirectSettings, recorder: RowRecorder, row_context: RowContext):
        self.row_context = row_context
        self.direct = DirectTimer(settings, recorder, row_context)
        try:
            self.places = knobs.env_value("graph_placements")
            self.noise = knobs.env_value("graph_noise") / 100.0
            self.replay_ms = knobs.env_value("graph_replay_ms")
            self.warmup_rule = knobs.env_value("warmup_rule")
            self.tiles_wanted = knobs.env_value("graph_tiles")
            tile_dir = knobs.env_value("graph_tile_cache")
        except knobs.KnobError as e:
            raise pytest.UsageError(f"{PLUGIN}: {e}") from None
        self.tile_dir = None if tile_dir == "off" else Path(tile_dir) if tile_dir else default_tile_dir()
        self.replay_stops: Dict[str, int] = {}  # timings per how their replays ended
        self.warmup_stops: Dict[str, int] = {}  # timings per how their warm-up ended
        self.placement_counts: Dict[int, int] = {}  # timings per placements timed over
        self.fewer_placements: Dict[str, int] = {}  # timings per reason for fewer than asked
        self.recorder = recorder
        self.row_modes: Dict[int, set] = {}
        self.timings_graph = 0
        self.timings_fallback = 0
        self.fallbacks: List[dict] = []
        self.tiling: Optional[Tiling] = None  # made at the first timing (it needs torch)
        self.tile_sizes: Optional[TileSizes] = None  # ... with the tiling, where it is on

    def tiling_for(self) -> Optional[Tiling]:
        if self.tiles_wanted and self.tiling is None:
            import torch

            self.tiling = Tiling(torch)
            if not self.tiling.on:
                print_line(
                    f"zlbench graph timer: every call captured, no tiled graphs ({self.tiling.why_off})"
                )
            else:
                self.tile_sizes = TileSizes(self.tile_dir, device_name(torch))
        return self.tiling

    def tile_size(self, timing) -> Optional[Callable[[int], Tuple[int, bool]]]:
        """The kept-tile lookup for this timing's row (``TileSizes``), once tiling is on."""
        if self.tile_sizes is None or timing is None:
            return None
        sizes, row = self.tile_sizes, timing.row
        return lambda fresh: sizes.tile(row, fresh)

    def graph_calls(self, timing) -> Optional[Callable[[int, int], Tuple[int, bool]]]:
        """The kept graph-length lookup for this timing's row (``TileSizes.calls``)."""
        if self.tile_sizes is None or timing is None:
            return None
        sizes, row = self.tile_sizes, timing.row
        return lambda fresh, unit: sizes.calls(row, fresh, unit)

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
                self.warmup_rule,
                self.noise,
                self.recorder.device_ready,
                replay_ms=self.replay_ms,
                cap_watch=self.recorder.cap_watch,
                tiling=self.tiling_for(),
                tile_size=self.tile_size(timing),
                graph_calls=self.graph_calls(timing),
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
            return self.direct.measure(
                original,
                fn,
                args,
                kwargs,
                empty_graph=isinstance(failed.error, EmptyGraph),
                prewarmed_ms=failed.warm_ms,
            )
        self.timings_graph += 1
        for counts, key in (
            (self.replay_stops, measured.stop),
            (self.warmup_stops, measured.cost["warmup_stop"]),
        ):
            counts[key] = counts.get(key, 0) + 1
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
            "warmup_rule": self.warmup_rule,
            "warmup_stops": dict(self.warmup_stops),
            "noise_target_pct": round(self.noise * 100, 4),
            "replay_ms": self.replay_ms,
            "tiled_graphs": self.tiling.report() if self.tiling is not None else {"on": False, "graphs": 0},
            **({"tile_sizes": self.tile_sizes.report()} if self.tile_sizes is not None else {}),
            "replay_stops": dict(self.replay_stops),
            "placements_wanted": self.places,
            "timings_per_placements": {str(k): v for k, v in sorted(self.placement_counts.items())},
            "timings_fewer_placements": sum(self.fewer_placements.values()),
            "fewer_placements": dict(self.fewer_placements),
            # The direct timer's own report for the timings it took over: its clocks, the
            # trace reader, why rows went to host time.
            **({"direct_timer": self.direct.counts()} if self.timings_fallback else {}),
        }


def pytest_configure(config) -> None:
    TimerSession.install(config, PLUGIN, GraphTimer, GRAPH_TARGETS)

"""The graph timer on a real CUDA device (skipped without one: see tests/conftest.py).

    pytest -m gpu tests/
"""

import os
import subprocess
import sys
import textwrap
import time

import pytest

from zlbench import timing

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

from zlbench.plugins import graph_timer  # noqa: E402
from zlbench.plugins.graph_timer import CaptureFailed, graph_bench  # noqa: E402


def _bench(fn, warmup=25, rep=50, quantiles=None, return_mode="median"):
    return graph_bench(fn, warmup, rep, None, quantiles, return_mode).value


def test_graph_timer_reports_the_spread_of_its_replays():
    x = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
    m = graph_bench(lambda: torch.abs(x), 25, 100, None, None, "median")
    assert m.stop in ("noise", "budget") and m.samples >= timing.MIN_REPLAYS
    # value: triton's "median" is the lower median; median_ms the median.
    assert m.spread is not None and 0 <= m.spread < 0.02 and abs(m.value / m.median_ms - 1) < 0.01
    # Where the timing's own time went: every step, and how warm-up and replays ended.
    assert m.cost["warmup_stop"] in ("settled", "cap", "max_batches") and m.cost["capture"] > 0
    assert m.cost["total"] >= m.cost["warmup"] + m.cost["capture"] + m.cost["replay"] - 1e-3


def test_the_settle_rule_warms_up_far_less_than_the_budget_and_measures_the_same():
    x = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
    # settle first: after budget's full second of the same kernel it would find the clock up.
    settle = graph_bench(lambda: torch.abs(x), 1000, 100, None, None, "median")
    budget = graph_bench(lambda: torch.abs(x), 1000, 100, None, None, "median", warmup_rule="budget", noise=0)
    # budget: FlagGems' 1,000 ms, or WARMUP_MAX_BATCHES batches of about a millisecond.
    assert budget.cost["warmup"] >= 150 and budget.stop == "budget"
    assert settle.cost["warmup_stop"] == "settled" and settle.cost["warmup"] < 100
    assert settle.cost["total"] < budget.cost["total"] / 2
    assert abs(settle.median_ms / budget.median_ms - 1) < 0.02


def test_replays_fill_the_budget_when_the_pooled_median_is_not_pinned(monkeypatch):
    x = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
    # A target no timing can reach: the second round fills the rep budget (however far
    # apart the two placements' medians are: that stop has its own test).
    monkeypatch.setattr(timing, "PLACEMENTS_DOMINATE", float("inf"))
    m = graph_bench(lambda: torch.abs(x), 25, 100, None, None, "median", places=2, noise=1e-9)
    assert m.stop == "budget" and m.cost["rounds"] == 2
    pinned = graph_bench(lambda: torch.abs(x), 25, 100, None, None, "median", places=2, noise=0.5)
    assert pinned.stop == "noise" and pinned.cost["rounds"] == 1 and pinned.samples == timing.FIRST_ROUND_SAMPLES


def test_placements_that_move_the_row_widen_its_spread_and_end_its_rounds():
    x = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
    seen = {}

    def fn():
        # Every other placement does the work twice: two clusters of four placements, each
        # tight replay to replay, that no number of replays at them brings together.
        index = seen.setdefault(x.data_ptr(), len(seen))
        y = torch.abs(x)
        return torch.abs(y) if index % 2 else y

    m = graph_bench(fn, 25, 100, None, None, "median", places=8)
    medians = m.cost["placement_ms"]
    assert m.placements == 8 and len(medians) == 8 and max(medians) / min(medians) > 1.5, m.cost
    # The pooled median is not pinned, and the placements are why: no later round.
    assert m.stop == "placements" and m.cost["replay_stop"] == "placements" and m.cost["rounds"] == 1
    # The row's spread is at least its placements' (about half the two clusters'
    # distance; the pooled replays' CI, spanning both clusters, can be as wide), not the
    # scatter of its replays at one placement; its median is theirs, trimmed: between the
    # clusters, not in one.
    assert m.cost["placement_spread"] == pytest.approx(timing.placement_spread(medians), rel=1e-3)
    assert m.spread >= m.cost["placement_spread"] > 0.1
    assert m.median_ms == m.value == pytest.approx(timing.over_placements(medians), abs=1e-7)
    assert min(medians) * 1.2 < m.median_ms < max(medians) / 1.2


def test_a_later_round_replays_the_graphs_of_the_first_instead_of_capturing_again(monkeypatch):
    x = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
    monkeypatch.setattr(timing, "PLACEMENTS_DOMINATE", float("inf"))  # later rounds come
    home = x.data_ptr()
    calls = {}

    def fn():
        calls[x.data_ptr()] = calls.get(x.data_ptr(), 0) + 1  # eager and capture calls
        return torch.abs(x)

    m = graph_bench(fn, 25, 100, None, None, "median", places=4, noise=1e-9)
    assert m.stop == "budget" and m.cost["rounds"] >= 2 and m.cost["graphs_kept"]
    moved = [n for ptr, n in calls.items() if ptr != home]
    # Each moved placement was captured once: its calls are one graph's worth.
    assert len(moved) == 3 and all(n == m.cost["calls_per_graph"] for n in moved)


def test_percall_timer_pins_a_host_syncing_op_to_its_noise_target():
    from zlbench.plugins.percall import EventClock, percall_bench

    x = torch.randn(1024, 1024, device="cuda")
    rule = timing.StopRule.for_call(0.005, 100)
    clock = EventClock(torch.cuda, "torch.cuda.Event")
    times, stop, _ = percall_bench(lambda: torch.nonzero(x), clock, timing.WarmupRule("budget", 25), rule)
    # Pinned within this process; between processes the host's share moves it (the
    # traced clock below is the one that repeats).
    assert stop in ("noise", "time_cap") and len(times) >= timing.MIN_SAMPLES
    assert stop != "noise" or timing.relative_spread(sorted(times)) <= 0.005


def _median(times):
    return sorted(times)[len(times) // 2]


def test_the_kernels_clock_times_a_host_syncing_op_by_its_device_work_alone():
    from zlbench.plugins.percall import TracedClock, choose_clock, percall_bench

    x = torch.randn(1 << 20, device="cuda", dtype=torch.float16)
    mask = x > 0
    clock, note = choose_clock("cuda", "CUDA")
    assert isinstance(clock, TracedClock), note
    rule = timing.StopRule.for_call(0.005, 100)
    for fn in (lambda: torch.nonzero(x), lambda: torch.masked_select(x, mask)):
        runs = [percall_bench(fn, clock, timing.WarmupRule("settle", 1000), rule) for _ in range(2)]
        traced = [_median(r.samples) for r in runs]
        events = _median(percall_bench(fn, clock.warmup_clock, timing.WarmupRule("budget", 25), rule)[0])
        # Device time repeats to well within 1%; the host's sync and launches are left out.
        assert abs(traced[0] - traced[1]) / min(traced) < 0.01, traced
        assert 0 < traced[0] < events, (traced, events)
        # The warm-up judged by the fastest calls settles well inside FlagGems' second,
        # and the first session of samples, which spends the rule's minimum, pins the
        # median (a third at most), inside the caller's budget.
        assert all(r.cost["warmup_stop"] == "settled" and r.cost["batches"] <= 3 for r in runs), runs
        assert all(r.cost["timed"] < 2 * rule.budget for r in runs), [r.cost for r in runs]


def test_the_raw_trace_reader_agrees_with_torchs_event_tree(tmp_path):
    from torch.profiler import ProfilerActivity, profile, record_function

    from zlbench.plugins.percall import TRACE_MARK, _function_event_ranges, device_ms_per_range, raw_events

    # A bare triton launch, under no aten op (FlagGems' kernels run inside the aten op they
    # implement); its @jit source must be in a file.
    (tmp_path / "zl_raw_kernel.py").write_text(textwrap.dedent("""
        import triton
        import triton.language as tl

        @triton.jit
        def double(x_ptr, n, BLOCK: tl.constexpr):
            i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            tl.store(x_ptr + i, tl.load(x_ptr + i, mask=i < n) * 2, mask=i < n)
    """))
    sys.path.insert(0, str(tmp_path))
    try:
        import zl_raw_kernel
    finally:
        sys.path.remove(str(tmp_path))
    x = torch.randn(1 << 20, device="cuda", dtype=torch.float16)
    mask = x > 0
    w = torch.randn(4096, device="cuda", requires_grad=True)
    cases = {
        "nonzero": lambda: torch.nonzero(x),
        "masked_select": lambda: torch.masked_select(x, mask),
        "softmax": lambda: torch.softmax(x.float(), 0),
        "triton": lambda: zl_raw_kernel.double[(1024,)](x, x.numel(), BLOCK=1024),
        "backward": lambda: (w * w).sum().backward(),  # launched from autograd's thread too
    }
    for name, fn in cases.items():
        fn()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(20):
                with record_function(TRACE_MARK):
                    fn()
            torch.cuda.synchronize()
        raw, why_not = raw_events(prof)
        assert raw is not None, (name, torch.__version__, why_not)
        times, total = device_ms_per_range(raw)
        tree_times, tree_total = _function_event_ranges(prof.events())
        assert len(times) == len(tree_times) == 20, name
        # Every call of these ops runs the same kernels: each range reads like the rest.
        assert all(t == pytest.approx(sorted(times)[10], rel=0.25, abs=2e-3) for t in times), (name, times)
        # torch's tree agrees call for call, but for a stray one: on the H200 it gave
        # nonzero's first range twice its kernel (21.2 us against 10.6 us everywhere else).
        agree = sum(t == pytest.approx(u, rel=1e-6, abs=1e-9) for t, u in zip(times, tree_times))
        assert agree >= 18, (name, times, tree_times)
        assert total == pytest.approx(tree_total, rel=1e-6, abs=1e-9), name
        if name not in ("backward", "triton"):  # all of it launched inside the ranges
            assert sum(times) == pytest.approx(total, rel=1e-6), name
        # Under no op a launch may be linked to nothing: then both readings leave it out of
        # every range, and the timer sends the row to events (outside_ranges).
        assert name in ("backward", "triton") or min(times) > 0, (name, times)


def test_nvml_reads_the_device_this_process_sees():
    pytest.importorskip("pynvml")
    from zlbench.backends import BACKENDS
    from zlbench.backends.base import open_device_state

    state = open_device_state(BACKENDS["cuda"])
    assert state.available(), state.describe()
    sample = state.sample()
    assert sample["sm_mhz"] > 0 and sample["mem_mhz"] > 0 and sample["temp_c"] > 0
    assert isinstance(sample["throttle"], list)
    info = state.describe()
    assert info["source"] == "nvml" and info["clocks_locked"] in (True, False, "unknown")
    assert torch.cuda.get_device_name() in (info["name"] or "")
    state.close()


def test_nvml_samples_the_sm_clock_while_a_row_runs():
    pynvml = pytest.importorskip("pynvml")
    from zlbench.backends import BACKENDS
    from zlbench.backends.base import open_device_state

    state = open_device_state(BACKENDS["cuda"])
    assert state.available(), state.describe()
    try:
        pynvml.nvmlDeviceGetSamples(state.handle, pynvml.NVML_PROCESSOR_CLK_SAMPLES, 0)
    except pynvml.NVMLError_NotSupported:
        pytest.skip("this driver keeps no SM clock samples: rows carry no sm_mhz_window")
    except pynvml.NVMLError_NotFound:  # none kept yet: the work below makes some
        pass
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)

    def busy(seconds):  # the driver samples several times a second
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            for _ in range(20):
                a @ a
            torch.cuda.synchronize()

    busy(0.5)  # a process's first read only opens the window, once samples exist
    state.sample(ending=False)
    busy(1.5)
    closing = state.sample()
    counts = state.describe()["sm_clock_window"]
    if "sm_mhz_window" not in closing:
        # Such a driver's rows say so in the run identity rather than looking short.
        assert counts == {"read": 0, "none": 1} or "error" in counts, counts
        pytest.skip(f"this driver kept no SM clock sample while 1.5 s of matmuls ran ({counts})")
    window = closing["sm_mhz_window"]
    top = state.describe()["max_sm_mhz"]
    assert window["n"] >= 1 and 0 < window["min"] <= window["median"] <= (top or window["median"]), window
    assert state.describe()["sm_clock_window"] == {"read": 1, "none": 0}
    state.close()


def _assert_context_usable():
    assert not torch.cuda.is_current_stream_capturing()
    x = torch.randn(1024, device="cuda")  # the default generator is not poisoned
    y = torch.randn(1024, device="cuda")
    assert not torch.equal(x, y)
    torch.cuda.synchronize()


def test_graph_replay_times_a_tiny_op_without_launch_overhead():
    x = torch.randn(64, 64, device="cuda", dtype=torch.float16)
    ms = _bench(lambda: torch.abs(x))
    # a 64x64 abs replays in about a microsecond; do_bench's launch path costs far more
    assert 0 < ms < 0.02
    samples = _bench(lambda: torch.abs(x), return_mode="all")
    assert len(samples) >= timing.MIN_REPLAYS
    low, high = _bench(lambda: torch.abs(x), quantiles=[0.2, 0.8])
    assert low <= high


def test_two_graph_timings_agree_closely():
    x = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
    a = _bench(lambda: torch.abs(x), rep=100)
    b = _bench(lambda: torch.abs(x), rep=100)
    assert abs(a - b) / min(a, b) < 0.05


def test_a_view_captures_an_empty_graph_and_its_second_timing_skips_the_trace():
    from zlbench.markers import NO_DEVICE_WORK
    from zlbench.plugins import direct_timer
    from zlbench.plugins.graph_timer import EmptyGraph
    from zlbench.plugins.row_context import RowContext

    x = torch.randn(256, 512, device="cuda", dtype=torch.float16)
    with pytest.raises(CaptureFailed) as info:
        _bench(lambda: x.transpose(0, 1))
    assert isinstance(info.value.error, EmptyGraph) and timing.fallback_decision("capture", info.value.error).fallback
    _assert_context_usable()
    timer = direct_timer.DirectTimer(
        direct_timer.DirectSettings("kernels", 1, 0.005), direct_timer.RowRecorder("cuda"), RowContext())
    opts = {"warmup": 1000, "rep": 100}
    first = timer._percall(lambda: x.transpose(0, 1), opts, ("transpose", "gems"))
    second = timer._percall(lambda: x.transpose(0, 1), opts, ("transpose", "gems"))
    for measured, clock, untraced in (first, second):
        assert clock == "torch.cuda.Event" and untraced.kind == NO_DEVICE_WORK and measured.median_ms > 0
        # A host-time warm-up ends by HOST_TIME_WARMUP_CAP_MS, not FlagGems' second: settled
        # on its fastest calls, or at that cap where the host is noisy (an H100 machine just
        # started: 103 ms, "cap"); the batch under way when it is reached runs past it.
        assert measured.cost["warmup_stop"] in ("settled", "cap"), measured.cost
        cap = timing.HOST_TIME_WARMUP_CAP_MS + 2 * timing.DIRECT_WARMUP_BATCH_MS
        assert measured.cost["warmup"] < cap, measured.cost
    assert "earlier empty graph" in str(second[2]) and timer.timings_untraced_by_empty_graph == 1


@pytest.mark.parametrize("make_fn", [
    lambda x: (lambda: torch.nonzero(x)),
    lambda x: (lambda: torch.masked_select(x, x > 0)),
    lambda x: (lambda: torch.unique(x)),
], ids=["nonzero", "masked_select", "unique"])
def test_host_synchronising_ops_fail_capture_and_leave_the_context_clean(make_fn):
    x = torch.randn(256, 256, device="cuda")
    with pytest.raises(CaptureFailed) as info:
        _bench(make_fn(x))
    assert info.value.phase == "capture"
    decision = timing.fallback_decision(info.value.phase, info.value.error)
    assert decision.fallback, decision.reason
    # The warm-up settled before the capture failed: the direct timer need not warm up again.
    assert info.value.warm_ms is not None and info.value.warm_ms > 0
    _assert_context_usable()
    # the next shape still graph-times
    assert _bench(lambda: torch.abs(x)) > 0


def test_the_direct_timer_takes_a_row_over_from_a_settled_warm_up_and_measures_the_same():
    from zlbench.plugins import direct_timer
    from zlbench.plugins.row_context import RowContext

    x = torch.randn(1024, 1024, device="cuda")
    fn = lambda: torch.masked_select(x, x > 0)  # noqa: E731
    with pytest.raises(CaptureFailed) as info:
        _bench(fn, warmup=1000)  # FlagGems' cap: room to settle
    assert info.value.warm_ms is not None
    timer = direct_timer.DirectTimer(
        direct_timer.DirectSettings("kernels", 1, 0.005), direct_timer.RowRecorder("cuda"), RowContext())
    opts = {"warmup": 1000, "rep": 100}
    cold, _, _ = timer._percall(fn, opts)
    warm, clock, untraced = timer._percall(fn, opts, prewarmed_ms=info.value.warm_ms)
    assert untraced is None and clock == timer._clock().name
    assert warm.cost["warmup_stop"] == "prewarmed" and warm.cost["warmup_batches"] == 1
    assert "first_call" not in warm.cost and warm.cost["warmup"] < cold.cost["warmup"]
    assert abs(warm.median_ms / cold.median_ms - 1) < 0.05, (warm.median_ms, cold.median_ms)


def test_a_probe_graph_of_the_plans_calls_is_the_real_one():
    x = torch.randn(1 << 29, device="cuda")  # 2 GiB: about 1 ms a call, one call per graph
    m = graph_bench(lambda: torch.abs(x), 25, 100, None, None, "median", places=2)
    assert m.cost["calls_per_graph"] == 1 and m.cost["probe_graph"] is True, m.cost
    assert m.samples >= timing.FIRST_ROUND_SAMPLES and m.placements == 2
    # A row of many calls per graph whose probe is far off the plan is captured again.
    y = torch.randn(64, 64, device="cuda")
    small = graph_bench(lambda: torch.abs(y), 25, 100, None, None, "median", places=1)
    assert small.cost["calls_per_graph"] > 100 and "probe_graph" not in small.cost, small.cost


def test_a_tiled_graph_runs_every_copy_of_its_tile_in_order():
    from zlbench.plugins.graph_tiles import Tiles, Tiling

    tiling = Tiling(torch)
    assert tiling.on, tiling.why_off
    x = torch.zeros(1, device="cuda")
    stream = graph_timer.side_stream(torch)
    calls = []
    graph = graph_timer.capture(torch, lambda: calls.append(x.mul_(2).add_(1)), 12, stream, None, tiles=Tiles(tiling, 3))
    assert len(calls) == 3 and tiling.graphs == 1  # one tile of 3 calls captured, 4 copies
    x.zero_()
    with torch.cuda.stream(stream):
        graph.replay()
    stream.synchronize()
    assert x.item() == 2**12 - 1  # x -> 2x + 1, twelve times: every call, in order


@pytest.mark.parametrize("places", [1, 4])
def test_a_tiny_rows_graphs_are_chained_tiles_and_time_what_captured_ones_do(places):
    from zlbench.plugins.graph_tiles import Tiling

    y = torch.randn(64, 64, device="cuda", dtype=torch.float16)
    # Plain, tiled, plain: the two plain timings bracket the tiled one, so a device that
    # drifts between timings shows as plain against plain, not as tiled against plain.
    before = graph_bench(lambda: torch.abs(y), 25, 100, None, None, "median", places=places)
    tiled = graph_bench(lambda: torch.abs(y), 25, 100, None, None, "median", places=places, tiling=Tiling(torch))
    plain = graph_bench(lambda: torch.abs(y), 25, 100, None, None, "median", places=places)
    tile = tiled.cost["tile_calls"]
    assert tiled.cost["calls_per_graph"] % tile == 0, tiled.cost
    if places == 1:
        assert tiled.cost["probe_graph"] is True  # the probe is the tile of the real graph
    else:
        assert tiled.cost["interleaved"] is True  # each graph a tile of every placement's segment
    assert tiled.cost["calls_per_graph"] >= 2 * tile and "tile_calls" not in plain.cost
    # One tile captured instead of every call. An interleaved tile holds a segment at each
    # of its placements (MIN_SEGMENT calls each), a larger share of its graph, so it saves
    # less: 8.2 against 14.8 ms on an H100.
    share = 0.5 if places == 1 else 0.75
    assert tiled.cost["capture"] < plain.cost["capture"] * share, (tiled.cost, plain.cost)
    timings = {"plain before": (before.median_ms, before.cost), "tiled": (tiled.median_ms, tiled.cost),
               "plain after": (plain.median_ms, plain.cost)}
    assert abs(before.median_ms / plain.median_ms - 1) < 0.02, ("the device drifted", timings)
    bracket = (before.median_ms + plain.median_ms) / 2
    assert abs(tiled.median_ms / bracket - 1) < 0.02, timings


def test_a_rows_kept_tile_builds_its_graphs_in_a_later_timing(tmp_path):
    from zlbench.plugins.graph_tiles import TileSizes, Tiling

    tiling = Tiling(torch)
    y = torch.randn(64, 64, device="cuda", dtype=torch.float16)
    row = timing.TimedRow("abs", "torch.float16", "[torch.Size([64, 64])]", "torch")

    def timed(sizes, places=1):
        return graph_bench(lambda: torch.abs(y), 25, 100, None, None, "median", places=places, tiling=tiling,
                           tile_size=lambda fresh: sizes.tile(row, fresh),
                           graph_calls=lambda fresh, unit: sizes.calls(row, fresh, unit))

    first = timed(TileSizes(tmp_path, "gpu"))
    assert first.cost["tile_kept"] is False and first.cost["tile_calls"] >= 2, first.cost
    assert first.cost["calls_kept"] is False, first.cost
    later = timed(TileSizes(tmp_path, "gpu"))  # as another process would
    assert later.cost["tile_kept"] is True and later.cost["tile_calls"] == first.cost["tile_calls"]
    # ... to the same length: the graph's launch cost is the same share of every call.
    assert later.cost["calls_kept"] is True, later.cost
    assert later.cost["calls_per_graph"] == first.cost["calls_per_graph"], (first.cost, later.cost)
    # A tile kept by an earlier run is the one built from, whatever this probe's calls.
    other = TileSizes(tmp_path, "other-gpu")
    other.tile(row, 7)
    kept = timed(TileSizes(tmp_path, "other-gpu"))
    assert kept.cost["tile_calls"] == 7 and kept.cost["calls_per_graph"] % 7 == 0, kept.cost


def test_an_interleaved_rows_graphs_chain_a_tile_of_every_placements_segment(tmp_path):
    from zlbench.plugins.graph_tiles import TileSizes, Tiling

    tiling = Tiling(torch)
    y = torch.randn(64, 64, device="cuda", dtype=torch.float16)
    row = timing.TimedRow("abs", "torch.float16", "[torch.Size([64, 64])]", "torch")
    TileSizes(tmp_path, "gpu").tile(row, 5)  # a FlagGems kernel's tile: its wrapper's 200 us a call

    def timed(places=8):
        sizes = TileSizes(tmp_path, "gpu")  # as another process would
        return graph_bench(lambda: torch.abs(y), 25, 100, None, None, "median", places=places, tiling=tiling,
                           tile_size=lambda fresh: sizes.tile(row, fresh),
                           graph_calls=lambda fresh, unit: sizes.calls(row, fresh, unit))

    plain = graph_bench(lambda: torch.abs(y), 25, 100, None, None, "median", places=8)  # every call captured
    first = timed()
    later = timed()
    assert plain.cost["interleaved"] is True and first.cost["interleaved"] is True, (plain.cost, first.cost)
    # Four placements a graph, eight calls each: seven tiles of 5 in one.
    assert first.cost["tile_calls"] == 35 and first.cost["calls_per_graph"] % 35 == 0, first.cost
    assert first.cost["capture"] < plain.cost["capture"] * 0.75, (first.cost, plain.cost)
    assert later.cost["calls_kept"] is True and later.cost["calls_per_graph"] == first.cost["calls_per_graph"]
    timings = {"plain": (plain.median_ms, plain.cost), "tiled": (first.median_ms, first.cost),
               "tiled again": (later.median_ms, later.cost)}
    assert abs(first.median_ms / plain.median_ms - 1) < 0.03, timings
    assert abs(later.median_ms / first.median_ms - 1) < 0.02, timings


def test_a_capture_that_fails_after_an_rng_op_does_not_poison_torch_randn():
    x = torch.randn(64, device="cuda")
    before = torch.cuda.get_rng_state()

    def rng_then_sync():
        torch.rand(4096, device="cuda")  # registers the generator with the capture
        return x.sum().item()  # host sync: the capture is invalidated here

    with pytest.raises(CaptureFailed):
        _bench(rng_then_sync)
    _assert_context_usable()
    assert not torch.equal(before, torch.cuda.get_rng_state())  # eager RNG moved on


def test_a_capture_that_aborts_inside_an_rng_op_does_not_poison_torch_randn():
    # Whether seeding or state access is legal during capture changes between torch
    # releases, so the abort is made certain: an RNG op that raises once it has drawn
    # from the generator inside the capture (capture state entered, offset advanced).
    def rng_op_that_fails_under_capture():
        out = torch.rand(4096, device="cuda")
        if torch.cuda.is_current_stream_capturing():
            raise RuntimeError("RNG op failed during capture")
        return out

    with pytest.raises(CaptureFailed) as info:
        _bench(rng_op_that_fails_under_capture)
    assert info.value.phase == "capture"
    assert timing.fallback_decision(info.value.phase, info.value.error).fallback
    _assert_context_usable()
    # and a later RNG capture still works
    assert _bench(lambda: torch.rand(4096, device="cuda")) > 0


def test_a_fatal_error_is_not_mistaken_for_a_capture_failure():
    # A device-side assert kills the context, so it runs in its own process.
    script = textwrap.dedent("""
        import torch
        from zlbench import timing
        from zlbench.plugins.graph_timer import CaptureFailed, graph_bench
        x = torch.zeros(4, device="cuda")
        bad = torch.tensor([10], device="cuda")
        try:
            graph_bench(lambda: x[bad], 5, 10, None, None, "median").value
        except CaptureFailed as failed:
            decision = timing.fallback_decision(failed.phase, failed.error)
            print("DECISION", failed.phase, decision.fallback, decision.reason)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("DECISION")), None)
    assert line is not None, out.stdout + out.stderr
    assert " False " in line and "device-side assert triggered" in line


def test_a_row_is_timed_over_placements_of_its_inputs_and_they_are_put_back():
    x = torch.randn(20, 6, 65536, device="cuda", dtype=torch.float16)
    w = torch.randn(6, 65536, device="cuda", dtype=torch.float16)
    ptrs = (x.data_ptr(), w.data_ptr())
    seen = set()

    def fn():
        seen.add(x.data_ptr())  # runs at warm-up and capture: the addresses graphs bake in
        return torch.layer_norm(x, [6, 65536], w)

    placed = []
    m = graph_bench(fn, 25, 100, None, None, "median", places=4, on_placed=lambda n, why: placed.append((n, why)))
    assert m.placements == 4 and placed == [(4, None)] and len(seen) == 4
    assert (x.data_ptr(), w.data_ptr()) == ptrs  # the caller's tensors are where they were
    assert m.samples >= 4 * timing.MIN_REPLAYS and m.spread is not None
    one = graph_bench(fn, 25, 100, None, None, "median", places=1)
    assert one.placements == 1 and (x.data_ptr(), w.data_ptr()) == ptrs


def test_a_row_over_an_autograd_input_keeps_its_inputs_in_place():
    # A backward row's saved tensors point at the inputs' storage: such rows stay put.
    x = torch.randn(1 << 16, device="cuda", requires_grad=True)

    def fn():
        with torch.no_grad():
            return torch.sin(x)

    placed = []
    m = graph_bench(fn, 25, 50, None, None, "median", places=4, on_placed=lambda n, why: placed.append((n, why)))
    assert m.placements == 1 and placed == [(1, "an input takes part in autograd")]


def test_a_placement_that_fails_ends_the_extra_ones_and_keeps_what_was_timed():
    x = torch.randn(1 << 20, device="cuda")
    home = x.data_ptr()

    def fn():
        if x.data_ptr() != home:  # stands for any failure at a moved placement
            raise RuntimeError("this row cannot run elsewhere")
        return torch.abs(x)

    placed = []
    m = graph_bench(fn, 25, 100, None, None, "median", places=4, on_placed=lambda n, why: placed.append((n, why)))
    assert m.placements == 1 and m.samples >= timing.MIN_REPLAYS and m.median_ms > 0
    # 4 MiB a copy: the placements interleave in two graphs, the first taking the inputs'
    # own and the third (``interleaved_sets``), where the first moved one fails.
    assert graph_timer.interleaved_sets(4) == [[0, 2], [1, 3]]
    assert placed == [(1, "placement 3 failed: RuntimeError: this row cannot run elsewhere")]
    assert x.data_ptr() == home
    torch.cuda.synchronize()  # the context is fine


@pytest.mark.parametrize("size,places,interleaved", [(64 * 64, 8, True), (1 << 22, 4, False)])
def test_a_cache_keyed_by_address_gets_one_eager_call_at_each_moved_placement(size, places, interleaved):
    # As FlagGems' segment_reduce does with its lengths: host work once per data_ptr,
    # which a capture at a new address would forbid.
    x = torch.randn(size, device="cuda")
    checked = {}

    def fn():
        if x.data_ptr() not in checked:
            checked[x.data_ptr()] = bool((x.cpu() > -1e9).all())
        return torch.abs(x)

    placed = []
    m = graph_bench(fn, 25, 100, None, None, "median", places=places, on_placed=lambda n, why: placed.append((n, why)))
    assert placed == [(places, None)] and len(checked) == places
    assert m.cost["interleaved"] is interleaved and m.cost["called_first"] == places - 1
    # Each placement's own median is in the record, or each interleaved graph's.
    medians = m.cost["graph_ms" if interleaved else "placement_ms"]
    assert len(medians) == (2 if interleaved else places) and all(v > 0 for v in medians)
    assert min(medians) <= m.median_ms <= max(medians)
    torch.cuda.synchronize()


def test_small_rows_interleave_their_placements_in_two_graphs_and_measure_the_same():
    from zlbench.plugins.graph_timer import INTERLEAVED_GRAPHS

    x = torch.randn(64, 64, device="cuda", dtype=torch.float16)
    ptr = x.data_ptr()
    seen = set()

    def fn():
        seen.add(x.data_ptr())
        return torch.abs(x)

    m = graph_bench(fn, 25, 100, None, None, "median", places=8)
    assert m.cost["interleaved"] and m.placements == 8 and len(seen) == 8 and x.data_ptr() == ptr
    # Two graphs of four placements each; the row's spread is theirs where it is wider.
    graphs = m.cost["graph_ms"]
    assert len(graphs) == INTERLEAVED_GRAPHS
    # graph_ms is rounded to 1e-7 ms: their spread is known to that over their median
    assert m.cost["placement_spread"] == pytest.approx(timing.placement_spread(graphs), abs=1e-7 / min(graphs))
    assert m.spread >= m.cost["placement_spread"] and m.samples >= timing.FIRST_ROUND_SAMPLES
    assert m.median_ms == pytest.approx(sum(graphs) / len(graphs), abs=1e-7)  # graph_ms' rounding
    one = graph_bench(fn, 25, 100, None, None, "median", places=1)
    # Eight copies of 8 KB share L2 as one does: the same per-call time within 3%.
    assert abs(m.median_ms / one.median_ms - 1) < 0.03


def test_nvml_names_another_process_busy_on_the_device():
    """`device_shared`'s real path: NVML's per-process utilization sees a second process
    multiplying matrices on this device, and no one while this process is alone."""
    pytest.importorskip("pynvml")
    import subprocess
    import sys
    import time

    from zlbench.backends import BACKENDS
    from zlbench.backends.base import open_device_state

    state = open_device_state(BACKENDS["cuda"])
    x = torch.randn(4096, 4096, device="cuda")

    def busy(seconds):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            for _ in range(20):
                x @ x
            torch.cuda.synchronize()

    state.sample()
    busy(1.0)
    assert state.sample()["other_procs"] in (0, None)
    code = ("import time, torch\nx = torch.randn(4096, 4096, device='cuda')\nprint('up', flush=True)\n"
            "end = time.monotonic() + 8\nwhile time.monotonic() < end:\n    x @ x\n")
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "up"
        time.sleep(0.5)
        state.sample()
        busy(1.5)
        shared = state.sample()
    finally:
        child.kill()
        child.wait()
    state.close()
    assert shared["other_procs"] and shared["other_procs"] >= 1, shared


@pytest.mark.parametrize("when, size, interleaved", [
    ("warmup", 4096, None),  # seen in the warm-up: straight to the window after the probe
    ("replays", 4096, False),  # seen in the first round of separate graphs' replays
    ("replays", 64, True),  # seen in the replays of the interleaved graph
], ids=["in-warmup", "in-replays", "in-interleaved-replays"])
def test_a_timing_that_reaches_the_power_cap_is_timed_again_over_the_window(monkeypatch, when, size, interleaved):
    x = torch.randn(size, size, device="cuda", dtype=torch.float16)
    homes = []

    def fn():
        homes.append(x.data_ptr())
        return torch.abs(x)  # memory-bound: far from this device's own power cap

    # Every look reads (no rate limit), so the order of readings is the code's: a device
    # read as held down by its cap from the warm-up's second batch on, or from the second
    # reading after the warm-up (the probe's replays read the first).
    monkeypatch.setattr(timing, "CAP_LOOK_EVERY_MS", 0.0)
    readings, after_warm = [], []

    def read():
        readings.append(1)
        capped = len(readings) > 1 if when == "warmup" else len(after_warm) > 0 and len(readings) - after_warm[0] > 1
        return {"sm_mhz": 1400, "throttle": ["sw_power_cap"]} if capped else {"sm_mhz": 1980, "throttle": []}

    placed = []
    m = graph_bench(fn, 25, 100, None, None, "median", on_warm=lambda: after_warm.append(len(readings)), places=4,
                    on_placed=lambda n, why: placed.append((n, why)), cap_watch=lambda: timing.CapWatch(read))
    window = m.cost["power_cap"]
    assert m.stop == "power_cap" and m.cost["replay_stop"] == "power_cap" and m.cost["rounds"] == 0
    assert window["window_ms"] >= timing.CAP_WINDOW_MS and window["replays"] == m.samples
    assert window["readings"] >= 2 and window["capped_readings"] == window["readings"]
    assert window["median_mhz"] == 1400 and window["ref_mhz"] == 1980
    # What the window replaced: nothing when the warm-up saw the cap, else the replays.
    aside = window["set_aside"]
    if when == "warmup":
        assert aside["replays"] == 0 and "interleaved" not in aside
    else:
        assert aside["replays"] > 0 and aside["interleaved"] is interleaved
        # Seen in the first round: no later round, and no placement after the one that saw it.
        assert aside["rounds"] == 1 and aside["placements"] == (4 if interleaved else 1)
    assert "interleaved" not in m.cost and "graphs_kept" not in m.cost
    # A window's spread is never under what two windows differ by.
    assert m.spread >= timing.CAP_WINDOW_SPREAD and window["replay_spread"] is not None
    # One placement, the inputs' own, and the reason is given for the count.
    assert m.placements == 1 and placed[-1][0] == 1 and "power cap" in placed[-1][1]
    assert homes[-1] == x.data_ptr()
    # The window's figure is the same work's: within a few percent of a plain timing
    # (this device's own clock is not held down here, whatever the watch was told).
    plain = graph_bench(fn, 25, 100, None, None, "median", cap_watch=lambda: timing.CapWatch(lambda: {}))
    assert "power_cap" not in plain.cost and plain.stop in ("noise", "budget")
    assert abs(m.median_ms / plain.median_ms - 1) < 0.1

"""Repeat median, sample reduction and graph sizing: pure arithmetic, no torch, no triton."""

import math
import statistics
import subprocess
import sys

import pytest

from zlbench import knobs, timing


def test_timing_and_plugin_modules_import_neither_torch_nor_triton():
    code = (
        "import sys, zlbench.timing, zlbench.plugins.direct_timer, zlbench.plugins.graph_timer, "
        "zlbench.plugins.row_context; "
        "print(sorted(m for m in ('torch', 'triton') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("text,expected", [(None, 1), ("", 1), ("1", 1), (" 5 ", 5)])
def test_parse_repeat_accepts_positive_ints(text, expected):
    assert knobs.env_value("direct_repeat", {} if text is None else {"ZL_DIRECT_REPEAT": text}) == expected


@pytest.mark.parametrize("text", ["0", "-2", "three", "1.5"])
def test_parse_repeat_rejects_the_rest(text):
    with pytest.raises(ValueError, match="ZL_DIRECT_REPEAT"):
        knobs.env_value("direct_repeat", {"ZL_DIRECT_REPEAT": text})


def _calls(values):
    it = iter(values)
    made = []

    def call():
        made.append(1)
        return next(it)

    return call, made


def test_repeat_median_calls_n_times_and_takes_the_median():
    call, made = _calls([5.0, 1.0, 3.0])
    result, n = timing.repeat_median(call, 3, None, "median")
    assert (result, n, len(made)) == (3.0, 3, 3)


def test_repeat_median_even_count_is_the_mean_of_the_middle_pair():
    call, _ = _calls([1.0, 10.0, 2.0, 4.0])
    assert timing.repeat_median(call, 4)[0] == 3.0


def test_repeat_median_resists_one_outlier_call():
    call, _ = _calls([0.0011, 0.120, 0.0012])
    assert timing.repeat_median(call, 3, None, "median")[0] == 0.0012


def test_repeat_one_calls_once_and_returns_the_value_untouched():
    call, made = _calls([[1.0, 2.0]])
    assert timing.repeat_median(call, 1, None, "all") == ([1.0, 2.0], 1)
    assert len(made) == 1


@pytest.mark.parametrize("quantiles,mode", [([0.5, 0.2, 0.8], "mean"), (None, "all"), ([0.5], "median")])
def test_repetition_is_skipped_for_quantiles_or_all(quantiles, mode):
    call, made = _calls([[1.0, 2.0, 3.0], 9.0])
    result, n = timing.repeat_median(call, 5, quantiles, mode)
    assert n == 1 and len(made) == 1 and result == [1.0, 2.0, 3.0]
    assert not timing.repetition_applies(quantiles, mode)


@pytest.mark.parametrize("mode", ["min", "max", "mean", "median"])
def test_repetition_applies_to_scalar_modes(mode):
    assert timing.repetition_applies(None, mode)


def test_reduce_samples_median_is_the_lower_median_like_torch_median():
    assert timing.reduce_samples([4.0, 1.0, 3.0, 2.0], return_mode="median") == 2.0
    assert timing.reduce_samples([3.0, 1.0, 2.0], return_mode="median") == 2.0


def test_reduce_samples_quantiles_interpolate_linearly_and_unwrap_a_single_one():
    times = [1.0, 2.0, 3.0, 4.0, 5.0]
    assert timing.reduce_samples(times, [0.5, 0.2, 0.8]) == pytest.approx([3.0, 1.8, 4.2])
    assert timing.reduce_samples(times, [0.25]) == pytest.approx(2.0)


def test_reduce_samples_modes():
    times = [2.0, 1.0, 6.0]
    assert timing.reduce_samples(times, return_mode="min") == 1.0
    assert timing.reduce_samples(times, return_mode="max") == 6.0
    assert timing.reduce_samples(times, return_mode="mean") == 3.0
    assert timing.reduce_samples(times, return_mode="all") == [2.0, 1.0, 6.0]
    with pytest.raises(ValueError):
        timing.reduce_samples(times, return_mode="p50")


def _cpu_bench(monkeypatch, **kwargs):
    """cpu_timer.do_bench on a fake clock: the first call lasts 25 ms (1 warmup call,
    4 timed calls at rep=100), the timed ones 4, 1, 3 and 2 ms."""
    from zlbench import cpu_timer

    durations = iter([0.025, 0.025, 0.004, 0.001, 0.003, 0.002])
    clock = [0.0]

    def fn():
        clock[0] += next(durations)

    with monkeypatch.context() as m:
        m.setattr(cpu_timer.time, "perf_counter", lambda: clock[0])
        return cpu_timer.do_bench(fn, warmup=25, rep=100, **kwargs)


def test_cpu_timer_reduces_like_reduce_samples_on_an_even_count(monkeypatch):
    samples = _cpu_bench(monkeypatch, return_mode="all")
    assert samples == pytest.approx([4.0, 1.0, 3.0, 2.0])
    for mode in ("min", "max", "mean", "median"):
        assert _cpu_bench(monkeypatch, return_mode=mode) == timing.reduce_samples(samples, None, mode)
    assert _cpu_bench(monkeypatch, return_mode="median") == pytest.approx(2.0)  # lower median
    picks = _cpu_bench(monkeypatch, quantiles=[0.5, 0.2])
    assert picks == timing.reduce_samples(samples, [0.5, 0.2])
    assert picks == pytest.approx([2.5, 1.6])  # interpolated, not nearest rank


def test_clear_grads_drops_every_grad_and_accepts_none():
    class T:
        grad = "g"

    tensors = [T(), T()]
    timing.clear_grads(tensors)
    assert [t.grad for t in tensors] == [None, None]
    timing.clear_grads(None)


def test_plan_graph_unrolls_tiny_ops_to_about_a_millisecond_a_replay():
    plan = timing.plan_graph(0.0011, 100)
    assert plan.calls_per_graph == 909
    assert plan.replays == 100  # the rep budget, in 1 ms samples
    assert timing.plan_graph(0.0011, 100, replay_ms=0.5) == timing.GraphPlan(455, 200)  # ZL_GRAPH_REPLAY_MS
    assert timing.plan_graph(0.00001, 100).calls_per_graph == timing.MAX_CALLS_PER_GRAPH


def test_a_probe_whose_first_replays_are_slow_still_plans_a_full_replay():
    # A 20-call probe of a 1.1 us kernel whose first timed replays ran slow: by the median
    # of three (as before) the plan would hold 36 calls, where the graph's fixed ~3 us launch
    # cost reads each call 8% slower; by the fastest replay it holds about a millisecond.
    replays_ms = [0.56, 0.58, 0.0251, 0.0250, 0.0252]
    assert timing.plan_graph(sorted(replays_ms[:3])[1] / 20, 100).calls_per_graph == 36
    per_call = timing.probe_per_call(replays_ms, 20)
    assert per_call == pytest.approx(0.00125)
    assert timing.plan_graph(per_call, 100).calls_per_graph == 800
    assert len(replays_ms) == timing.PROBE_REPLAYS


def test_the_probe_is_the_real_graph_where_the_plan_keeps_its_calls():
    # The probe is the real graph where the plan keeps its calls within PROBE_FIT.
    assert timing.probe_fits(1, 1) and timing.probe_fits(98, 100) and timing.probe_fits(51, 50)
    assert not timing.probe_fits(2, 1) and not timing.probe_fits(97, 100) and not timing.probe_fits(100, 800)


def test_a_failed_placement_says_what_failed():
    error = RuntimeError("Expected all tensors to be on the same device\n(more lines)")
    assert timing.placement_failure(1, error) == (
        "placement 2 failed: RuntimeError: Expected all tensors to be on the same device"
    )
    assert len(timing.placement_failure(1, RuntimeError("x" * 500))) <= len("placement 2 failed: ") + 120


def test_plan_graph_uses_one_call_for_long_ops_and_keeps_a_minimum_of_replays():
    assert timing.plan_graph(50.0, 100) == timing.GraphPlan(1, timing.MIN_REPLAYS)
    assert timing.plan_graph(2.0, 100) == timing.GraphPlan(1, 50)


def test_plan_graph_caps_the_replay_count():
    assert timing.plan_graph(0.5, 1000) == timing.GraphPlan(2, timing.MAX_REPLAYS)


def test_plan_graph_survives_zero_estimates():
    plan = timing.plan_graph(0.0, 0)
    assert plan.calls_per_graph >= 1 and plan.replays >= timing.MIN_REPLAYS


def test_warmup_needs_the_budget_and_stable_batches():
    stable = [0.010, 0.0101, 0.0100]
    assert not timing.warmup_settled(stable, elapsed_ms=5, warmup_ms=25)
    assert timing.warmup_settled(stable, elapsed_ms=30, warmup_ms=25)
    drifting = [0.050, 0.020, 0.010]
    assert not timing.warmup_settled(drifting, elapsed_ms=30, warmup_ms=25)
    assert not timing.warmup_settled([0.01, 0.01], elapsed_ms=30, warmup_ms=25)


def test_warmup_gives_up_after_the_batch_cap():
    noisy = [0.01, 0.02] * (timing.WARMUP_MAX_BATCHES // 2)
    assert timing.warmup_settled(noisy, elapsed_ms=30, warmup_ms=25)


def test_warmup_batch_size_aims_at_one_millisecond():
    assert timing.warmup_batch_size(0.001) == 1000
    assert timing.warmup_batch_size(0.25) == 4
    assert timing.warmup_batch_size(10.0) == 1


# --- warm-up and replay rules (issue: a night at real settings) ------------------------


def test_settle_ends_warmup_once_batches_agree_long_before_the_callers_budget():
    rule = timing.WarmupRule("settle", 1000)
    stable = [0.0102, 0.0100, 0.0101]
    assert rule.verdict(stable, elapsed_ms=2) is None  # not yet WARMUP_MIN_MS
    assert rule.verdict(stable, elapsed_ms=timing.WARMUP_MIN_MS) == "settled"
    assert rule.verdict(stable, 2, lambda: None) is None  # the clock cannot be told: the floor holds
    assert rule.verdict(stable, 2, lambda: True) == "settled"  # read at its working clock: no floor
    assert rule.verdict(stable, 2, lambda: False) is None
    assert rule.verdict([0.02, 0.015, 0.0101], elapsed_ms=50) is None  # still drifting
    assert rule.verdict([0.02, 0.015, 0.0101], elapsed_ms=1000) == "cap"  # the budget caps it


def test_settle_waits_for_the_device_clock_and_asks_only_when_batches_agree():
    asked = []

    def ready():
        asked.append(1)
        return len(asked) > 2

    rule = timing.WarmupRule("settle", 1000)
    assert rule.verdict([0.03, 0.02, 0.01], 50, ready) is None and not asked
    assert rule.verdict([0.01] * 3, 50, ready) is None
    assert rule.verdict([0.01] * 4, 51, ready) is None
    assert rule.verdict([0.01] * 5, 52, ready) == "settled" and len(asked) == 3


def test_budget_rule_spends_the_callers_warmup_as_zlbench_did_before():
    rule = timing.WarmupRule("budget", 1000)
    assert rule.verdict([0.01] * 3, 900) is None
    assert rule.verdict([0.01] * 3, 900, lambda: True) is None  # its minimum holds at any clock
    assert rule.verdict([0.01] * 3, 1000) == "settled"
    assert rule.verdict([0.01] * timing.WARMUP_MAX_BATCHES, 300) == "max_batches"
    assert rule.verdict([0.01, 0.02, 0.03], 4000) == "cap"
    assert timing.warmup_settled([0.01] * 3, 1000, 1000) and not timing.warmup_settled([0.01] * 3, 10, 1000)


def test_replay_rule_first_round_then_the_budget_only_when_not_pinned():
    rule = timing.ReplayRule(0.005)
    assert rule.first_round(100, 8) == timing.FIRST_ROUND_PER_PLACEMENT
    assert rule.first_round(100, 1) == timing.FIRST_ROUND_SAMPLES  # one graph
    assert rule.first_round(100, 2) == 10  # at least FIRST_ROUND_SAMPLES in all
    assert rule.first_round(5, 1) == 5  # never more than the budget holds
    assert rule.pinned(sorted([1.0, 1.001, 0.999] * 8))
    assert not rule.pinned(sorted([1.0, 1.1, 0.9] * 8))
    assert rule.next_round(100, 8, 3, sorted([1.0, 1.001, 0.999] * 8)) == 0  # pinned: done
    assert rule.next_round(10, 8, 5, sorted([1.0, 1.1, 0.9] * 8)) == 0  # the budget is spent
    off = timing.ReplayRule(0)
    assert off.first_round(100, 8) == 13 and off.pinned([5.0, 1.0])


def _spread_samples(n, width, rng):
    return sorted(1.0 + rng.uniform(-width, width) for _ in range(n))


def test_a_later_round_asks_for_what_the_ci_needs_within_the_budget():
    import random

    rng = random.Random(7)
    rule = timing.ReplayRule(0.005)
    # 24 replays (8 placements x 3) whose CI is about twice the target: about 4x the
    # samples are needed, so about 3 x 24 more (x ROUND_MARGIN), 8 placements: ~11 each.
    first = _spread_samples(24, 0.016, rng)
    spread = timing.relative_spread(first)
    assert 0.005 < spread
    more = rule.next_round(1000, 8, 3, first)
    expected = math.ceil(24 * (spread / 0.005) ** 2 * timing.ROUND_MARGIN) - 24
    assert more == -(-expected // 8) and 0 < more < 1000 // 8 - 3
    # ... never past the budget, split over the placements.
    assert rule.next_round(100, 8, 3, first) <= 13 - 3
    assert rule.next_round(100, 8, 3, sorted([1.0, 1.5, 0.5] * 8)) == 13 - 3
    # The last round spends what is left, whatever the CI says.
    assert rule.next_round(1000, 8, 3, first, rounds_done=timing.MAX_ROUNDS - 1) == 125 - 3


def test_rounds_pin_a_steady_row_well_inside_the_budget():
    """Replays drawn from one distribution: the rounds stop at the target, spending a
    part of the budget that filling it (the rule before) would have spent."""
    import random

    rng = random.Random(3)
    rule = timing.ReplayRule(0.005)
    budget, graphs = 800, 8
    done = rule.first_round(budget, graphs)
    times = [1.0 + rng.gauss(0, 0.01) for _ in range(done * graphs)]
    asked = []

    def replay(more):
        asked.append(more)
        return [1.0 + rng.gauss(0, 0.01) for _ in range(more * graphs)]

    rounds, spent = rule.later_rounds(budget, graphs, done, times, replay)
    assert rule.pinned(sorted(times)) and not spent and rounds == 1 + len(asked)
    assert rounds <= timing.MAX_ROUNDS and len(times) < budget / 2


def test_later_rounds_spend_the_budget_at_most_and_stop_when_a_round_cannot_be_completed():
    rule = timing.ReplayRule(0.005)
    wide = [1.0, 1.5, 0.5] * 8  # 8 graphs x 3 replays, never pinned
    times = list(wide)
    rounds, spent = rule.later_rounds(100, 8, 3, times, lambda more: ([1.0, 1.5, 0.5] * more * 8)[: more * 8])
    assert spent and rounds >= 2 and len(times) <= 8 * 13  # 13 replays per graph: the budget
    # A round that could not be completed (a placement failed): the samples before stand.
    times = list(wide)
    rounds, spent = rule.later_rounds(100, 8, 3, times, lambda more: None)
    assert times == wide and rounds == 1 and not spent


def test_later_rounds_end_once_the_power_cap_is_seen():
    """A cap seen while replays run sets them aside for a cap window: no round after it,
    whether it came in the first round or in a later one."""
    rule = timing.ReplayRule(0.005)
    wide = [1.0, 1.5, 0.5] * 8  # never pinned: without the cap the rounds go on to the budget
    asked = []

    def replay(more):
        asked.append(more)
        return ([1.0, 1.5, 0.5] * more * 8)[: more * 8]

    times = list(wide)
    rounds, spent = rule.later_rounds(100, 8, 3, times, replay, halt=lambda: True)
    assert (rounds, spent, asked, times) == (1, False, [], wide)
    seen = []  # the cap read during the second round's replays
    rounds, spent = rule.later_rounds(100, 8, 3, list(wide), lambda more: seen.append(1) or replay(more),
                                      halt=lambda: bool(seen))
    assert rounds == 2 and len(asked) == 1


def test_interleaved_placements_are_shared_out_over_the_graphs():
    from zlbench.plugins.graph_timer import interleaved_sets

    assert interleaved_sets(8) == [[0, 2, 4, 6], [1, 3, 5, 7]]  # the inputs' own place in the first
    assert interleaved_sets(3) == [[0, 2], [1]]
    assert interleaved_sets(1) == [[0]] and interleaved_sets(8, graphs=1) == [list(range(8))]


def test_interleaving_needs_every_copy_in_l2_and_long_segments():
    from zlbench.plugins.graph_timer import interleave
    from zlbench.plugins.placement import Placements

    class T:
        def __init__(self, nbytes):
            self.data = self
            self._n = nbytes

        def untyped_storage(self):
            return self

        def nbytes(self):
            return self._n

    small = Placements([T(8 << 10)], 8)
    assert interleave(small, 650, 50 << 20)
    assert not interleave(small, 40, 50 << 20)  # segments of 5 calls: too short
    assert not interleave(small, 650, None)  # L2 unknown
    assert not interleave(Placements([T(4 << 20)], 8), 650, 50 << 20)  # 32 MB of copies
    assert not interleave(Placements([T(8 << 10)], 1), 650, 50 << 20)


class _Device:
    """torch's face as KeptGraphs sees it: ``cuda.mem_get_info()`` of a 100-byte device."""

    def __init__(self, free):
        self.cuda = self
        self.free = free

    def mem_get_info(self):
        return self.free, 100


def test_graphs_are_kept_for_later_rounds_only_while_the_device_has_room():
    from zlbench.plugins.graph_timer import LOW_MEMORY_SHARE, KeptGraphs

    device = _Device(80)
    kept = KeptGraphs(device)
    kept.keep(0, "g0")
    kept.keep(1, "g1")
    assert kept.holds(2) and not kept.holds(3)
    device.free = int(LOW_MEMORY_SHARE * 100) - 1  # the next graph leaves too little free
    kept.keep(2, "g2")
    assert not kept.holds(1) and kept.graphs == {}  # all go: later rounds capture again
    device.free = 80
    kept.keep(3, "g3")
    assert kept.graphs == {}  # and none is kept after that within this timing


def test_the_warm_up_waits_for_a_ramping_clock_not_for_one_the_work_holds_down():
    ref = 1980.0
    assert timing.working_clock({}, ref) is None  # no clocks to read: cannot tell
    assert timing.working_clock({"sm_mhz": 1500}, None) is None  # no reference yet
    assert timing.working_clock({"sm_mhz": 1900, "throttle": []}, ref) is True  # within 5%
    assert timing.working_clock({"sm_mhz": 1500, "throttle": []}, ref) is False  # still ramping
    # At the power cap this work reaches (BLAS on an H200), or held down by heat: more
    # warm-up does not bring the clock back; the row carries DEVICE_THROTTLED instead.
    assert timing.working_clock({"sm_mhz": 1500, "throttle": ["sw_power_cap"]}, ref) is True
    assert timing.working_clock({"sm_mhz": 1500, "throttle": ["hw_thermal"]}, ref) is True


def test_the_row_recorder_asks_the_same_rule():
    from zlbench.plugins.direct_timer import RowRecorder

    class State:
        def __init__(self, samples):
            self.samples = list(samples)

        def available(self):
            return True

        def sample(self, ending=True):
            return self.samples.pop(0)

    recorder = RowRecorder(None)
    recorder.reference_mhz = 1980.0
    recorder._state = State(
        [{"sm_mhz": 1500, "throttle": []}, {"sm_mhz": 1500, "throttle": ["sw_power_cap"]}]
    )
    assert recorder.device_ready() is False and recorder.before is None
    assert recorder.device_ready() is True and recorder.before["throttle"] == ["sw_power_cap"]
    recorder.reference_mhz, recorder.before = None, None  # the run's first timing
    recorder._state = State([{"sm_mhz": 1500, "throttle": []}])
    assert recorder.device_ready() is None and recorder.before == {"sm_mhz": 1500, "throttle": []}


def test_a_graph_is_kept_only_if_as_much_again_for_each_placement_to_come_still_fits():
    from zlbench.plugins.graph_timer import KeptGraphs

    device = _Device(90)
    kept = KeptGraphs(device)
    kept.expect(4)
    kept.keep(0, "g0")  # nothing taken since the baseline
    device.free = 70  # placement 1's copy and graph took 20: two more would leave 30
    kept.keep(1, "g1")
    assert kept.holds(2)
    device.free = 45  # placement 2 took 25: one more would leave 20, under a quarter
    kept.keep(2, "g2")
    assert kept.graphs == {} and not kept.on


def test_a_row_over_placements_is_the_trimmed_mean_of_their_medians():
    # Every placement counts: five at 1.0 and three at 1.06 read 1.0225 (the median of
    # the eight would read 1.0, as if the three were not there).
    assert timing.over_placements([1.0] * 5 + [1.06] * 3) == pytest.approx((4 * 1.0 + 2 * 1.06) / 6)
    # One placement of eight 31% off (cumsum_ 4096x4096 on an H200) is left out, as is
    # the one furthest off at the other end.
    one_far = [1.0, 1.001, 0.999, 1.0, 1.31, 1.0, 1.0, 1.0]
    assert timing.over_placements(one_far) == pytest.approx(1.0 + 0.001 / 6)
    # Fewer than eight are averaged whole: two interleaved graphs read their mean, and four
    # placements in two clusters (div_tensor fp32 2^30 on an H200) move by a quarter of
    # their distance for each one that changes sides, not by the whole of it.
    assert timing.over_placements([1.0, 1.1]) == pytest.approx(1.05)
    assert timing.over_placements([3.37, 3.37, 3.37, 3.04]) == pytest.approx(3.2875)
    assert timing.over_placements([3.37, 3.37, 3.04, 3.04]) == pytest.approx(3.205)
    assert timing.over_placements([2.0]) == 2.0 and timing.over_placements([]) is None


def test_placement_spread_widens_for_clusters_and_stays_narrow_for_one_far_placement():
    # Two clusters of four 6% apart (torch's median on an H200): about half their distance.
    two_clusters = [1.0, 1.06] * 4
    sd = statistics.stdev([1.0] * 4 + [1.06] * 4)
    assert timing.placement_spread(two_clusters) == pytest.approx(1.96 * sd / (0.75 * 8**0.5) / 1.03)
    assert 0.025 < timing.placement_spread(two_clusters) < 0.03
    # One placement of eight 31% off: the trim leaves it out, and its spread too.
    one_far = [1.0, 1.001, 0.999, 1.0, 1.31, 1.0, 1.0, 1.0]
    assert timing.placement_spread(one_far) < 0.001
    # Two placements (two interleaved graphs), three: 1.96 standard errors of their mean;
    # one or none says nothing.
    assert timing.placement_spread([1.0, 1.1]) == pytest.approx(1.96 * 0.1 / 2 / 1.05)
    assert timing.placement_spread([1.0, 1.1, 1.2]) == pytest.approx(1.96 * 0.1 / 3**0.5 / 1.1)
    assert timing.placement_spread([1.0]) is None and timing.placement_spread([]) is None
    assert timing.placement_spread([1.0] * 8) == 0.0


def test_placement_spread_covers_the_row_as_often_as_it_says():
    """Placements drawn from one law: the interval around each draw's trimmed mean holds
    the law's centre about 95% of the time (the normal interval of a trimmed mean of
    eight runs a little short of its nominal share: at least 88%)."""
    import random

    rng = random.Random(7)
    hits = 0
    for _ in range(2000):
        medians = [1.0 + rng.gauss(0, 0.01) for _ in range(8)]
        mid, half = timing.over_placements(medians), timing.placement_spread(medians)
        hits += abs(mid - 1.0) <= half * mid
    assert 0.88 <= hits / 2000 <= 0.99


def test_measured_from_gives_the_median_over_placements_where_there_are_two_or_more():
    times = [1.0, 1.0, 1.0, 1.06, 1.06, 1.06]
    by_placement = [1.0, 1.06]
    m = timing.measured_from(times, None, "median", "noise", by_placement)
    assert m.value == m.median_ms == pytest.approx(1.03)
    assert m.spread == timing.row_spread(sorted(times), by_placement)
    # Quantiles and the other modes reduce the pooled times, as triton does.
    assert timing.measured_from(times, None, "min", "noise", by_placement).value == 1.0
    assert timing.measured_from(times, [0.2], "median", "noise", by_placement).value == 1.0
    assert timing.measured_from(times, None, "mean", "noise", by_placement).median_ms == pytest.approx(1.03)
    # One placement: the pooled median, as before.
    one = timing.measured_from(times, None, "median", "noise", [1.03])
    assert one.value == 1.0 and one.median_ms == pytest.approx(1.03)


def test_a_row_spread_is_its_placements_where_they_differ_more_than_its_replays():
    replays = sorted([1.0, 1.0005, 0.9995] * 8)
    assert timing.row_spread(replays) == timing.relative_spread(replays)
    assert timing.row_spread(replays, [1.0, 1.06] * 4) == timing.placement_spread([1.0, 1.06] * 4)
    assert timing.row_spread(replays, [1.0] * 8) == timing.relative_spread(replays)


def test_rounds_stop_once_the_placements_keep_the_row_from_being_pinned():
    """Two clusters of placements 6% apart, tight replays within each: the pooled CI
    wants more rounds, but more replays at the same placements cannot narrow the row."""
    rule = timing.ReplayRule(0.005)
    groups = {i: [1.0 + 0.06 * (i % 2) + 1e-4 * j for j in range(3)] for i in range(8)}
    times = [t for i in range(8) for t in groups[i]]
    asked = []

    def replay(more):
        asked.append(more)
        return [1.0 + 0.06 * (i % 2) for i in range(8) for _ in range(more)]

    def by_placement():
        return [groups[i] for i in range(8)]

    assert not rule.pinned(sorted(times)) and rule.next_round(800, 8, 3, sorted(times)) > 0
    assert timing.placements_dominate(by_placement(), rule.target)
    rounds, spent = rule.later_rounds(800, 8, 3, list(times), replay, by_placement)
    assert rounds == 1 and not spent and asked == []
    # Without groups to compare (a single graph) the rounds go on.
    rounds, _ = rule.later_rounds(800, 8, 3, list(times), replay)
    assert rounds > 1 and asked


def test_placements_do_not_dominate_plain_replay_noise():
    """No layout effect, replays drawn from one distribution (a first round: 8 placements
    x 3 replays, noisy enough that the pooled median is not pinned): the placements'
    scatter is what their replays' gives, so the rounds go on in 95% of trials at least."""
    import random

    rng = random.Random(11)
    hits = sum(
        timing.placements_dominate([[1.0 + rng.gauss(0, 0.02) for _ in range(3)] for _ in range(8)], 0.005)
        for _ in range(400)
    )
    assert hits <= 20
    # One placement 30% off among eight, tight replays: the median holds, nothing dominates.
    groups = [[1.0, 1.0001, 0.9999]] * 7 + [[1.3, 1.3001, 1.2999]]
    assert not timing.placements_dominate(groups, 0.005)


def _fake_cuda(log: list):
    """A torch whose CUDA events and streams write what they were asked to ``log``, in order."""
    import contextlib
    import types

    class Event:
        def __init__(self, enable_timing=True):
            pass

        def record(self):
            log.append("record")

        def synchronize(self):
            log.append("wait event")

        def elapsed_time(self, end):
            return 1.0

    cuda = types.SimpleNamespace(Event=Event, stream=lambda s: contextlib.nullcontext())
    return types.SimpleNamespace(cuda=cuda)


def test_timed_replays_queue_behind_the_upload_with_no_host_wait_between():
    # A replay queued on an idle device times its own launch: the first timed replay must
    # follow the untimed upload on the stream, the host waiting only for the last one.
    from zlbench.plugins.graph_timer import time_replays

    log: list = []

    class Graph:
        def replay(self):
            log.append("replay")

    class Stream:
        def synchronize(self):
            log.append("wait stream")

    times = time_replays(_fake_cuda(log), Graph(), 3, Stream())
    assert times == [1.0, 1.0, 1.0]
    assert log[:2] == ["replay", "record"]  # upload, then the first timed replay's start
    assert "wait stream" not in log
    assert log.count("replay") == 4 and log[-1] == "wait event"

"""Per-row spread, adaptive stopping, device-state verdicts and A/B verdicts: pure logic."""

import json
import os
import random

import pytest

from zlbench import rowstats, rundir, timing
from zlbench.backends.nvml import clocks_locked, reason_names
from zlbench.markers import parse_marker
from zlbench.summary.verdict import FASTER, SAME, SLOWER, UNKNOWN, verdict


def test_median_ci_is_order_statistics_around_the_middle():
    data = list(range(100))
    lo, hi = timing.median_ci(data)
    assert (lo, hi) == (39, 60)          # ranks 40 and 61 (1-based) of 100
    assert timing.median_ci([5.0]) == (5.0, 5.0)


def test_relative_spread_shrinks_with_samples_and_ignores_one_outlier():
    rng = random.Random(1)
    few = sorted(rng.gauss(1.0, 0.02) for _ in range(20))
    many = sorted(rng.gauss(1.0, 0.02) for _ in range(2000))
    assert timing.relative_spread(many) < timing.relative_spread(few)
    # 1.2533 * sigma / sqrt(n) * 1.96 for the median of a normal sample
    assert timing.relative_spread(many) == pytest.approx(1.2533 * 0.02 / 2000 ** 0.5 * 1.96, rel=0.3)
    with_outlier = sorted(many[:-1] + [1000.0])
    assert timing.relative_spread(with_outlier) == pytest.approx(timing.relative_spread(many), rel=0.05)
    assert timing.relative_spread([1.0]) is None


def test_stop_rule_waits_for_samples_and_a_tenth_of_the_budget_then_stops_at_the_noise_target():
    rule = timing.StopRule.for_call(0.005, rep_ms=100)
    # A tenth of the caller's budget at least, ten times it at most; the budget itself
    # is what the record names.
    assert (rule.min_ms, rule.max_ms, rule.budget) == (10, 1000, 100)
    tight = sorted([1.0, 1.001, 0.999] * 10)
    assert rule.verdict(tight[:9], 500) is None            # too few samples
    assert rule.verdict(tight, 5) is None                  # the minimum not spent
    assert rule.verdict(tight, 15) == "noise"              # pinned: the budget is not waited for
    loose = sorted([1.0, 2.0, 0.5] * 10)
    assert rule.verdict(loose, 150) is None
    assert rule.verdict(loose, 1000) == "time_cap"
    assert timing.StopRule(0.005, 7, 70).budget == 7       # no budget given: the minimum
    assert timing.StopRule(0.005, 0, 10, max_samples=5).verdict(loose, 1) == "max_samples"


def test_knob_texts_parse_or_name_the_variable():
    # The benchmark process reads them through the knobs table (DirectSettings.from_env).
    from zlbench.plugins.direct_timer import DirectSettings

    def noise(text):
        return DirectSettings.from_env({} if text is None else {"ZL_DIRECT_NOISE": text}).noise

    def mode(text):
        return DirectSettings.from_env({"ZL_DIRECT_TIMER": text}).mode

    assert noise(None) == 0.005 and noise("2") == 0.02
    assert mode("") == "kernels" and mode("percall") == "percall" and mode("do_bench") == "do_bench"
    with pytest.raises(ValueError, match="ZL_DIRECT_NOISE"):
        noise("0")
    with pytest.raises(ValueError, match="ZL_DIRECT_TIMER"):
        mode("graph")


def test_measured_from_reports_the_median_and_what_the_caller_asked():
    m = timing.measured_from([3.0, 1.0, 2.0], None, "mean", "noise")
    assert (m.value, m.median_ms, m.samples, m.stop) == (2.0, 2.0, 3, "noise")
    assert m.spread == pytest.approx(0.5)


def test_throttle_reason_names_vendor_reasons_and_clock_drops():
    full = {"sm_mhz": 1980, "throttle": []}
    assert timing.throttle_reason(full, full, 1980) is None
    assert timing.throttle_reason(full, {"sm_mhz": 1700, "throttle": []}, 1980) == "sm_clock_drop"
    # The power cap names a row only with the clock down (or no clock to read): flagged
    # at a clock 1% below the run's highest, the H200 timed it alike.
    assert timing.throttle_reason(full, {"sm_mhz": 1960, "throttle": ["sw_power_cap"]}, 1980) is None
    assert timing.throttle_reason(full, {"sm_mhz": 1700, "throttle": ["sw_power_cap"]},
                                  1980) == "sw_power_cap,sm_clock_drop"
    assert timing.throttle_reason({}, {"throttle": ["sw_power_cap"]}, None) == "sw_power_cap"
    assert timing.throttle_reason(full, {"sm_mhz": 1960, "throttle": ["hw_thermal"]}, 1980) == "hw_thermal"
    assert timing.throttle_reason(full, {"sm_mhz": 1960, "throttle": ["sw_power_cap", "hw_thermal"]},
                                  1980) == "hw_thermal"
    assert timing.throttle_reason({}, {}, None) is None          # nothing readable: no claim
    # The CPU's clock: the reference loop's speed against the run's median reading.
    assert timing.throttle_reason({"host_speed": 20.0}, {"host_speed": 17.5}, None, 20.0) == "host_slow"
    assert timing.throttle_reason({"host_speed": 18.5}, {"host_speed": 20.0}, None, 20.0) is None
    # Host samples: the timing process ran for 60% of the wall time.
    host = ({"cpu_s": 1.0, "wall_s": 10.0}, {"cpu_s": 1.6, "wall_s": 11.0})
    assert timing.throttle_reason(*host, None) == "cpu_contention"
    assert timing.throttle_reason({"cpu_s": 1.0, "wall_s": 10.0}, {"cpu_s": 1.98, "wall_s": 11.0},
                                  None) is None


def test_nvml_reason_bits_and_lock_evidence():
    assert reason_names(0x1 | 0x2 | 0x4 | 0x40) == ["sw_power_cap", "hw_thermal"]
    assert clocks_locked(1980, 1980, (345, 1980)) is False
    assert clocks_locked(1755, 1980, None) is True
    assert clocks_locked(None, None, (1755, 1755)) is True
    assert clocks_locked(None, None, None) == "unknown"


@pytest.mark.parametrize("a_ms,a_s,b_ms,b_s,status", [
    (1.0, 0.002, 1.0, 0.002, SAME),
    (1.0, 0.002, 1.05, 0.002, SLOWER),      # 5% slower: beyond 2% + 0.28%
    (1.0, 0.002, 0.95, 0.002, FASTER),
    (1.0, 0.03, 1.05, 0.03, SAME),          # the rows' own noise covers 5%
    (1.0, 0.0, 1.019, 0.0, SAME),           # inside the floor
    (1.0, None, 1.05, 0.002, UNKNOWN),
    (1.0, 0.002, None, 0.002, UNKNOWN),
])
def test_verdict_rule(a_ms, a_s, b_ms, b_s, status):
    assert verdict(a_ms, a_s, b_ms, b_s, floor=0.02).status == status


def test_verdict_threshold_is_the_floor_plus_the_combined_spread():
    v = verdict(1.0, 0.03, 1.2, 0.04, floor=0.02)
    assert v.threshold == pytest.approx(0.07) and v.change == pytest.approx(0.2)
    same = verdict(1.0, 0.001, 1.5, 0.001, same_run=True)
    assert same.status == UNKNOWN and "same run" in same.why


def test_row_stats_round_trip_and_a_torn_line_is_reported(tmp_path):
    rec = {"op": "abs", "dtype": "torch.float16", "shape": "[torch.Size([64])]", "side": "gems",
           "samples": 12, "spread": 0.001}
    rowstats.append(tmp_path, rec)
    with open(tmp_path / rundir.ROW_STATS, "a") as f:
        f.write('{"op": "ab')
    records, problems = rowstats.read(tmp_path)
    assert records == [rec] and len(problems) == 1
    assert list(rowstats.by_key(records)) == [("abs", "torch.float16", "[torch.Size([64])]", "gems")]
    # The line carries the record's format; the reader hands the record back without it.
    assert json.loads((tmp_path / rowstats.ROW_STATS).read_text().splitlines()[0]) == {"format": 1, **rec}


# --- summary --ab end to end over run dirs carrying row_stats.jsonl -------------------

from summary_logwriter import identity, op_log, write_run  # noqa: E402

from conftest import zlbench  # noqa: E402

SHAPES = ["[torch.Size([64, 64])]", "[torch.Size([4096, 4096])]"]


THROTTLED = ('\nDEVICE_THROTTLED op=abs dtype=torch.float16 shape="[torch.Size([64, 64])]" '
             'side=gems why=sw_power_cap sm_mhz=1980->1710\n')


def _run(root, latency, spread, prefix=""):
    """A batch-like dir: abs and sum, float16, two shapes; row_stats for both sides."""
    for op in ("abs", "sum"):
        log = op_log(op, ["torch.float16"], SHAPES, latency, prefix if op == "abs" else "")
        run_dir = write_run(root / op, log, identity())
        for shape in SHAPES:
            for side in ("torch", "gems"):
                rowstats.append(run_dir, {"op": op, "dtype": "torch.float16", "shape": shape,
                                          "side": side, "samples": 500,
                                          "spread": spread(op, shape)})
    return root


def test_ab_gives_verdicts_counts_them_per_operator_and_lists_real_changes_first(tmp_path):
    a = _run(tmp_path / "a", lambda op, d, s: 0.1, lambda op, s: 0.002)
    # B: abs 5% slower on both shapes; sum unchanged; one sum row 3% faster but noisy.
    b = _run(tmp_path / "b", lambda op, d, s: {"abs": 0.105}.get(op, 0.097 if "4096" in s else 0.1),
             lambda op, s: 0.03 if (op, "4096" in s) == ("sum", True) else 0.002, THROTTLED)
    proc = zlbench("summary", "--ab", a, b, "--format", "json", check=True)
    doc = json.loads(proc.stdout)
    statuses = [(p["op"], p["shape"], p["verdict"]) for p in doc["pairs"]]
    assert statuses[0] == ("abs", SHAPES[1], "SLOWER")                # real changes first
    # The row B measured while the GPU's power cap held it back is no verdict: UNKNOWN,
    # with the reason, counted apart.
    assert statuses[1] == ("abs", SHAPES[0], "UNKNOWN")
    throttled = doc["pairs"][1]
    assert throttled["throttled"] == "B" and throttled["measured_throttled"] is True
    assert throttled["why"] == "measured throttled (B sw_power_cap)"
    assert sorted(s[::2] for s in statuses[2:]) == [("sum", "SAME"), ("sum", "SAME")]
    noisy = next(p for p in doc["pairs"] if p["op"] == "sum" and "4096" in p["shape"])
    assert noisy["threshold"] == pytest.approx(0.02 + (0.002 ** 2 + 0.03 ** 2) ** 0.5)
    by_op = {r["name"]: r for r in doc["by_op"]}
    assert (by_op["abs"]["slower"], by_op["abs"]["unknown"], by_op["abs"]["throttled"]) == (1, 1, 1)
    assert (by_op["sum"]["same"], by_op["sum"]["slower"], by_op["sum"]["faster"]) == (2, 0, 0)
    text = zlbench("summary", "--ab", a, b, check=True).stdout
    assert "Verdicts: A/A noise floor 2.0% (source: the default" in text and "1 slower, 1 throttled" in text
    assert "Rows: 1 SLOWER, 0 FASTER, 2 SAME, 1 UNKNOWN (measured throttled), 0 UNKNOWN" in text
    assert "measured throttled (B sw_power_cap)" in text
    # With a tighter floor the noisy row's 3% is still inside its own spread (0.5% +
    # 3.0%), while the quiet unchanged row stays SAME too.
    tight = json.loads(zlbench("summary", "--ab", a, b, "--format", "json", "--noise-floor",
                               "0.5", check=True).stdout)
    assert sorted(p["verdict"] for p in tight["pairs"]) == ["SAME", "SAME", "SLOWER", "UNKNOWN"]


def test_a_row_whose_kernels_ran_other_autotuned_configs_says_so(tmp_path):
    kernel = "flag_gems.ops.layernorm.layer_norm_persistent_kernel [16,2048]"
    picks = {"a": '{"num_warps":8}', "b": '{"num_warps":16}'}
    dirs = {}
    for name, pick in picks.items():
        log = op_log("layer_norm", ["torch.float16"], SHAPES, lambda op, d, s: 0.1 if name == "a" else 0.107)
        run_dir = write_run(tmp_path / name / "layer_norm", log, identity())
        for shape in SHAPES:
            tuned = {kernel: pick if shape == SHAPES[0] else '{"num_warps":4}'}
            for side in ("torch", "gems"):
                rowstats.append(run_dir, {"op": "layer_norm", "dtype": "torch.float16", "shape": shape,
                                          "side": side, "samples": 100, "spread": 0.001,
                                          **({"autotune": tuned} if side == "gems" else {})})
        dirs[name] = tmp_path / name
    doc = json.loads(zlbench("summary", "--ab", dirs["a"], dirs["b"], "--format", "json", check=True).stdout)
    changes = {p["shape"]: p["autotune_changes"] for p in doc["pairs"]}
    assert changes == {SHAPES[0]: [f'{kernel}: {picks["a"]} -> {picks["b"]}'], SHAPES[1]: []}
    text = zlbench("summary", "--ab", dirs["a"], dirs["b"], check=True).stdout
    assert text.count("autotune picked other configs") == 1


def test_ab_of_a_run_with_itself_gives_no_confident_same(tmp_path):
    a = _run(tmp_path / "a", lambda op, d, s: 0.1, lambda op, s: 0.002)
    text = zlbench("summary", "--ab", a, a, check=True).stdout
    assert "A and B are the same run: no verdict can be given (every row UNKNOWN)." in text
    assert "| SAME " not in text and "4 unknown" in text


def test_the_orchestrator_never_loads_nvml_or_torch():
    import subprocess
    import sys

    code = ("import sys, zlbench.cli, zlbench.backends, zlbench.summary, zlbench.run, "
            "zlbench.rowstats, zlbench.summary.verdict; "
            "from zlbench.backends import BACKENDS; BACKENDS['cuda'].device_state; "
            "print(sorted(m for m in ('torch', 'pynvml', 'triton') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


class _NoDevice:
    """A device module whose calls leave no trace: the profiler sees only the host."""

    @staticmethod
    def synchronize():
        pass


def test_a_call_the_tracer_does_not_see_is_timed_by_the_event_clock(capsys):
    pytest.importorskip("torch")
    from zlbench.plugins import direct_timer, percall
    from zlbench.plugins.row_context import RowContext

    timer = direct_timer.DirectTimer(
        direct_timer.DirectSettings("kernels", 1, 0.05), direct_timer.RowRecorder("cpu"), RowContext())
    # The CPU activity traces the marked ranges but no device work under them.
    timer.clock = percall.TracedClock(_NoDevice(), "CPU", percall.HostClock())
    with pytest.raises(percall.NothingTraced):
        timer.clock.run(lambda: sum(range(100)), 3, None)
    measured, clock, untraced = timer._percall(lambda: sum(range(100)), {"warmup": 1, "rep": 5})
    assert clock == "host" and measured.samples >= 10 and measured.median_ms > 0
    assert "calls traced, device time 0 ms" in timer.untraced == str(untraced)
    # Not silently: the run's output says which clock timed the row, and why.
    capsys.readouterr()
    timer.measure(lambda fn, warmup=1, rep=5: 0.0, lambda: sum(range(100)), (), {})
    out = capsys.readouterr().out
    # Outside every row: a plain line (a marker naming no row would attach to all of them).
    assert "zlbench direct timer: timed by host: 1 of 1 calls traced, device time 0 ms" in out
    assert "DIRECT_TIMER_UNTRACED" not in out
    # For a row: the marker, with what kind of miss it was.
    from zlbench.plugins.row_context import TimedRow
    row = TimedRow("transpose", "torch.float16", "[64, 64]", "gems")
    timer._say_untraced(row, "host", percall.NothingTraced("1 of 1 calls traced, device time 0 ms"))
    marker = parse_marker(capsys.readouterr().out.strip())
    assert (marker.name, marker.get("side"), marker.get("clock"), marker.get("kind")) == (
        "DIRECT_TIMER_UNTRACED", "gems", "host", "no_device_work")


def test_a_pair_of_host_time_is_same_without_device_work_and_unknown_on_one_side():
    from zlbench.markers import DIRECT_TIMER_UNTRACED, Marker
    from zlbench.runlog import Row
    from zlbench.summary.ab import PairedRow, judge

    def row(ms, untraced_side=None):
        r = Row("transpose", "torch.float16", "kernel", "core", "[256, 512]", "SUCCESS", 1)
        r.gems_ms, r.gems_spread, r.gems_clock = ms, 0.002, "torch.cuda.Event"
        if untraced_side:
            r.markers.append(Marker(DIRECT_TIMER_UNTRACED, {"op": "transpose", "side": untraced_side,
                                                            "kind": kind, "why": "1 of 1 calls traced, device time 0 ms"}))
        return r

    kind = "no_device_work"

    # An A/A on the H200 read a view's host time 78% apart: with no device work in either
    # side there is no device time to tell apart, and the verdict says so.
    moved = judge(PairedRow(row(0.010, "gems"), row(0.0178, "gems"), 0.0, True), 0.02, False)
    assert moved.status == SAME and "no device work in A or B" in moved.why and moved.threshold is None
    # ... whatever the device's clock did meanwhile: there was no device time to slow.
    hot = row(0.0178, "gems")
    hot.markers.append(Marker("DEVICE_THROTTLED", {"side": "gems", "why": "sm_clock_drop"}))
    assert judge(PairedRow(row(0.010, "gems"), hot, 0.0, True), 0.02, False).status == SAME
    # Host time on one side only: no verdict, and it says why.
    one = judge(PairedRow(row(0.010, "gems"), row(0.0178), 0.0, True), 0.02, False)
    assert one.status == UNKNOWN and "no device work traced" in one.why and "device time 0 ms" in one.why
    # Only the gems side's timing decides; the torch side's marker leaves the verdict alone.
    assert judge(PairedRow(row(0.010, "torch"), row(0.0178, "torch"), 0.0, True), 0.02, False).status == SLOWER
    assert judge(PairedRow(row(0.010), row(0.0178), 0.0, True), 0.02, False).status == SLOWER
    # Device work outside the calls' ranges (another thread's) is device work: it stands.
    kind = "outside_ranges"
    assert judge(PairedRow(row(0.010, "gems"), row(0.0178, "gems"), 0.0, True), 0.02, False).status == SLOWER


def test_the_kernels_clock_is_chosen_only_where_the_backend_has_a_tracer():
    from zlbench.backends import BACKENDS
    from zlbench.plugins.percall import HostClock, choose_clock

    assert BACKENDS["cuda"].profiler_activity == "CUDA" and BACKENDS["cpu"].profiler_activity is None
    clock, note = choose_clock(None, "CUDA")
    assert isinstance(clock, HostClock) and note is None


def test_a_pair_timed_by_different_clocks_gets_no_verdict():
    from zlbench.summary.ab import PairedRow, judge
    from zlbench.runlog import Row

    def row(ms, clock):
        r = Row("nonzero", "torch.float16", "kernel", "core", "[1024]", "SUCCESS", 1)
        r.gems_ms, r.gems_spread, r.gems_clock = ms, 0.002, clock
        return r

    traced = "torch.profiler.CUDA"
    assert judge(PairedRow(row(0.0105, traced), row(0.0400, traced), 0.0, True), 0.02, False).status == SLOWER
    mixed = judge(PairedRow(row(0.0105, traced), row(0.0400, "torch.cuda.Event"), 0.0, True), 0.02, False)
    assert mixed.status == UNKNOWN and "different clocks" in mixed.why and mixed.change > 2
    # Graph-timed rows record no clock: judged as before.
    assert judge(PairedRow(row(1.0, None), row(1.0, None), 0.0, False), 0.02, False).status == SAME


class _TraceEvent:
    def __init__(self, name, device_type, device_us, annotation=False):
        self.name, self.device_type = name, device_type
        self.device_time_total, self.is_user_annotation = device_us, annotation


def _fake_trace(monkeypatch, per_call, extra=()):
    """torch.profiler as the traced clock sees it on a device, without one: for each call
    a host-side range with its device total, the range's projection onto the device
    timeline (same name), the kernel itself; plus ``extra`` device events."""
    import contextlib

    import torch.profiler
    from torch.autograd import DeviceType

    calls = []

    class Profile:
        def __init__(self, activities):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def events(self):
            out = []
            for us in calls:
                out += [_TraceEvent("zlbench.call", DeviceType.CPU, us),
                        _TraceEvent("zlbench.call", DeviceType.CUDA, us * 1.5, annotation=True),
                        _TraceEvent("kernel", DeviceType.CUDA, us)]
            return out + [_TraceEvent("kernel", DeviceType.CUDA, us) for us in extra]

    @contextlib.contextmanager
    def record_function(name):
        calls.append(per_call)
        yield

    monkeypatch.setattr(torch.profiler, "profile", Profile)
    monkeypatch.setattr(torch.profiler, "record_function", record_function)
    return calls


def test_the_traced_clock_reads_each_calls_host_side_range_in_ms(monkeypatch):
    pytest.importorskip("torch")
    from zlbench.plugins import percall

    monkeypatch.setenv("TEARDOWN_CUPTI", "")       # undone after the test, whatever the clock sets
    monkeypatch.delenv("TEARDOWN_CUPTI")
    _fake_trace(monkeypatch, 10.5)
    clock = percall.TracedClock(_NoDevice(), "CPU", percall.HostClock())
    assert clock.run(lambda: None, 4, None) == [0.0105] * 4   # us -> ms, projections left out
    # CUPTI stays up between batches (re-initialising it after graph capture crashes).
    assert os.environ["TEARDOWN_CUPTI"] == "0"


def test_device_time_outside_every_range_sends_the_timing_to_events(monkeypatch):
    pytest.importorskip("torch")
    from zlbench.plugins import percall

    # A backward launched from autograd's own thread: in the trace, in no call's range.
    _fake_trace(monkeypatch, 2.0, extra=[40.0])
    clock = percall.TracedClock(_NoDevice(), "CPU", percall.HostClock())
    with pytest.raises(percall.NothingTraced, match="outside the calls' ranges") as outside:
        clock.run(lambda: None, 3, None)
    assert outside.value.kind == "outside_ranges"  # device work: summary keeps its verdict
    _fake_trace(monkeypatch, 2.0, extra=[0.1])   # within the 10% allowance: kept
    assert clock.run(lambda: None, 3, None) == [0.002] * 3


class _RawEvent:
    """One raw kineto event as ``device_ms_per_range`` reads it."""

    def __init__(self, name, device, corr, linked, start, end, thread=1, annotation=False, activity=None):
        from torch.autograd import DeviceType

        if activity is None:
            activity = ("gpu_user_annotation" if device else "user_annotation") if annotation else \
                ("kernel" if device else "cpu_op")
        self._v = dict(name=name, device_type=DeviceType.CUDA if device else DeviceType.CPU,
                       correlation_id=corr, linked_correlation_id=linked, start_ns=start, end_ns=end,
                       duration_ns=end - start, start_thread_id=thread, end_thread_id=thread,
                       is_user_annotation=annotation, is_async=False, activity_type=activity)

    missing: tuple = ()

    def __getattr__(self, name):
        if name in self.missing or name not in self._v:
            raise AttributeError(name)
        return lambda: self._v[name]


def test_the_raw_trace_reader_puts_each_kernel_in_the_range_that_launched_it():
    pytest.importorskip("torch")
    from zlbench.plugins.percall import TRACE_MARK, device_ms_per_range

    events = [
        # call 1: a kernel linked to the range itself, a copy launched by an op in it
        _RawEvent(TRACE_MARK, False, 1, 0, 0, 1000, annotation=True),
        _RawEvent("aten::copy_", False, 2, 0, 200, 400),
        _RawEvent("cudaLaunchKernel", False, 3, 1, 100, 150, activity="cuda_runtime"),  # not a launcher
        _RawEvent("kernel", True, 0, 1, 5000, 7000),
        _RawEvent("Memcpy DtoD", True, 0, 2, 7000, 7500),
        _RawEvent(TRACE_MARK, True, 0, 1, 5000, 9000, annotation=True),  # its projection: skipped
        # call 2, listed first in the trace: ordering comes from the ranges' starts
        _RawEvent(TRACE_MARK, False, 10, 0, 2000, 3000, annotation=True),
        _RawEvent("kernel", True, 0, 10, 9000, 12000),
        # another thread's op inside call 2's time span (autograd's device thread)
        _RawEvent("aten::mul", False, 20, 0, 2100, 2200, thread=2),
        _RawEvent("mul_kernel", True, 0, 20, 12000, 12400),
        # a runtime call outside every op (the closing synchronize) numbered like call 2's
        # range by CUPTI's own count: it must not take call 2's kernel away
        _RawEvent("cudaDeviceSynchronize", False, 10, 0, 20000, 21000, activity="cuda_runtime"),
    ]
    times, total = device_ms_per_range(events[6:] + events[:6])   # trace order is not call order
    assert times == [0.0025, 0.003]              # ns -> ms; 2,000 + 500 ns, then 3,000 ns
    assert total == pytest.approx(0.0059)        # the other thread's kernel counts only here
    # A torch whose events lack is_async and is_user_annotation reads the same, by activity;
    # one without activity_type (torch 2.11) too, in either order: the closing synchronize
    # numbered like call 2's range lands in no range, so the range keeps its kernel.
    for missing in (("is_async", "is_user_annotation"), ("activity_type",)):
        for e in events:
            e.missing = missing
        assert device_ms_per_range(events) == (times, total), missing
        assert device_ms_per_range(events[::-1]) == (times, total), missing
    # A runtime call outside every op but inside call 1's range, numbered like call 2's
    # range: which one launched the kernel is unknown, so it goes to no range.
    inside = _RawEvent("cudaStreamSynchronize", False, 10, 0, 500, 600, activity="cuda_runtime")
    inside.missing = ("activity_type",)
    assert device_ms_per_range(events + [inside]) == ([0.0025, 0.0], total)


def test_traces_read_through_torchs_tree_say_so_once(monkeypatch, capsys):
    pytest.importorskip("torch")
    from zlbench.plugins import percall

    monkeypatch.setattr(percall, "raw_events", lambda prof: (None, "_KinetoEvent has no activity_type"))
    clock = percall.TracedClock(_NoDevice(), "CPU", percall.HostClock())
    for _ in range(2):
        with pytest.raises(percall.NothingTraced):  # the CPU activity: ranges, no device work
            clock.run(lambda: sum(range(100)), 3, None)
    out = capsys.readouterr().out
    assert out.count("traces read through torch's event tree (slower): _KinetoEvent has no activity_type") == 1
    assert clock.readers == {"tree": 2} and clock.raw_unavailable == "_KinetoEvent has no activity_type"


def test_raw_events_say_why_they_cannot_be_read():
    pytest.importorskip("torch")
    from types import SimpleNamespace

    from zlbench.plugins.percall import raw_events

    def prof(results):
        return SimpleNamespace(profiler=SimpleNamespace(kineto_results=results))

    event = _RawEvent("kernel", True, 0, 1, 0, 10)
    assert raw_events(prof(SimpleNamespace(events=lambda: [event]))) == ([event], None)
    assert raw_events(prof(None)) == (None, "the profiler kept no kineto results")
    assert raw_events(SimpleNamespace()) == (None, "the profiler kept no kineto results")
    event.missing = ("linked_correlation_id",)
    raw, why = raw_events(prof(SimpleNamespace(events=lambda: [event])))
    assert raw is None and why == "_RawEvent has no linked_correlation_id"
    # Without either of them a range's projection onto the device could not be told apart.
    event.missing = ("is_user_annotation", "activity_type")
    raw, why = raw_events(prof(SimpleNamespace(events=lambda: [event])))
    assert raw is None and why == "_RawEvent has no is_user_annotation or activity_type"


class _HostTime:
    """perf_counter for percall_bench and its Cost: seconds the stand-in clocks say passed."""

    def __init__(self):
        self.now = 0.0

    def perf_counter(self):
        return self.now


class _Events:
    """The event clock's stand-in: each batch's calls read ``warm()`` ms, host time too."""

    name = "events"

    def __init__(self, host, warm):
        self.host, self._warm = host, warm

    def sync(self):
        pass

    def run(self, fn, calls, grad_to_none):
        warm = self._warm()
        times = [warm() for _ in range(calls)]
        self.host.now += sum(times) / 1e3
        return times


class _StandInClock(_Events):
    """A traced clock without a device: each call's device time from ``sample``, its host
    time ``profiled`` times what the events read (the profiler's own cost). Counts its
    sessions."""

    name = "stand-in"

    def __init__(self, host, warm, sample, profiled=1.0):
        super().__init__(host, warm)
        self.warmup_clock = _Events(host, warm)
        self.sessions, self.parse_ms, self._sample, self.profiled = [], 0.0, sample, profiled

    def run(self, fn, calls, grad_to_none):
        self.sessions.append(calls)
        before = self.host.now
        super().run(fn, calls, grad_to_none)
        self.host.now = before + (self.host.now - before) * self.profiled
        return [self._sample() for _ in range(calls)]


def test_traced_timing_warms_up_on_the_fastest_calls_and_sizes_its_sessions_to_the_budget(monkeypatch):
    from zlbench.plugins import percall
    from zlbench.plugins.percall import percall_bench

    host = _HostTime()
    monkeypatch.setattr(percall, "time", host)
    monkeypatch.setattr(timing, "time", host)
    levels = iter([0.0, 0.01, 0.005] * 1000)  # medians 0.05, 0.06, 0.055 ms: 18% apart

    def warm():
        # Events around a host-syncing call: 0.05 ms of device time plus host gaps whose
        # level moves from batch to batch (masked_select's moved 73 -> 120 us on an H200),
        # so the batches' medians never agree; every fourth call meets a quiet host.
        level, calls = next(levels), iter(range(10**9))
        return lambda: 0.05 + (level if next(calls) % 4 else 0.0)

    rule = timing.StopRule.for_call(0.005, 100)
    for profiled in (1.0, 7.0):  # a session's calls cost up to 7x their host time on an H200
        clock = _StandInClock(host, warm, lambda: 0.02, profiled)
        result = percall_bench(lambda: None, clock, timing.WarmupRule("settle", 1000), rule)
        assert result.cost["warmup_stop"] == "settled" and result.cost["warmup"] < 100
        # A probe call, then one session that spends the rule's minimum at the warm-up's
        # host time per call, however much the profiler costs: its median is pinned, and
        # the rule stops there, far inside the caller's budget.
        assert clock.sessions[0] == 1 and len(clock.sessions) == 2, clock.sessions
        assert timing.first_session_calls(0.0575, rule) <= clock.sessions[1] <= timing.first_session_calls(0.0499, rule)
        assert result.stop == "noise" and result.cost["batches"] == 1
        assert rule.min_ms <= result.cost["timed"] <= profiled * 1.5 * rule.min_ms, result.cost
        assert result.cost["timed"] < rule.budget, result.cost
        assert result.cost["rep_ms"] == 100 and "parse" in result.cost
        assert result.cost["total"] >= result.cost["warmup"] + result.cost["timed"] - 0.01
    # The event clock itself, judged by medians, waits for its cap; timing calls that run
    # nothing on the device (host time), it is judged by the fastest call too.
    events = percall_bench(lambda: None, clock.warmup_clock, timing.WarmupRule("settle", 1000), rule)
    assert events.cost["warmup_stop"] == "cap" and "parse" not in events.cost
    host_time = percall_bench(
        lambda: None, clock.warmup_clock, timing.WarmupRule("settle", 1000), rule, fastest=True)
    assert host_time.cost["warmup_stop"] == "settled" and host_time.cost["warmup"] < 100


def test_a_slow_calls_warm_up_is_single_calls_where_fast_ones_double(monkeypatch):
    from zlbench.plugins import percall
    from zlbench.plugins.percall import percall_bench

    host = _HostTime()
    monkeypatch.setattr(percall, "time", host)
    monkeypatch.setattr(timing, "time", host)
    warmed = []

    class Counting(_Events):
        def run(self, fn, calls, grad_to_none):
            warmed.append(calls)
            return super().run(fn, calls, grad_to_none)

    slow = lambda: (lambda: 99.0)  # noqa: E731 - a 99 ms call, as special_legendre_polynomial_p's
    clock = _StandInClock(host, slow, lambda: 99.0)
    clock.warmup_clock = Counting(host, slow)
    result = percall_bench(lambda: None, clock, timing.WarmupRule("settle", 1000), timing.StopRule.for_call(0.005, 100))
    # Three single calls agree: 3 x 99 ms and the tracer's one-call session (was 1 + 2 + 4).
    assert warmed == [1, 1, 1] and result.cost["warmup_stop"] == "settled"
    assert result.cost["warmup"] <= 4 * 99.0 + 1, result.cost
    # Fast calls still double, up to about DIRECT_WARMUP_BATCH_MS of them.
    assert [timing.next_warmup_calls(c, 0.5) for c in (1, 8, 16, 20)] == [2, 16, 20, 20]
    assert timing.next_warmup_calls(4, 3.0) == 3 and timing.next_warmup_calls(1, 1e-9) == 2


def test_a_direct_warm_up_of_short_batches_still_reaches_the_budget_rules_minimum(monkeypatch):
    """Under "budget" the caller's warmup is the minimum: 6 ms calls in batches of one
    would hit WARMUP_MAX_BATCHES (200) after 1.2 s, short of a 3 s warmup."""
    from zlbench.plugins import percall
    from zlbench.plugins.percall import percall_bench

    host = _HostTime()
    monkeypatch.setattr(percall, "time", host)
    monkeypatch.setattr(timing, "time", host)
    clock = _Events(host, lambda: (lambda: 6.0))
    rule = timing.WarmupRule("budget", 3000)
    result = percall_bench(lambda: None, clock, rule, timing.StopRule.for_call(0.005, 100))
    assert result.cost["warmup_stop"] == "settled" and result.cost["warmup"] >= 3000, result.cost
    assert result.cost["warmup_batches"] > timing.WARMUP_MAX_BATCHES
    # The settle rule at FlagGems' 1,000 ms cap keeps the old limit.
    assert timing.direct_warmup_max_batches(timing.WarmupRule("settle", 1000)) == timing.WARMUP_MAX_BATCHES


def test_an_empty_graph_of_a_side_the_tracer_found_idle_is_timed_by_events_without_a_trace():
    pytest.importorskip("torch")
    from zlbench.markers import NO_DEVICE_WORK
    from zlbench.plugins import direct_timer, percall
    from zlbench.plugins.row_context import RowContext

    timer = direct_timer.DirectTimer(
        direct_timer.DirectSettings("kernels", 1, 0.05), direct_timer.RowRecorder("cpu"), RowContext())
    # The CPU activity traces the marked ranges but no device work under them.
    timer.clock = percall.TracedClock(_NoDevice(), "CPU", percall.HostClock())
    sessions = []
    traced_run = timer.clock.run
    timer.clock.run = lambda fn, calls, grad: sessions.append(calls) or traced_run(fn, calls, grad)
    opts = {"warmup": 1, "rep": 5}

    def timed(key):
        del sessions[:]
        measured, clock, untraced = timer._percall(lambda: sum(range(100)), opts, key)
        assert clock == "host" and measured.samples >= 10 and untraced.kind == NO_DEVICE_WORK
        return untraced

    # The first empty graph of transpose's gems side is traced: the tracer finds it idle.
    assert "device time 0 ms" in str(timed(("transpose", "gems"))) and sessions == [1]
    # Its next empty graph goes to the events at once, and says why.
    why = str(timed(("transpose", "gems")))
    assert sessions == [] and "earlier empty graph of transpose's gems side" in why
    assert timer.counts()["untraced_by_empty_graph"] == 1
    # Another side, or a capture that failed for another reason, is traced as before.
    timed(("transpose", "torch"))
    assert sessions == [1]
    timed(None)
    assert sessions == [1]
    # The report names the reader of the traces (here torch's raw events).
    assert timer.counts()["trace_readers"] == {"raw": 3} and "raw_events_unavailable" not in timer.counts()


def _traced_timer_on_the_host(monkeypatch):
    """A direct timer whose traced clock is the CPU's (an idle call: no device work), and
    the (clock, warm-up rule, stop rule) of every percall_bench it runs."""
    from zlbench.plugins import direct_timer, percall
    from zlbench.plugins.row_context import RowContext

    timer = direct_timer.DirectTimer(
        direct_timer.DirectSettings("kernels", 1, 0.05), direct_timer.RowRecorder("cpu"), RowContext())
    timer.clock = percall.TracedClock(_NoDevice(), "CPU", percall.HostClock())
    benches = []
    real = direct_timer.percall_bench
    monkeypatch.setattr(direct_timer, "percall_bench",
                        lambda fn, clock, warmup, rule, *a, **k: benches.append((clock.name, warmup, rule))
                        or real(fn, clock, warmup, rule, *a, **k))
    return timer, benches


def test_a_host_time_timing_warms_up_a_tenth_of_flaggems_second_at_most(monkeypatch):
    pytest.importorskip("torch")
    from zlbench.plugins import direct_timer, percall
    assert timing.host_time_warmup(timing.WarmupRule("settle", 1000)).cap_ms == timing.HOST_TIME_WARMUP_CAP_MS
    assert timing.host_time_warmup(timing.WarmupRule("settle", 25)).cap_ms == 25     # a smaller budget stands
    assert timing.host_time_warmup(timing.WarmupRule("budget", 1000)).min_ms == 1000  # FlagGems' own amount
    timer, benches = _traced_timer_on_the_host(monkeypatch)
    timer._percall(lambda: sum(range(100)), {"warmup": 1000, "rep": 5}, ("transpose", "gems"))
    # Traced at FlagGems' warm-up; found idle, timed on the host with the capped one.
    assert [(name, w.cap_ms) for name, w, _ in benches] == [("torch.profiler.CPU", 1000), ("host", 100)]
    # Handed over by the graph timer after a settled warm-up, the traced timing warms up
    # no more; the host-time one keeps its own short warm-up (its fastest-call rule costs
    # less than a batch of calls with their own events each).
    handed = []
    real = percall.percall_bench
    monkeypatch.setattr(direct_timer, "percall_bench",
                        lambda *a, **k: handed.append(k.get("prewarmed_ms")) or real(*a, **k))
    measured, _, _ = timer._percall(lambda: sum(range(100)), {"warmup": 1000, "rep": 5}, ("matmul", "gems"),
                                    prewarmed_ms=0.01)
    assert handed == [0.01, None] and measured.cost["warmup_stop"] == "settled"


def test_a_host_time_timing_spends_a_tenth_of_the_callers_budget(monkeypatch):
    pytest.importorskip("torch")
    from zlbench.plugins import percall

    rule = timing.host_time_stop(timing.StopRule.for_call(0.005, 100))
    assert (rule.min_ms, rule.budget, rule.max_ms, rule.target, rule.min_samples) == (
        timing.HOST_TIME_REP_MS, timing.HOST_TIME_REP_MS, 10 * timing.HOST_TIME_REP_MS, 0.005, timing.MIN_SAMPLES)
    smaller = timing.host_time_stop(timing.StopRule.for_call(0.005, 4))
    assert smaller.min_ms == smaller.budget == 4  # a smaller budget stands, and is spent
    timer, benches = _traced_timer_on_the_host(monkeypatch)
    measured, clock, untraced = timer._percall(lambda: sum(range(100)), {"warmup": 5, "rep": 100}, ("view", "gems"))
    # The trace that found no device work had FlagGems' 100 ms; the host-time timing a tenth.
    assert [(name, r.budget) for name, _, r in benches] == [("torch.profiler.CPU", 100), ("host", timing.HOST_TIME_REP_MS)]
    assert clock == "host" and measured.cost["rep_ms"] == timing.HOST_TIME_REP_MS
    assert measured.cost["caller_rep_ms"] == 100  # what screen_throughput's budget counts
    assert measured.cost["timed"] < 10 * timing.HOST_TIME_REP_MS + 50
    # The side's next empty graph goes to the host clock at once, with the same budget.
    benches.clear()
    timer._percall(lambda: sum(range(100)), {"warmup": 5, "rep": 100}, ("view", "gems"))
    assert [(name, r.budget) for name, _, r in benches] == [("host", timing.HOST_TIME_REP_MS)]
    # A timing that is not host time keeps the caller's budget, and records no other.
    benches.clear()
    timer.clock = percall.HostClock()
    measured, clock, untraced = timer._percall(lambda: sum(range(100)), {"warmup": 5, "rep": 20}, ("view", "gems"))
    assert untraced is None and [(name, r.budget) for name, _, r in benches] == [("host", 20)]
    assert measured.cost["rep_ms"] == 20 and "caller_rep_ms" not in measured.cost


def test_a_rows_second_empty_graph_skips_the_trace_through_measure(capsys):
    pytest.importorskip("torch")
    from zlbench.plugins import direct_timer, percall
    from zlbench.plugins.row_context import RowContext, TimedRow, Timing

    timer = direct_timer.DirectTimer(
        direct_timer.DirectSettings("kernels", 1, 0.05), direct_timer.RowRecorder("cpu"), RowContext())
    timer.clock = percall.TracedClock(_NoDevice(), "CPU", percall.HostClock())
    row = TimedRow("transpose", "torch.float16", "[64, 64]", "gems")
    timer.row_context.current = lambda: Timing(1, row)
    capsys.readouterr()
    for _ in range(2):
        timer.measure(lambda fn, warmup=1, rep=5: 0.0, lambda: sum(range(100)), (), {"warmup": 1, "rep": 5},
                      empty_graph=True)
    markers = [parse_marker(line) for line in capsys.readouterr().out.splitlines() if "DIRECT_TIMER_UNTRACED" in line]
    # Both timings name the row; the second says it skipped the trace.
    assert [(m.get("op"), m.get("side"), m.get("kind")) for m in markers] == [("transpose", "gems", "no_device_work")] * 2
    assert "earlier empty graph" in markers[1].get("why") and timer.counts()["untraced_by_empty_graph"] == 1
    # Without the graph timer's word the same row is traced every time.
    timer.measure(lambda fn, warmup=1, rep=5: 0.0, lambda: sum(range(100)), (), {"warmup": 1, "rep": 5})
    assert timer.counts()["untraced_by_empty_graph"] == 1


def test_the_graph_timer_hands_an_empty_capture_over_as_such(monkeypatch):
    from zlbench.plugins import direct_timer, graph_timer
    from zlbench.plugins.row_context import RowContext, TimedRow, Timing

    timer = graph_timer.GraphTimer(
        direct_timer.DirectSettings("kernels", 1, 0.05), direct_timer.RowRecorder("cpu"), RowContext())
    row = TimedRow("transpose", "torch.float16", "[64, 64]", "gems")
    timer.row_context.current = lambda: Timing(1, row)
    handed = []
    timer.direct.measure = lambda original, fn, args, kwargs, empty_graph=False, prewarmed_ms=None: (
        handed.append((empty_graph, prewarmed_ms)) or 0.5)
    for error, warm_ms in ((graph_timer.EmptyGraph("The CUDA Graph is empty: nothing captured"), 0.004),
                           (RuntimeError("operation not permitted when stream is capturing"), None)):
        def fails(*args, error=error, warm_ms=warm_ms, **kwargs):
            raise graph_timer.CaptureFailed("capture", error, warm_ms)

        monkeypatch.setattr(graph_timer, "graph_bench", fails)
        assert timer.measure(lambda fn, warmup=25, rep=100: 0.0, lambda: None, (), {}) == 0.5
    # A settled warm-up goes over with the row; one that did not settle does not.
    assert handed == [(True, 0.004), (False, None)]
    # Its report carries the direct timer's own for the timings it took over.
    counts = timer.counts()
    assert counts["timings_direct_fallback"] == 2 and counts["direct_timer"]["timer"] == "direct"


def test_a_traced_timing_of_a_slow_call_stops_at_the_time_cap(monkeypatch):
    from zlbench.plugins import percall

    rule = timing.StopRule.for_call(0.005, 100)     # 100 ms budget, 1,000 ms cap
    assert timing.first_session_calls(0.05, rule) == 240          # the minimum, 10 ms, and the margin
    assert timing.first_session_calls(50.0, rule) == timing.MIN_SAMPLES
    assert timing.first_session_calls(400.0, rule) == 2            # 10 calls would pass the cap
    assert timing.first_session_calls(1e-6, rule) == 10_000
    # 400 ms a call: the probe, two calls, one more, and the time cap ends it (the rule's
    # ten samples would have taken four seconds).
    host = _HostTime()
    monkeypatch.setattr(percall, "time", host)
    monkeypatch.setattr(timing, "time", host)
    slow = iter(range(10**9))
    clock = _StandInClock(host, lambda: (lambda: 400.0 + next(slow) % 3), lambda: 399.0)
    result = percall.percall_bench(lambda: None, clock, timing.WarmupRule("settle", 1000), rule)
    assert result.stop == "time_cap" and clock.sessions == [1, 2, 1], (clock.sessions, result.cost)


def test_a_row_the_graph_timer_warmed_up_is_not_warmed_up_again(monkeypatch):
    """After a failed capture the direct timer takes the row over: where the graph timer's
    warm-up settled, there is no first call and one batch of about a millisecond of calls
    sizes the samples (special_legendre_polynomial_p's largest rows warmed up twice on
    an H200, 0.3-0.4 s each time)."""
    from zlbench.plugins import percall

    host = _HostTime()
    monkeypatch.setattr(percall, "time", host)
    monkeypatch.setattr(timing, "time", host)
    rule = timing.StopRule.for_call(0.005, 100)
    # About a millisecond of calls at the wall time a call cost in the graph timer's warm-up.
    for wall_ms, batch in ((0.05, 20), (70.0, 1), (1e-9, 1000)):
        assert timing.warmup_batch_size(wall_ms) == batch
    calls = []

    def fn():
        calls.append(1)

    class Counting(_Events):
        def run(self, fn, n, grad_to_none):
            for _ in range(n):
                fn()
            return super().run(fn, n, grad_to_none)

    fast = lambda: (lambda: 0.05)  # noqa: E731
    cold = percall.percall_bench(fn, Counting(host, fast), timing.WarmupRule("settle", 1000), rule)
    cold_calls, calls[:] = len(calls), []
    warm = percall.percall_bench(fn, Counting(host, fast), timing.WarmupRule("settle", 1000), rule,
                                 prewarmed_ms=0.05)
    assert "first_call" in cold.cost and "first_call" not in warm.cost
    assert warm.cost["warmup_stop"] == "prewarmed" and warm.cost["warmup_batches"] == 1
    assert cold.cost["warmup_batches"] >= timing.WARMUP_WINDOW
    assert warm.cost["warmup"] < cold.cost["warmup"] and warm.stop == cold.stop == "noise"
    assert len(calls) - len(warm.samples) == timing.warmup_batch_size(0.05) < cold_calls - len(cold.samples)


def test_calls_too_slow_for_ten_samples_in_the_budget_stop_at_six(monkeypatch):
    from zlbench.plugins import percall

    rule = timing.StopRule.for_call(0.005, 100)
    # Six samples: their whole range is the median's 95% interval (it misses 2 in 2**6).
    assert timing.median_ci([1, 2, 3, 4, 5, 6]) == (1, 6) and 1 - 2 / 2**6 >= 0.95
    assert timing.median_ci([1, 2, 3, 4, 5]) == (1, 5) and 1 - 2 / 2**5 < 0.95
    assert rule.for_host_per_call(9.0) == rule                     # ten of them fit the 100 ms
    assert rule.for_host_per_call(70.0).min_samples == timing.MIN_SAMPLES_SLOW == 6
    small = rule._replace(min_samples=4)
    assert small.for_host_per_call(70.0) == small                  # never more than asked
    # special_legendre_polynomial_p at 2**30 elements: 70 ms a call, pinned after six.
    host = _HostTime()
    monkeypatch.setattr(percall, "time", host)
    monkeypatch.setattr(timing, "time", host)
    wobble = iter(range(10**9))
    slow = lambda: (lambda: 70.0 + 0.01 * (next(wobble) % 3))  # noqa: E731
    clock = _StandInClock(host, slow, lambda: 70.0 + 0.01 * (next(wobble) % 3))
    result = percall.percall_bench(lambda: None, clock, timing.WarmupRule("settle", 1000), rule,
                                   prewarmed_ms=70.0)
    assert result.stop == "noise" and len(result.samples) == 6, (clock.sessions, result.cost)
    assert result.cost["min_samples"] == 6 and result.cost["timed"] < 7 * 70.0
    # Handed over warm, one slow call in the single warm-up batch (after a failed capture,
    # say) does not count as the call's time: the settled warm-up's 5 ms does.
    first = iter([500.0])
    bumpy = lambda: (lambda: next(first, 5.0))  # noqa: E731
    handed = percall.percall_bench(lambda: None, _StandInClock(host, bumpy, lambda: 5.0),
                                   timing.WarmupRule("settle", 1000), rule, prewarmed_ms=5.0)
    assert handed.cost["warmup_batches"] == 1 and "min_samples" not in handed.cost
    assert len(handed.samples) >= timing.MIN_SAMPLES
    # A fast call keeps nvbench's ten.
    fast = percall.percall_bench(lambda: None, _StandInClock(host, lambda: (lambda: 0.05), lambda: 0.05),
                                 timing.WarmupRule("settle", 1000), rule)
    assert "min_samples" not in fast.cost and len(fast.samples) >= timing.MIN_SAMPLES


def test_budget_calls_spend_the_budget_and_give_the_samples():
    rule = timing.StopRule.for_call(0.005, 100)
    assert timing.budget_calls(0.05, rule) == 240    # the minimum (10 ms) and the margin
    assert timing.budget_calls(0.05, rule, elapsed_ms=5) == 120     # what is left of it
    assert timing.budget_calls(36.0, rule, elapsed_ms=40) == 1       # spent: one more call
    assert timing.budget_calls(1e-5, rule) == 10_000                 # capped

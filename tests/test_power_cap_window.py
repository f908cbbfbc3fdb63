"""The power cap: a timing whose work the device held down by its power cap is timed
again over the cap's period (timing.CAP_WINDOW_MS), marked POWER_CAP_WINDOW, and an A/B
compares such figures only with their like. The window itself runs on a GPU
(tests/test_plugin_graph_timer_gpu.py); here the rules and the records."""

from __future__ import annotations

import math

import pytest

from zlbench import benchenv, rowstats, timing
from zlbench.backends.base import DeviceState
from zlbench.markers import DEVICE_THROTTLED, POWER_CAP_WINDOW, Marker, parse_marker
from zlbench.plugins.direct_timer import RowRecorder
from zlbench.runlog import Row
from zlbench.summary.ab import PairedRow, judge
from zlbench.summary.verdict import SAME, SLOWER, UNKNOWN
from zlbench.timing import CapWatch, Measured, TimedRow, cap_window_done, power_capped, throttle_reason

FULL = {"sm_mhz": 1980, "throttle": []}
CAPPED = {"sm_mhz": 1500, "throttle": ["sw_power_cap"]}


def test_the_cap_counts_only_with_the_clock_held_down():
    assert power_capped(CAPPED, 1980)
    # NVML leaves the flag on after a hot row, the clock back up: not held down.
    assert not power_capped({"sm_mhz": 1965, "throttle": ["sw_power_cap"]}, 1980)
    # A clock down for another reason is not the power cap's (DEVICE_THROTTLED's business).
    assert not power_capped({"sm_mhz": 1500, "throttle": ["hw_thermal"]}, 1980)
    assert not power_capped({"sm_mhz": 1500, "throttle": []}, 1980)
    # Nothing to compare with, or nothing read: no.
    assert not power_capped(CAPPED, None) and not power_capped({}, 1980)


def look(watch: CapWatch) -> None:
    watch.last_look = -math.inf  # as though CAP_LOOK_EVERY_MS went by
    watch.look()


def test_a_watch_learns_the_clock_from_its_own_readings_and_sees_the_cap():
    readings = iter([FULL, {"sm_mhz": 1965, "throttle": []}, CAPPED])
    watch = CapWatch(lambda: next(readings))  # no reference yet: the first row of a process
    look(watch)
    look(watch)
    assert watch.reference_mhz == 1980 and not watch.seen
    look(watch)
    assert watch.seen and watch.looks == 3
    # A capped reading does not lower the reference.
    assert watch.reference_mhz == 1980


def test_a_watch_reads_at_most_every_few_milliseconds_outside_the_window():
    calls = []
    watch = CapWatch(lambda: calls.append(1) or FULL, 1980)
    for _ in range(50):  # a warm-up's batches, back to back
        watch.look()
    assert len(calls) == 1
    watch.in_window = True  # the window's chunks are each read
    for _ in range(3):
        watch.look()
    assert len(calls) == 4


def test_a_watch_counts_what_it_read_in_the_window_and_survives_a_failed_read():
    answers = [CAPPED, {"sm_mhz": 1200, "throttle": ["sw_power_cap"]}, FULL]

    def read():
        if not answers:
            raise RuntimeError("NVML went away")
        return answers.pop(0)

    watch = CapWatch(read, 1980)
    watch.in_window = True
    for _ in range(4):
        watch.look()  # in the window: every chunk is read
    notes = watch.notes(1003.2, 334)
    assert notes == {"window_ms": 1003.2, "replays": 334, "readings": 3, "capped_readings": 2,
                     "median_mhz": 1500, "min_mhz": 1200, "ref_mhz": 1980}
    # Where the vendor exposes nothing, a watch reads nothing and sees nothing.
    blind = CapWatch(DeviceState().busy_sample, 1980)
    blind.look()
    assert not blind.seen and blind.notes(0, 0)["median_mhz"] is None


def test_the_window_ends_at_its_device_time():
    assert not cap_window_done([])
    assert not cap_window_done([300.0, 300.0, 300.0])
    assert cap_window_done([300.0, 300.0, 300.0, 100.0])
    assert cap_window_done([60.0], limit_ms=50.0)


def test_a_row_timed_at_the_cap_is_not_marked_for_the_cap_alone():
    before, after = {"sm_mhz": 1980, "throttle": []}, {"sm_mhz": 1500, "throttle": ["sw_power_cap"]}
    assert throttle_reason(before, after, 1980) == "sw_power_cap,sm_clock_drop"
    assert throttle_reason(before, after, 1980, at_cap=True) is None
    # Heat still names it: the window measures the cap, not a hot device.
    hot = dict(after, throttle=["sw_power_cap", "hw_thermal"])
    assert throttle_reason(before, hot, 1980, at_cap=True) == "hw_thermal"


class Scripted(DeviceState):
    """A device whose samples are given in turn (the row's two, then busy readings)."""

    source = "scripted"

    def __init__(self, samples, busy):
        super().__init__()
        self.samples, self.busy = list(samples), list(busy)

    def available(self) -> bool:
        return True

    def sample(self, ending: bool = True):
        return dict(self.samples.pop(0), other_procs=0 if ending else None)

    def busy_sample(self):
        return self.busy.pop(0)


def test_the_recorder_marks_a_windowed_row_power_cap_window_not_throttled(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(benchenv.RUN_DIR, str(tmp_path))
    recorder = RowRecorder("cuda")
    recorder._state = Scripted([FULL, CAPPED, FULL, CAPPED], [FULL, CAPPED])
    row = TimedRow("bmm", "torch.float16", "[16, 4096, 4096]", "gems")
    # A row whose timing did not take the window: the cap and the drop mark it, as before.
    recorder.start()
    recorder.warm()
    recorder.finish(row, Measured(1.0, 3.9, 40, 0.01, "budget", cost={}), "graph")
    # A row timed over a cap window: the watch, asked for before the warm-up (as the
    # graph timer does), starts from the run's clock.
    recorder.start()
    watch = recorder.cap_watch()
    assert watch is not None and watch.reference_mhz == 1980
    look(watch)
    look(watch)
    assert watch.seen
    recorder.warm()
    window = {"power_cap": watch.notes(1001.5, 256)}
    recorder.finish(row, Measured(1.0, 4.6, 256, 0.012, "power_cap", cost=window), "graph")
    records, _ = rowstats.read(tmp_path)
    assert [r["throttled"] for r in records] == ["sw_power_cap,sm_clock_drop", None]
    assert records[1]["cost_ms"]["power_cap"]["replays"] == 256 and records[1]["stop"] == "power_cap"
    markers = [m for m in map(parse_marker, capsys.readouterr().out.splitlines()) if m is not None]
    assert [m.name for m in markers] == [DEVICE_THROTTLED, POWER_CAP_WINDOW]
    assert markers[1].get("side") == "gems" and markers[1].get("window_ms") == "1001.5"
    assert markers[1].get("replays") == "256" and markers[1].get("ref_mhz") == "1980"


def test_no_watch_where_the_device_cannot_be_read():
    recorder = RowRecorder(None)
    assert recorder.cap_watch() is None


def _row(ms, *capped_sides):
    r = Row("bmm", "torch.float16", "kernel", "core", "[16, 4096, 4096]", "SUCCESS", 1)
    r.gems_ms, r.gems_spread = ms, 0.004
    for side in capped_sides:
        r.markers.append(Marker(POWER_CAP_WINDOW, {"op": "bmm", "side": side, "window_ms": "1001"}))
    return r


@pytest.mark.parametrize(
    "a, b, status",
    [
        (_row(4.0, "gems"), _row(4.04, "gems"), SAME),  # both sustained at the cap: compared
        (_row(4.0, "gems"), _row(4.6, "gems"), SLOWER),  # ... and a real change stands
        (_row(4.0, "gems"), _row(3.6), UNKNOWN),  # one at the cap, one before it
        (_row(3.6), _row(4.0, "gems"), UNKNOWN),
        (_row(4.0, "torch"), _row(4.04), SAME),  # the torch side's window leaves gems alone
    ],
)
def test_an_ab_compares_a_figure_at_the_cap_only_with_another(a, b, status):
    found = judge(PairedRow(a, b, 0.0, True), 0.02, False)
    assert found.status == status
    if status == UNKNOWN:
        assert found.throttled and "timed at the power cap" in found.why and POWER_CAP_WINDOW in found.why


def test_a_windows_spread_is_never_under_what_two_windows_differ_by():
    assert timing.cap_window_spread(0.0004) == timing.CAP_WINDOW_SPREAD
    assert timing.cap_window_spread(None) == timing.CAP_WINDOW_SPREAD
    assert timing.cap_window_spread(0.03) == 0.03
    # Two windows 1.7% apart (the H200 A/A's widest) stay SAME; a 5% change does not.
    floor, spread = 0.02, timing.cap_window_spread(0.0004)
    a, same, slower = _row(4.0, "gems"), _row(4.068, "gems"), _row(4.2, "gems")
    for r in (a, same, slower):
        r.gems_spread = spread
    assert judge(PairedRow(a, same, 0.0, True), floor, False).status == SAME
    assert judge(PairedRow(a, slower, 0.0, True), floor, False).status == SLOWER


def test_the_ab_views_name_the_side_at_the_cap():
    from zlbench.summary.render_ab import slowed_why, throttled_sides

    pair = PairedRow(_row(4.0, "gems"), _row(3.6), 0.0, True)
    assert throttled_sides(pair) == "A(cap)"
    both = PairedRow(_row(4.0, "gems"), _row(4.04, "gems"), 0.0, True)
    assert throttled_sides(both) == ""
    hot = _row(3.6)
    hot.markers.append(Marker(DEVICE_THROTTLED, {"side": "gems", "why": "hw_thermal"}))
    assert throttled_sides(PairedRow(_row(4.0), hot, 0.0, True)) == "B"
    assert slowed_why("measured throttled (A sw_power_cap,sm_clock_drop)") == "A sw_power_cap,sm_clock_drop"
    why = "only A timed at the power cap (POWER_CAP_WINDOW)"
    assert slowed_why(why) == why  # its own brackets stay


def test_a_row_at_the_cap_on_both_sides_shows_each_sides_clock():
    from zlbench.summary.ab import cap_clocks, cap_mhz
    from zlbench.summary.render_ab import _pair_row

    a, b = _row(0.077, "gems"), _row(0.074, "gems")
    a.markers[0].fields["median_mhz"], b.markers[0].fields["median_mhz"] = "1455.0", "1485.5"
    pair = PairedRow(a, b, 0.0, True)
    pair.verdict = judge(pair, 0.02, False)
    assert pair.verdict.status != UNKNOWN  # the verdict stands; the note says why it may move
    assert cap_clocks(pair) == "both at the power cap: A 1455 MHz, B 1486 MHz"
    assert any("A 1455 MHz, B 1486 MHz" in str(cell) for cell in _pair_row(pair))
    assert cap_clocks(PairedRow(a, _row(0.074), 0.0, True)) == ""  # one side alone: judged UNKNOWN instead
    assert cap_mhz(pair) == {"A": 1455.0, "B": 1485.5} and cap_mhz(PairedRow(a, _row(0.074), 0.0, True)) is None
    b.markers[0].fields["median_mhz"] = ""
    assert cap_clocks(pair) == "both at the power cap: A 1455 MHz, B ? MHz" and cap_mhz(pair)["B"] is None

"""Another process busy on the device while a row is timed (``device_shared``): NVML's
per-process utilization, read through a small stand-in for pynvml (no GPU on CPU hosts),
and what the row record, its marker and the A/B make of it."""

from __future__ import annotations

import os
import time
import types

import pytest

from zlbench.backends import nvml
from zlbench.markers import DEVICE_THROTTLED, parse_marker
from zlbench.plugins.direct_timer import RowRecorder
from zlbench.timing import Measured, TimedRow, throttle_reason

ME = os.getpid()


def util(pid, sm=0, mem=0, ts=1):
    return types.SimpleNamespace(pid=pid, smUtil=sm, memUtil=mem, timeStamp=ts)


def test_other_busy_processes_are_counted_beside_this_one():
    assert nvml.other_busy_processes([], ME) is None  # no samples: no answer
    assert nvml.other_busy_processes([util(ME, sm=90)], ME) == 0
    # An idle process holding a context (a batch's prestarted one) is not contention.
    assert nvml.other_busy_processes([util(ME, sm=90), util(ME + 1)], ME) == 0
    assert nvml.other_busy_processes([util(ME, sm=90), util(ME + 1, sm=40)], ME) == 1
    assert nvml.other_busy_processes([util(ME), util(ME + 1, mem=5)], ME) == 1  # copies alone
    # Pids of another namespace (a container's are the host's): every busy one but one.
    assert nvml.other_busy_processes([util(900, sm=90)], ME) == 0
    assert nvml.other_busy_processes([util(900, sm=90), util(901, sm=30)], ME) == 1
    assert nvml.other_busy_processes([util(900, sm=90), util(901, sm=30), util(902, mem=6)], ME) == 2
    # Below BUSY_MIN_PCT (a display server, an agent): not contention; NVML's padding
    # (pid 0) and junk above 100% are not processes.
    assert nvml.other_busy_processes([util(ME, sm=90), util(ME + 1, sm=nvml.BUSY_MIN_PCT - 1)], ME) == 0
    assert nvml.other_busy_processes([util(ME, sm=90), util(0, sm=80), util(ME + 2, sm=4000)], ME) == 0
    assert nvml.other_busy_processes([util(0, sm=80)], ME) is None


class NotFound(Exception):
    """pynvml's NVMLError_NotFound: no utilization sample since the timestamp."""


class FakeNvml(types.ModuleType):
    """pynvml in small: one device, fixed clocks, and the per-process utilization
    samples a test appends to, those from ``since`` on (the one at ``since`` again)."""

    NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU = 0, 1, 0
    NVML_CLOCK_ID_APP_CLOCK_TARGET, NVML_CLOCK_ID_APP_CLOCK_DEFAULT = 1, 2
    NVML_PROCESSOR_CLK_SAMPLES = 5
    NVMLError_NotFound = NotFound

    def __init__(self):
        super().__init__("pynvml")
        self.samples = []
        self.asked = []
        self.clock_samples = []  # the SM clock samples the driver keeps

    def nvmlDeviceGetSamples(self, handle, kind, since):
        assert kind == self.NVML_PROCESSOR_CLK_SAMPLES
        got = [s for s in self.clock_samples if s.timeStamp > since]
        if not got:
            raise NotFound("Not Found")
        return 0, got

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        pass

    def nvmlDeviceGetHandleByIndex(self, index):
        return ("device", index)

    def nvmlDeviceGetHandleByUUID(self, uuid):
        return ("device", uuid)

    def nvmlDeviceGetPowerUsage(self, handle):
        return 600_000

    def nvmlDeviceGetClockInfo(self, handle, which):
        return 1980 if which == self.NVML_CLOCK_SM else 3201

    def nvmlDeviceGetTemperature(self, handle, which):
        return 55

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle):
        return 0

    def nvmlDeviceGetClock(self, handle, *args):  # what describe() reads: not asked here
        raise NotFound("Not Supported")

    nvmlDeviceGetName = nvmlDeviceGetUUID = nvmlDeviceGetMaxClockInfo = nvmlDeviceGetClock

    def nvmlDeviceGetProcessUtilization(self, handle, since):
        self.asked.append(since)
        got = [s for s in self.samples if s.timeStamp >= since]  # the boundary's again, as NVML may
        if not got:
            raise NotFound("Not Found")
        return got


@pytest.fixture
def fake_nvml(monkeypatch):
    fake = FakeNvml()
    monkeypatch.setitem(__import__("sys").modules, "pynvml", fake)
    monkeypatch.setattr(nvml, "_torch_uuid", lambda: None)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return fake


def test_each_sample_counts_what_ran_since_the_one_before(fake_nvml):
    state = nvml.NvmlState()
    fake_nvml.samples += [util(ME, sm=80, ts=100), util(4242, sm=60, ts=120)]
    before = state.sample()  # after the warm-up: the other process ran before it
    assert before["other_procs"] == 1
    fake_nvml.samples += [util(ME, sm=80, ts=200)]
    after = state.sample()  # the timed calls: this process alone
    assert after["other_procs"] == 0 and fake_nvml.asked[-1] == 120
    assert throttle_reason(before, after, 1980.0) is None
    fake_nvml.samples += [util(ME, sm=80, ts=300), util(4242, sm=50, ts=310)]
    shared = state.sample()
    assert shared["other_procs"] == 1
    assert throttle_reason(after, shared, 1980.0) == "device_shared"
    # A sample NVML returns again at the timestamp already read is not new.
    fake_nvml.samples += [util(4242, sm=50, ts=310)]
    # No sample since the last one (NVML samples every few tens of ms): no answer.
    assert state.sample()["other_procs"] is None
    # The run's report says how often the check could answer (never silently none).
    assert state.describe()["device_shared_check"] == {"answered": 3, "unanswered": 1}


def test_only_a_rows_last_sample_asks_which_processes_used_the_device(fake_nvml):
    state = nvml.NvmlState()
    fake_nvml.samples += [util(4242, sm=60, ts=50)]  # the last operator's process, before this one
    first = state.sample(ending=False)  # the process's first sample opens the first window
    assert fake_nvml.asked == [0]
    assert first["other_procs"] is None  # what it read came before the window: no row's count
    fake_nvml.samples += [util(ME, sm=80, ts=100)]
    assert state.sample()["other_procs"] == 0  # what ran before the window stays out of it
    fake_nvml.samples += [util(4242, sm=60, ts=150)]  # another process in the next row's warm-up
    opening = state.sample(ending=False)
    assert opening["other_procs"] is None and fake_nvml.asked == [0, 50]  # not asked again
    fake_nvml.samples += [util(ME, sm=80, ts=200)]
    # The row's window runs from the last row's end: its warm-up is in it.
    assert state.sample()["other_procs"] == 1 and fake_nvml.asked[-1] == 100


def clock(mhz, ts):
    return types.SimpleNamespace(timeStamp=ts, sampleValue=types.SimpleNamespace(uiVal=mhz))


def test_a_rows_closing_sample_carries_the_sm_clock_sampled_while_it_ran(fake_nvml, monkeypatch):
    # Samples from before this process (the last operator's, at 1500 MHz) stay out.
    fake_nvml.clock_samples += [clock(1500, 10), clock(1500, 20)]
    state = nvml.NvmlState()
    opening = state.sample(ending=False)
    assert "sm_mhz_window" not in opening
    # The row ran a step below the top clock between two point readings of 1980 MHz.
    fake_nvml.clock_samples += [clock(1980, 30), clock(1965, 40), clock(1965, 50)]
    closing = state.sample()
    assert closing["sm_mhz"] == 1980
    assert closing["sm_mhz_window"] == {"n": 3, "min": 1965, "median": 1965}
    # The next row's opening sample moves the window's start: its warm-up's sample
    # stays out of the row only where it came before that opening sample.
    fake_nvml.clock_samples += [clock(1400, 60)]
    state.sample(ending=False)
    fake_nvml.clock_samples += [clock(1980, 70), clock(1980, 80)]
    assert state.sample()["sm_mhz_window"] == {"n": 2, "min": 1980, "median": 1980}
    # No sample since (a row shorter than the driver's period): no window, not an old one.
    state.sample(ending=False)
    assert "sm_mhz_window" not in state.sample()
    # The run's report counts the rows with a window and those without.
    assert state.describe()["sm_clock_window"] == {"read": 2, "none": 1}
    # An NVML that keeps no clock samples gives none.
    monkeypatch.delattr(FakeNvml, "nvmlDeviceGetSamples")
    fake_nvml.clock_samples += [clock(1980, 90)]
    assert "sm_mhz_window" not in state.sample()
    assert state.describe()["sm_clock_window"].startswith("unavailable")


def test_a_clock_window_opens_when_the_driver_kept_no_sample_before_it(fake_nvml):
    # No clock sample kept when the process opens its first window (NVML answers
    # NotFound): the window still opens then, so the rows after it are counted.
    state = nvml.NvmlState()
    state.sample(ending=False)
    now_us = time.time_ns() // 1000
    assert "sm_mhz_window" not in state.sample()
    state.sample(ending=False)
    fake_nvml.clock_samples += [clock(1965, now_us + 10), clock(1965, now_us + 20)]
    assert state.sample()["sm_mhz_window"] == {"n": 2, "min": 1965, "median": 1965}
    assert state.describe()["sm_clock_window"] == {"read": 1, "none": 1}


def test_a_clock_sample_read_that_fails_is_named_in_the_run_identity(fake_nvml, monkeypatch):
    class NVMLError_NotSupported(Exception):
        pass

    def refuse(handle, kind, since):
        raise NVMLError_NotSupported("Not Supported")

    monkeypatch.setattr(fake_nvml, "nvmlDeviceGetSamples", refuse)
    state = nvml.NvmlState()
    state.sample(ending=False)
    assert "sm_mhz_window" not in state.sample()
    assert state.describe()["sm_clock_window"] == {"read": 0, "none": 1, "error": "NVMLError_NotSupported"}


def test_an_nvml_without_per_process_utilization_gives_no_answer(fake_nvml, monkeypatch):
    monkeypatch.delattr(FakeNvml, "nvmlDeviceGetProcessUtilization")
    state = nvml.NvmlState()
    assert state.sample()["other_procs"] is None
    assert state.describe()["device_shared_check"].startswith("unavailable")


def test_a_shared_row_carries_the_marker_and_the_record_says_how_many(fake_nvml, tmp_path, monkeypatch, capsys):
    import json

    from zlbench import benchenv, rowstats

    monkeypatch.setenv(benchenv.RUN_DIR, str(tmp_path))
    recorder = RowRecorder("cuda")
    recorder._state = nvml.NvmlState()
    row = TimedRow("log1p", "torch.bfloat16", "[1073741824]", "gems")
    measured = Measured(1.0, 3.9, 100, 0.24, "budget")
    for others in (False, True):
        recorder.start()
        fake_nvml.samples.append(util(ME, sm=90, ts=len(fake_nvml.samples) + 1))
        recorder.warm()
        fake_nvml.samples.append(util(ME, sm=90, ts=len(fake_nvml.samples) + 1))
        if others:
            fake_nvml.samples.append(util(31337, sm=70, ts=len(fake_nvml.samples) + 1))
        recorder.finish(row, measured, "graph")
    records, _ = rowstats.read(tmp_path)
    assert [r["throttled"] for r in records] == [None, "device_shared"]
    assert records[1]["device"]["after"]["other_procs"] == 1
    markers = [parse_marker(line) for line in capsys.readouterr().out.splitlines() if line.startswith(DEVICE_THROTTLED)]
    assert len(markers) == 1 and markers[0].get("why") == "device_shared" and markers[0].get("other_procs") == "1"
    assert json.dumps(records)  # the record stays plain JSON

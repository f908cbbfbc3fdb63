"""What a running attempt is doing, from its log, its phases.json and the caches: the
phase split of an attempt's wall time and the kind of a timeout."""

import json
import time

import pytest

from zlbench.batch import activity
from zlbench.batch.activity import Activity, phase_times, split_phases


def test_phase_split_of_an_attempt():
    log = ["noise", "RUN_PHASE phase=session_start t=103.0", "RUN_PHASE phase=collected t=105.0",
           "RUN_PHASE phase=first_row t=110.0", "RUN_PHASE phase=session_start t=999",
           "RUN_PHASE phase=session_finish t=120.0"]
    times = phase_times(log)
    assert times == {"session_start": 103.0, "collected": 105.0, "first_row": 110.0,
                     "session_finish": 120.0}
    assert split_phases(times, 100.0, 121.5) == {
        "startup_s": 3.0, "collect_s": 2.0, "first_call_s": 5.0, "measure_s": 10.0,
        "overhead_s": 4.5}   # 21.5 s of wall, 17 s of pytest session
    # Killed while compiling: no first row, no end; what did happen is kept.
    assert split_phases({"session_start": 103.0, "collected": 105.0}, 100.0, 200.0) == {
        "startup_s": 3.0, "collect_s": 2.0, "first_call_s": None, "measure_s": None,
        "overhead_s": None}


@pytest.fixture
def attempt(tmp_path):
    log = tmp_path / "attempt.log"
    log.write_text("")
    run_dir = tmp_path / "run"
    (run_dir / "plugins").mkdir(parents=True)
    cache = tmp_path / "triton"
    cache.mkdir()
    env = {"TRITON_CACHE_DIR": str(cache), "FLAGGEMS_CACHE_DIR": str(tmp_path / "fg"), "HOME": str(tmp_path)}
    return log, run_dir, cache, env


def _phases(run_dir, rows=0, **times):
    (run_dir / "plugins" / "phases.json").write_text(json.dumps({"times": times, "rows_timed": rows}))


def test_timeout_kinds(attempt, monkeypatch):
    log, run_dir, cache, env = attempt
    act = Activity(log, run_dir, env)
    act.sample()
    assert act.kind(stalled=False) == activity.STARTING          # pytest never got going
    _phases(run_dir, session_start=1.0, collected=2.0)
    time.sleep(0.01)
    (cache / "kernel-1").mkdir()                                  # a kernel compiled
    act.sample()
    assert act.kind(stalled=False) == activity.COMPILING
    _phases(run_dir, rows=4, session_start=1.0, collected=2.0, first_row=3.0)
    act.sample()
    assert act.kind(stalled=False) == activity.COMPILING          # it compiled a moment ago
    monkeypatch.setattr(activity, "COMPILE_WINDOW_S", 0.0)
    time.sleep(0.01)
    assert act.kind(stalled=False) == activity.MEASURING          # rows, and the cache is quiet
    assert act.kind(stalled=True) == activity.NO_PROGRESS
    assert act.describe().startswith("4 latency call(s) timed; kernel/tuner caches grew 1 time(s)")


class _Clock:
    def __init__(self):
        self.now = 1000.0

    def monotonic(self):
        return self.now


def test_no_progress_means_no_output_no_row_and_no_new_kernel(attempt, monkeypatch):
    log, run_dir, cache, env = attempt
    clock = _Clock()
    monkeypatch.setattr(activity, "time", clock)
    act = Activity(log, run_dir, env, stall_s=30)
    clock.now += 20
    assert not act.stalled()
    log.write_text("a line\n")                                  # output is progress
    clock.now += 20
    assert not act.stalled()
    (cache / "kernel-2").mkdir()                                  # so is a new kernel
    clock.now += 20
    assert not act.stalled()
    _phases(run_dir, rows=1)                                      # and a row timed
    clock.now += 20
    assert not act.stalled()                                      # (seen now)
    clock.now += 29
    assert not act.stalled()
    clock.now += 2
    assert act.stalled()                                          # 31 s of nothing
    assert "last progress 31 s before" in act.describe()
    assert not Activity(log, run_dir, env).stalled()              # no stall limit: never

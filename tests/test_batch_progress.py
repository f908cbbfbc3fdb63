"""Progress: the ETA, plain lines for logs, the live table, the final report."""

import io
from pathlib import Path

from zlbench.batch.progress import Progress, ProgressState, fmt_duration
from zlbench.batch.report import render_report


def test_eta_is_the_slowest_device_at_the_mean_operator_time():
    state = ProgressState({"0": 3, "1": 1})
    assert state.eta(now=0.0) is None
    state.devices["0"].done = 1
    state.durations.append(10.0)
    # device 0: two operators waiting at 10 s each; device 1: one waiting.
    assert state.eta(now=0.0) == 20.0
    state.devices["0"].current, state.devices["0"].started = "x", 0.0
    assert state.eta(now=4.0) == 10.0 + 6.0


def test_eta_projects_from_expected_durations_and_fills_gaps_with_the_mean():
    # --balance-from gave device 0's queue 100, 50, ? and device 1's 30.
    state = ProgressState({"0": 3, "1": 1}, expected={"0": [100.0, 50.0, None], "1": [30.0]})
    assert state.eta(now=0.0) is None            # an unknown and no mean yet
    state.devices["0"].done = 1
    state.durations.append(80.0)
    assert state.eta(now=0.0) == 50.0 + 80.0
    state.devices["0"].current, state.devices["0"].started = "x", 0.0
    assert state.eta(now=20.0) == 30.0 + 80.0    # the running one less its elapsed time
    assert state.eta(now=90.0) == 0.0 + 80.0


def test_plain_lines_name_device_operator_status_and_counts():
    out = io.StringIO()
    with Progress({"0": 1, "1": 1}, mode="plain", out=out, heartbeat_s=0) as progress:
        progress.started("1", "mm")
        progress.attempt("1", "mm", 2, 1)
        progress.finished("1", "mm", {"status": "failed", "total_s": 75, "attempts": 2,
                                      "dtype_level": 1, "reason": "exit 1: ValueError: bad"})
    text = out.getvalue()
    assert "[1] mm started (1/1 on this device)" in text
    assert "[1] mm attempt 2 (dtype level 1)" in text
    assert "[1] mm failed in 1:15 (attempts 2, dtype level 1) - exit 1: ValueError: bad" in text
    assert "1/2 done, 1 failed" in text


def test_live_table_shows_current_operator_per_device():
    from rich.console import Console

    progress = Progress({"0": 2, "1": 1}, mode="off")
    progress.started("0", "softmax")
    console = Console(file=io.StringIO(), width=120)
    console.print(progress.table())
    text = console.file.getvalue()
    assert "softmax" in text and "0/2" in text and "0/3 done" in text


def test_report_counts_slowest_and_failures(tmp_path):
    rows = {
        "abs": {"status": "ok", "total_s": "3.0", "device": "0", "attempts": "1", "dtype_level": "0"},
        "mm": {"status": "timeout", "total_s": "600", "device": "1", "attempts": "2",
               "dtype_level": "0", "reason": "timed out"},
        "sum": {"status": "ok", "total_s": "5.0", "device": "1", "attempts": "2", "dtype_level": "1"},
        "gelu": {"status": "dismissed", "reason": "known bug"},
    }
    text = render_report(Path("/b"), rows, ["abs", "gelu", "mm", "sum", "silu"], 700.0, False,
                         devices=["0", "1"])
    assert "5 operators in 11:40 on 2 device(s) (0,1): ok 2, timeout 1, dismissed 1, not run 1" in text
    assert text.index("  mm ") < text.index("  sum ") < text.index("  abs ")
    assert "Failures (1):" in text and "timed out" in text
    assert "sum (level 1)" in text
    assert "--resume --out /b" in text   # silu never ran
    # The closing lines name the next commands, ready to paste.
    assert text.splitlines()[-2:] == [
        "Next: zlbench summary /b  (the tables, and summary.csv)",
        "      zlbench report /b -o /b/report.html  (one HTML page: plots, every row, failures)"]
    assert fmt_duration(3725) == "1:02:05"


def test_report_says_where_the_time_went_and_projects_what_is_left():
    phases = {"startup_s": "1.0", "collect_s": "2.0", "first_call_s": "3.0", "measure_s": "4.0"}
    rows = {
        "abs": {"status": "ok", "total_s": "11.0", "duration_s": "11.0", "overhead_s": "1.0",
                "run_mode": "worker", **phases},
        "sum": {"status": "ok", "total_s": "13.0", "duration_s": "13.0", "overhead_s": "3.0",
                "run_mode": "fresh", **phases},
    }
    text = render_report(Path("/b"), rows, ["abs", "sum", "mm", "silu"], 30.0, True, devices=["0"])
    assert ("Where the time went (2 operators, last attempts): start-up 0:02 (8%), collection "
            "0:04 (17%), first call (compile, autotune) 0:06 (25%), measurement 0:08 (33%)") in text
    assert ("fixed cost per operator (wall minus the pytest session): median 2.00 s, total 0:04; "
            "ran as fresh 1, worker 1") in text
    # Two not run, at this batch's mean of 12 s, on one device.
    assert "2 operator(s) not run: about 0:24 more on 1 device(s) at this batch's mean" in text

"""The plugins inside a real pytest process over a tiny FlagGems-shaped benchmark tree.

tests/fixtures/fake_flaggems/benchmark/base.py counts how often the upstream timer
(``zlbench.cpu_timer.do_bench``) really runs, underneath whatever the plugins patch in.
Two tests, 4 rows each side: fake_abs (float32, float16 x 2 shapes) and fake_scale
(bfloat16 x 2 shapes, a class defined inside its test function): 6 rows, 12 timings.
"""

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from zlbench.markers import BENCHMARK_DIRECT_NO_CUDAGRAPH, parse_marker

FAKE_TREE = Path(__file__).parent / "fixtures" / "fake_flaggems"
ROWS, TIMINGS = 6, 12


def run_fake(tmp_path: Path, plugins, env_extra, with_run_dir=True):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    counts = tmp_path / "counts.json"
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("ZL_") and k not in ("GEMS_VENDOR", "FLAGGEMS_VENDOR")}
    env.update(FAKE_COUNTS=str(counts), PYTHONUNBUFFERED="1", PYTEST_DISABLE_PLUGIN_AUTOLOAD="1",
               **env_extra)
    if with_run_dir:
        env["ZL_RUN_DIR"] = str(run_dir)
    args = [sys.executable, "-m", "pytest", "benchmark/bench_fake_ops.py", "-s", "-q",
            "-p", "no:cacheprovider"]
    for plugin in plugins:
        args += ["-p", plugin]
    proc = subprocess.run(args, cwd=FAKE_TREE, env=env, capture_output=True, text=True,
                          timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout, json.loads(counts.read_text()), run_dir


def table_rows(stdout):
    """(op, dtype, size detail) of every printed row."""
    rows, op, dtype = [], None, None
    for line in stdout.splitlines():
        if line.startswith("Operator: "):
            op = line.split()[1]
            dtype = line.split("dtype=")[1].split(",")[0]
        elif line.startswith("SUCCESS"):
            rows.append((op, dtype, line.split(" " * 10)[-1].strip()))
    return rows


def markers(stdout):
    found = [parse_marker(line) for line in stdout.splitlines()]
    return [m for m in found if m is not None]


@pytest.fixture(scope="module")
def direct_run(tmp_path_factory):
    return run_fake(
        tmp_path_factory.mktemp("direct"),
        ["zlbench.plugins.device_setup", "zlbench.plugins.direct_timer"],
        {"ZL_BACKEND": "cuda", "ZL_TIMER": "direct", "ZL_DIRECT_TIMER": "do_bench",
         "ZL_DIRECT_REPEAT": "3"},
    )


def row_records(run_dir):
    return [json.loads(line) for line in (run_dir / "row_stats.jsonl").read_text().splitlines()]


def test_direct_timer_runs_the_upstream_timer_repeat_times_per_timing(direct_run):
    stdout, counts, run_dir = direct_run
    assert counts["do_bench"] == 3 * TIMINGS
    data = json.loads((run_dir / "plugins" / "direct_timer.json").read_text())
    assert data["timer"] == "direct" and data["repeat"] == 3 and data["mode"] == "do_bench"
    assert data["rows_direct"] == ROWS and data["timings"] == TIMINGS
    assert data["timings_repeated"] == TIMINGS and data["latency_calls_untimed"] == 0
    assert data["benchmark_classes"] == ["benchmark.base.Benchmark"]
    assert "zlbench.cpu_timer.do_bench" in data["patched"]
    assert len(table_rows(stdout)) == ROWS and markers(stdout) == []
    footer = [ln for ln in stdout.splitlines() if ln.startswith("zlbench[direct_timer]")]
    assert footer == [f"zlbench[direct_timer] timer=direct mode=do_bench repeat=3 "
                      f"rows_direct={ROWS} timings={TIMINGS} timings_repeated={TIMINGS} "
                      f"timings_single_by_request=0 requested_timer=direct "
                      f"latency_calls={TIMINGS} latency_calls_untimed=0"]
    # Each timing's record carries the spread of its 3 whole do_bench calls.
    records = row_records(run_dir)
    assert len(records) == TIMINGS and [r["side"] for r in records] == ["torch", "gems"] * ROWS
    assert all(r["samples"] == 3 and r["stop"] == "do_bench" and r["spread"] is not None
               for r in records)
    assert {(r["op"], r["dtype"], r["shape"]) for r in records} == set(table_rows(stdout))


def test_percall_timer_times_every_call_itself_until_the_median_is_pinned(tmp_path):
    stdout, counts, run_dir = run_fake(
        tmp_path, ["zlbench.plugins.direct_timer"],
        {"ZL_BACKEND": "cpu", "ZL_TIMER": "direct", "ZL_CPU_THREADS": "1",
         "ZL_DIRECT_NOISE": "5"},
    )
    assert counts["do_bench"] == 0          # the upstream timer is never called
    data = json.loads((run_dir / "plugins" / "direct_timer.json").read_text())
    assert data["mode"] == "kernels" and data["clock"] == "host" and data["host_threads"] == 1
    assert data["rows_direct"] == ROWS and data["timings"] == TIMINGS
    assert sum(data["stops"].values()) == TIMINGS
    assert data["device_state"]["source"] == "host" and data["device_state"]["row_records"] == TIMINGS
    records = row_records(run_dir)
    assert len(records) == TIMINGS
    for r in records:
        assert r["timer"] == "direct" and r["samples"] >= 10 and r["stop"] in ("noise", "time_cap")
        assert r["median_ms"] > 0 and r["spread"] is not None and r["clock"] == "host"
        # Stopped for noise only when the target (5%) was met.
        assert r["stop"] != "noise" or r["spread"] <= 0.05
        # The host's state around the row: the process's CPU time against the wall.
        before, after = r["device"]["before"], r["device"]["after"]
        assert after["wall_s"] > before["wall_s"] and after["cpu_s"] >= before["cpu_s"]
    # A row that got less than 90% of a CPU (this machine is shared), or whose core ran
    # the reference loop more than 10% slower than the run's median reading so far, says so.
    readings = []
    for r in records:
        speeds = [r["device"][when]["host_speed"] for when in ("before", "after")]
        readings += speeds
        reasons = set((r["throttled"] or "").split(",")) - {""}
        assert reasons <= {"cpu_contention", "host_slow"}
        assert ("host_slow" in reasons) == (min(speeds) < 0.9 * statistics.median(readings))
    throttled = [r for r in records if r["throttled"]]
    found = markers(stdout)
    assert [m.name for m in found] == ["DEVICE_THROTTLED"] * len(throttled)
    assert data["device_state"]["rows_throttled"] == len(throttled)


def test_device_setup_reaches_the_benchmark_process(direct_run):
    _, counts, run_dir = direct_run
    assert counts["GEMS_VENDOR"] == counts["FLAGGEMS_VENDOR"] == "nvidia"
    data = json.loads((run_dir / "plugins" / "device_setup.json").read_text())
    assert data["vendor"] == "nvidia" and data["set"]["GEMS_VENDOR"] == "nvidia"


def test_report_adds_nothing_when_output_is_a_pipe(direct_run):
    stdout, _, _ = direct_run
    assert "\033[" not in stdout and "same in every row" not in stdout


def test_graph_timer_marks_every_row_it_cannot_capture(tmp_path):
    # No capturable work here (no GPU, or CPU tensors giving an empty graph): every
    # timing falls back to the direct timer, each with a marker naming its row.
    stdout, counts, run_dir = run_fake(
        tmp_path, ["zlbench.plugins.graph_timer"],
        {"ZL_BACKEND": "cuda", "ZL_TIMER": "graph", "ZL_DIRECT_TIMER": "do_bench",
         "ZL_DIRECT_REPEAT": "2", "ZL_GRAPH_PLACEMENTS": "3"},
    )
    found = markers(stdout)
    assert len(found) == TIMINGS
    assert all(m.name == BENCHMARK_DIRECT_NO_CUDAGRAPH and m.get("repeat") == "2"
               and m.get("direct") == "do_bench" for m in found)
    assert {m.get("phase") for m in found} == {"capture"}
    printed = table_rows(stdout)
    marked = [(m.get("op"), m.get("dtype"), m.get("shape")) for m in found]
    assert sorted(set(marked)) == sorted(printed)
    assert [m.get("side") for m in found] == ["torch", "gems"] * ROWS
    assert counts["do_bench"] == 2 * TIMINGS
    data = json.loads((run_dir / "plugins" / "graph_timer.json").read_text())
    assert (data["rows_graph"], data["rows_direct_fallback"]) == (0, ROWS)
    assert data["placements_wanted"] == 3 and data["timings_per_placements"] == {}
    assert data["timings_direct_fallback"] == TIMINGS and len(data["fallbacks"]) == TIMINGS
    assert data["fallbacks"][0]["shape"] == printed[0][2]
    footer = [ln for ln in stdout.splitlines() if ln.startswith("zlbench[graph_timer]")]
    assert len(footer) == 1 and f"rows_direct_fallback={ROWS} " in footer[0]
    assert [r["timer"] for r in row_records(run_dir)] == ["direct"] * TIMINGS


def test_plugins_are_silent_without_a_run_dir(tmp_path):
    stdout, counts, run_dir = run_fake(
        tmp_path,
        ["zlbench.plugins.device_setup", "zlbench.plugins.graph_timer"],
        {"ZL_BACKEND": "cuda", "ZL_DIRECT_REPEAT": "5"},
        with_run_dir=False,
    )
    assert counts["do_bench"] == TIMINGS
    assert counts["GEMS_VENDOR"] is None
    assert markers(stdout) == [] and "zlbench[" not in stdout
    assert not (run_dir / "plugins").exists()


def test_phase_markers_in_order_with_rows_and_plugins_recorded(tmp_path):
    stdout, _, run_dir = run_fake(
        tmp_path, ["zlbench.plugins.phases", "zlbench.plugins.device_setup",
                   "zlbench.plugins.direct_timer"],
        {"ZL_BACKEND": "cuda", "ZL_TIMER": "direct", "TRITON_CACHE_DIR": str(tmp_path / "tc")})
    phases = [(m.get("phase"), float(m.get("t"))) for m in markers(stdout) if m.name == "RUN_PHASE"]
    assert [p for p, _ in phases] == ["session_start", "collected", "first_row", "session_finish"]
    times = [t for _, t in phases]
    assert times == sorted(times)
    data = json.loads((run_dir / "plugins" / "phases.json").read_text())
    assert data["times"] == {p: pytest.approx(t, abs=1e-3) for p, t in phases}
    assert data["rows_timed"] == TIMINGS
    assert data["cache_dirs"][0] == str(tmp_path / "tc")
    plugins = data["pytest_plugins"]
    assert plugins["autoload"] is False and plugins["distributions"] == []
    assert {"zlbench.plugins.phases", "zlbench.plugins.direct_timer"} <= set(plugins["modules"])
    # The first row is timed after collection and before the last table line.
    lines = stdout.splitlines()
    first_row = next(i for i, ln in enumerate(lines) if ln.startswith("RUN_PHASE phase=first_row"))
    assert first_row < max(i for i, ln in enumerate(lines) if ln.startswith("SUCCESS"))

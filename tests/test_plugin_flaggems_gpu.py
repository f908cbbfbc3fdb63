"""The timer plugins in real benchmark processes on a CUDA device.

The benchmark process is started exactly as ``zlbench run`` starts it (docs/design.md,
"The benchmark process"): ``python -m pytest <nodes> -s -p <plugins> --level core
--mode kernel`` in the corpus root, with ZL_RUN_DIR, ZL_BACKEND, ZL_TIMER and
ZL_DIRECT_REPEAT set. The FlagGems part needs FLAGGEMS_DIR (a checkout: the parent of
benchmark/); it is skipped without it.

    FLAGGEMS_DIR=~/FlagGems pytest -m gpu tests/ -s
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from zlbench.markers import BENCHMARK_DIRECT_NO_CUDAGRAPH
from zlbench.runlog import parse_log

pytestmark = pytest.mark.gpu

CORPUS = Path(__file__).resolve().parents[1] / "zlbench" / "sample_corpus"
FLAGGEMS_DIR = os.environ.get("FLAGGEMS_DIR")
# FlagGems' default warmup is 1000 ms per timing call; 100 keeps the runs short and is
# passed to both timers alike. Override with ZL_GPU_TEST_WARMUP_MS.
WARMUP_MS = os.environ.get("ZL_GPU_TEST_WARMUP_MS", "100")
HOST_SYNC = {"nonzero", "masked_select", "unique2"}
# Host-synchronising ops interleaved with the rest: whatever follows a failed capture
# must still be graph-timed.
FLAGGEMS_NODES = [
    "benchmark/test_nonzero.py::test_nonzero",
    "benchmark/test_abs.py::test_abs",
    "benchmark/test_masked_select.py::test_masked_select",
    "benchmark/test_softmax.py::test_softmax",
    "benchmark/test_unique.py::test_unique2",
    "benchmark/test_sum.py::test_sum",
    "benchmark/test_dropout.py::test_dropout",
    "benchmark/test_rand.py::test_rand",
]
PLUGINS = {
    "graph": ["zlbench.plugins.device_setup", "zlbench.plugins.graph_timer"],
    "direct": ["zlbench.plugins.device_setup", "zlbench.plugins.direct_timer"],
    "none": [],
}


def start_bench(root, nodes, timer, run_dir, repeat=1):
    """Start one benchmark process; ``finish_bench`` waits for it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZL_")}
    env["PYTHONUNBUFFERED"] = "1"
    args = [sys.executable, "-m", "pytest", *nodes, "-s", "-p", "no:cacheprovider"]
    for plugin in PLUGINS[timer]:
        args += ["-p", plugin]
    args += ["--level", "core", "--mode", "kernel", "--warmup", WARMUP_MS]
    if timer != "none":
        run_dir.mkdir(parents=True, exist_ok=True)
        env.update(ZL_RUN_DIR=str(run_dir), ZL_BACKEND="cuda", ZL_TIMER=timer,
                   ZL_DIRECT_REPEAT=str(repeat))
    log_path = run_dir.parent / f"{run_dir.name}.log"
    log = open(log_path, "w")
    proc = subprocess.Popen(args, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
    return proc, log, log_path, run_dir / "plugins" / f"{timer}_timer.json"


def finish_bench(started, timeout=900):
    """(returncode, log text, plugin json or None)."""
    proc, log, log_path, plugin_json = started
    try:
        proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
    data = json.loads(plugin_json.read_text()) if plugin_json.exists() else None
    return proc.returncode, log_path.read_text(errors="replace"), data


def bench_process(root, nodes, timer, run_dir, repeat=1, timeout=900):
    return finish_bench(start_bench(root, nodes, timer, run_dir, repeat), timeout)


def measured(row):
    return row.status == "SUCCESS" and row.gems_ms is not None and row.gems_ms > 0


def key(row):
    return (row.op, row.dtype, row.shape)


def fallback_markers(parsed):
    return [m for _, m in parsed.markers if m.name == BENCHMARK_DIRECT_NO_CUDAGRAPH]


# --- the bundled sample corpus ---------------------------------------------------------

def test_sample_corpus_is_graph_timed_row_for_row(tmp_path):
    nodes = ["benchmark/test_abs.py::test_abs", "benchmark/test_softmax.py",
             "benchmark/test_sum.py"]
    rc, log, data = bench_process(CORPUS, nodes, "graph", tmp_path / "graph")
    assert rc == 0, log[-4000:]
    parsed = parse_log(log)
    assert parsed.rows and all(measured(r) for r in parsed.rows)
    assert fallback_markers(parsed) == []
    assert data["rows_graph"] == len(parsed.rows) and data["rows_direct_fallback"] == 0
    assert data["latency_calls_untimed"] == 0
    assert "triton.testing.do_bench" in data["patched"] or "zlbench.cpu_timer.do_bench" in data["patched"]

    rc, log_direct, _ = bench_process(CORPUS, nodes, "direct", tmp_path / "direct", repeat=3)
    assert rc == 0, log_direct[-4000:]
    assert sorted(key(r) for r in parse_log(log_direct).rows) == sorted(key(r) for r in parsed.rows)


# --- FlagGems --------------------------------------------------------------------------

needs_flaggems = pytest.mark.skipif(not FLAGGEMS_DIR, reason="set FLAGGEMS_DIR to a FlagGems checkout")


@pytest.fixture(scope="module")
def flaggems_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("flaggems")
    # Both at once: these tests check which rows exist and how they were timed, not
    # latencies, so sharing the GPU does not matter and the wall time halves.
    graph = start_bench(FLAGGEMS_DIR, FLAGGEMS_NODES, "graph", root / "graph")
    kernel = start_bench(FLAGGEMS_DIR, FLAGGEMS_NODES, "none", root / "kernel")
    return finish_bench(graph), finish_bench(kernel)


@needs_flaggems
def test_flaggems_graph_run_passes_every_test(flaggems_runs):
    (rc, log, _), _ = flaggems_runs
    assert rc == 0, log[-6000:]


@needs_flaggems
def test_host_sync_rows_are_direct_timed_with_a_marker_for_each_side(flaggems_runs):
    (_, log, data), _ = flaggems_runs
    parsed = parse_log(log)
    marked = {}
    for m in fallback_markers(parsed):
        marked.setdefault((m.get("op"), m.get("dtype"), m.get("shape")), set()).add(m.get("side"))
        assert m.get("repeat") == "1" and m.get("phase") in ("warmup", "capture", "replay")
    sync_rows = [r for r in parsed.rows if r.op in HOST_SYNC]
    assert sync_rows, "no nonzero/masked_select/unique rows printed"
    for row in sync_rows:
        assert measured(row), row
        assert marked.get(key(row)) == {"torch", "gems"}, row
    assert data["rows_direct_fallback"] == len(sync_rows)
    # Timed per call until pinned (or capped), not by one do_bench mean.
    assert data["direct"] == "kernels" and "do_bench" not in data["direct_stops"]
    assert sum(data["direct_stops"].values()) == data["timings_direct_fallback"]


@needs_flaggems
def test_rows_after_a_failed_capture_are_still_graph_timed(flaggems_runs):
    (_, log, data), _ = flaggems_runs
    parsed = parse_log(log)
    marked_ops = {m.get("op") for m in fallback_markers(parsed)}
    assert marked_ops <= HOST_SYNC, marked_ops  # abs, softmax, sum, dropout, rand capture
    others = [r for r in parsed.rows if r.op not in HOST_SYNC]
    assert others and all(measured(r) for r in others)
    assert data["rows_graph"] == len(others)
    assert data["latency_calls_untimed"] == 0


@needs_flaggems
def test_no_row_missing_compared_with_flaggems_kernel_mode(flaggems_runs):
    (_, log, _), (_, kernel_log, _) = flaggems_runs
    graph_keys = sorted(key(r) for r in parse_log(log).rows)
    kernel_keys = sorted(key(r) for r in parse_log(kernel_log).rows)
    assert graph_keys == kernel_keys

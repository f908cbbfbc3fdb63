"""benchmarks/fixed_cost.py over the bundled sample on CPU: the plain and profiled batches,
one profile per phase of each benchmark process, and the report that reads them."""

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import load_script

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "fixed_cost.py"
PROFILED_PHASES = ("configure", "collect", "first_call", "teardown")


def _script(*args, timeout=300, **extra_env):
    env = {k: v for k, v in os.environ.items() if k not in ("FLAGGEMS_DIR", "PYTEST_ADDOPTS")}
    env.update(extra_env)
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_each_phase_of_each_benchmark_process_is_profiled_and_reported(tmp_path):
    out = tmp_path / "fc"
    proc = _script("--ops", "abs,add,sum", "--out", out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # The plain batch carries no profile; the profiled one a profile per phase per operator.
    assert not (out / "plain" / "abs" / "phase_profile").exists()
    for op in ("abs", "add", "sum"):
        pdir = out / "profiled" / op / "phase_profile"
        assert sorted(p.stem for p in pdir.glob("*.pstats")) == sorted(PROFILED_PHASES)
        spans = json.loads((pdir / "spans.json").read_text())
        # measure is timed, not profiled, unless asked; every phase began after the one before.
        assert set(spans["spans"]) == set(PROFILED_PHASES) | {"measure"}
        begun = [spans["t"][p] for p in ("configure", "collect", "first_call", "measure", "teardown", "end")]
        assert begun == sorted(begun)

    result = json.loads((out / "fixed_cost.json").read_text())
    for name in ("plain_median_s", "profiled_median_s"):
        assert set(result[name]) == {"startup_s", "collect_s", "first_call_s", "measure_s", "after_session_s"}
        assert all(v >= 0 for v in result[name].values())
    # A worker's first operator imports the library in its own configure phase: the
    # profiles stand for the prestarted ones, and say which they leave out.
    assert result["launch"]["abs"] == "plain" and "prestarted" in result["launch"].values()
    chosen = {op for op, mode in result["launch"].items() if mode == "prestarted"}
    assert result["profiles_leave_out"] == {op: "plain start" for op in {"abs", "add", "sum"} - chosen}
    # What pytest did not see: before its conftests, and after its unconfigure.
    assert set(result["outside_pytest"]) == chosen
    assert 0 < result["outside_pytest_median_s"]["before_s"] < result["profiled_median_s"]["startup_s"]
    assert result["outside_pytest_median_s"]["after_s"] > 0
    for phase in PROFILED_PHASES:
        entry = result["phases"][phase]
        assert entry["operators"] == len(chosen) and entry["median_wall_s"] > 0
        assert abs(sum(entry["by_package"].values()) - 1) < 0.01
        assert entry["top_cumulative"] and all(f["cum_s"] >= f["own_s"] >= 0 for f in entry["top_cumulative"])
    assert "by_package" not in result["phases"]["measure"]
    # The sample's own benchmark code and zlbench's plugins are told apart from the rest.
    packages = set().union(*(result["phases"][p]["by_package"] for p in PROFILED_PHASES))
    assert {"zlbench", "pytest", "benchmark (corpus)"} <= packages
    assert "== collect: median wall" in proc.stdout

    # A kept pass is not run again; --profile-measure profiles the measure phase too.
    again = _script("--ops", "abs,add,sum", "--passes", "plain,report", "--out", out)
    assert again.returncode == 0 and "== plain: kept" in again.stdout
    measured = _script("--ops", "abs,sum", "--passes", "profiled,report", "--profile-measure", "--out", tmp_path / "m")
    assert measured.returncode == 0, measured.stdout + measured.stderr
    result = json.loads((tmp_path / "m" / "fixed_cost.json").read_text())
    assert result["phases"]["measure"]["by_package"]
    assert (tmp_path / "m" / "profiled" / "sum" / "phase_profile" / "measure.pstats").is_file()


@pytest.mark.slow
def test_a_pass_cut_short_is_resumed_and_one_of_other_operators_refused(tmp_path):
    out = tmp_path / "fc"
    first = _script("--ops", "abs,sum", "--passes", "plain", "--out", out)
    assert first.returncode == 0, first.stdout + first.stderr
    # As if the pass had stopped before sum: no row, no run dir.
    status = out / "plain" / "ops_status.csv"
    with open(status, newline="") as f:
        rows = list(csv.DictReader(f))
    with open(status, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(r for r in rows if r["operator"] != "sum")
    shutil.rmtree(out / "plain" / "sum")
    again = _script("--ops", "abs,sum", "--passes", "plain,report", "--out", out)
    assert again.returncode == 0 and "== plain: abs,sum (resumed)" in again.stdout, again.stdout + again.stderr
    plain = json.loads((out / "fixed_cost.json").read_text())["plain"]
    assert plain["sum"]["status"] == "ok" and plain["abs"]["status"] == "ok"
    other = _script("--ops", "abs,add", "--passes", "plain", "--out", out)
    assert other.returncode == 1 and "holds a batch of abs,sum, not of --ops abs,add" in other.stderr


@pytest.mark.slow
def test_without_a_prestarted_process_the_profiles_say_they_hold_the_import(tmp_path):
    proc = _script("--ops", "abs,sum", "--passes", "profiled,report", "--out", tmp_path / "fc",
                   ZL_WORKER_PRESTART="0")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads((tmp_path / "fc" / "fixed_cost.json").read_text())
    assert set(result["launch"].values()) == {"plain"} and result["profiles_leave_out"] == {}
    assert result["phases"]["configure"]["operators"] == 2
    assert "every configure phase below includes the library's import" in proc.stdout


def test_package_of_tells_the_corpus_zlbench_and_installed_packages_apart():
    fc = load_script("fixed_cost")
    roots = {"zlbench": "/r/zlbench/", "benchmark (corpus)": "/fg/benchmark/"}
    assert fc.package_of("~", roots) == "builtins"
    assert fc.package_of("<frozen importlib._bootstrap>", roots) == "builtins"
    assert fc.package_of("/r/zlbench/plugins/graph_timer.py", roots) == "zlbench"
    assert fc.package_of("/fg/benchmark/base.py", roots) == "benchmark (corpus)"
    assert fc.package_of("/v/lib/python3.12/site-packages/torch/cuda/graphs.py", roots) == "torch"
    assert fc.package_of("/v/lib/python3.12/site-packages/_pytest/main.py", roots) == "pytest"
    assert fc.package_of("/v/lib/python3.12/site-packages/pluggy/_hooks.py", roots) == "pytest"
    assert fc.package_of("/v/lib/python3.12/site-packages/six.py", roots) == "six"
    assert fc.package_of("/usr/lib/python3.12/json/encoder.py", roots) == "stdlib"
    assert fc.package_of("/somewhere/else.py", roots) == "other"
    # A corpus inside zlbench (the bundled sample) is the corpus, not zlbench.
    nested = {"zlbench": "/r/zlbench/", "benchmark (corpus)": "/r/zlbench/sample_corpus/"}
    assert fc.package_of("/r/zlbench/sample_corpus/benchmark/base.py", nested) == "benchmark (corpus)"
    assert fc.package_of("/r/zlbench/timing.py", nested) == "zlbench"


def test_an_unknown_pass_is_refused_by_name(tmp_path):
    proc = _script("--passes", "plain,cold", "--out", tmp_path / "x")
    assert proc.returncode == 2 and "--passes: unknown cold" in proc.stderr

"""benchmarks/cold_warm.py --smoke: the three passes over the bundled sample on CPU, the
results written pass by pass (a later call adds to them), and the per-batch timeout."""

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import load_script

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "cold_warm.py"


def _script(*args, timeout=300):
    env = {k: v for k, v in os.environ.items() if k not in ("FLAGGEMS_DIR", "TRITON_CACHE_DIR")}
    return subprocess.run([sys.executable, str(SCRIPT), "--smoke", *map(str, args)], env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_smoke_runs_every_pass_and_adds_to_earlier_results(tmp_path):
    out = tmp_path / "cw"
    first = _script("--passes", "cold-on", "--out", out)
    assert first.returncode == 1, first.stdout + first.stderr  # not every pass ran yet
    saved = json.loads((out / "cold_warm.json").read_text())
    assert list(saved["passes"]) == ["cold-on"] and saved["passes"]["cold-on"]["ops"]["mm"]["status"] == "ok"

    rest = _script("--out", out)
    assert rest.returncode == 0, rest.stdout + rest.stderr
    results = json.loads((out / "cold_warm.json").read_text())
    assert results["passes"]["cold-on"] == saved["passes"]["cold-on"]  # not run again
    assert set(results["passes"]) == {"cold-on", "cold-off", "warm"}
    # Each cold pass on caches of its own; warm on what cold-on left.
    for name, workers, cache in (("cold-on", "0", "cache-cold-on"), ("cold-off", "1", "cache-cold-off"),
                                 ("warm", "0", "cache-cold-on")):
        with open(out / name / "ops_status.csv", newline="") as f:
            (row,) = list(csv.DictReader(f))
        assert "compile_s" in row and "tune_s" in row
        identity = json.loads((out / name / "mm" / "run_identity.json").read_text())
        assert identity["compile_workers"] == int(workers)
        assert identity["tuner_cache"] == f"shared:{out / cache / 'flaggems'}"
        assert results["passes"][name]["ops"]["mm"]["duration_s"] == float(row["duration_s"])
    assert (out / "cache-cold-on").is_dir() and not (out / "cache-cold-off").exists()
    (mm,) = results["table"]
    assert mm["cold_on_over_warm"] == round(mm["cold_on_s"] / mm["warm_s"], 2)
    assert mm["records"] == "no records"  # the sample has no autotuned kernels
    assert mm["rows_off_to_on"] and "median" in mm["rows_off_to_on"]
    assert (out / "ab_cold.txt").read_text().startswith("A/B")
    assert "mm " in rest.stdout and "goal cold/warm <= 1.5" in rest.stdout


@pytest.mark.slow
def test_a_batch_over_its_timeout_is_interrupted_and_counted(tmp_path):
    out = tmp_path / "cw"
    proc = _script("--passes", "cold-off", "--timeout", "0.3", "--out", out)
    assert proc.returncode == 1
    got = json.loads((out / "cold_warm.json").read_text())["passes"]["cold-off"]
    assert got["timed_out"] is True and got["exit"] != 0


def test_per_operator_isolation_adds_the_pass_that_fills_the_warm_caches(tmp_path):
    cold_warm = load_script("cold_warm")
    args = cold_warm.parse(["--smoke", "--isolate-per-operator", "--out", str(tmp_path)])
    assert args.passes == ["cold-on", "cold-off", "fill", "warm"]
    assert "--isolate-tuner-cache" in (cmd := cold_warm.pass_command(args, "cold-on", tmp_path / "x"))
    assert cmd[cmd.index("--isolate-tuner-cache") + 1] == "1"
    assert cold_warm.pass_env(args, "warm")["TRITON_CACHE_DIR"] == str(tmp_path / "cache-fill" / "triton")
    plain = cold_warm.parse(["--smoke", "--out", str(tmp_path)])
    assert plain.passes == ["cold-on", "cold-off", "warm"]
    assert cold_warm.pass_env(plain, "warm")["TRITON_CACHE_DIR"] == str(tmp_path / "cache-cold-on" / "triton")
    with pytest.raises(SystemExit):  # warm alone has no cold-on caches to reuse
        cold_warm.parse(["--smoke", "--passes", "warm", "--out", str(tmp_path / "empty")])


@pytest.mark.slow
def test_a_script_stopped_by_sigterm_stops_its_batch_too(tmp_path):
    """`timeout 330 cold_warm.py ...` sends SIGTERM to the script alone; its batch runs in
    a session of its own and used to go on measuring beside the next job on the device."""
    import signal
    import time

    from zlbench import proc

    out = tmp_path / "cw"
    env = {k: v for k, v in os.environ.items() if k not in ("FLAGGEMS_DIR", "TRITON_CACHE_DIR")}
    script = subprocess.Popen([sys.executable, str(SCRIPT), "--smoke", "--passes", "cold-off", "--out", str(out)],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    batch = out / "cold-off"
    deadline = time.monotonic() + 120
    while not proc.tagged_processes("ZL_BATCH_DIR", str(batch)):
        assert script.poll() is None and time.monotonic() < deadline, "the batch never started"
        time.sleep(0.05)
    script.send_signal(signal.SIGTERM)
    output, _ = script.communicate(timeout=120)
    assert script.returncode != 0
    assert "cold-off: stopped with its batch" in output, output
    assert proc.tagged_processes("ZL_BATCH_DIR", str(batch)) == {}

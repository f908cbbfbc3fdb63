"""A real batch (`zlbench batch` -> `zlbench run` -> pytest) over a corpus whose
operators hang, crash, fail on one dtype, fail once, and fail always."""

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from zlbench.summary.rows import summarize
from zlbench.proc import is_alive, live_group_members, tagged_processes

CORPUS = Path(__file__).parent / "fixtures" / "faulty_corpus"



@pytest.mark.parametrize("mode", ["worker", "fresh"])
def test_each_failure_lands_with_its_status_attempts_and_dtype_level(tmp_path, mode):
    batch = tmp_path / "batch"
    state = tmp_path / "state"
    env = {**os.environ, "FAULTY_STATE_DIR": str(state),
           # Third-party pytest plugins only slow each run down here.
           "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    cmd = [sys.executable, "-m", "zlbench", "batch", "--flaggems-dir", str(CORPUS), "--backend", "cpu",
           "--devices", "0,1", "--out", str(batch), "--timeout", "120", "--op-timeout", "hang_op=8",
           "--kill-grace", "1", "--retries", "1", "--progress", "plain", "--dismiss", "none",
           "--ops", "good_op,hang_op,crash_op,dtype_op,flaky_op,broken_op", "--run-mode", mode]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 1, proc.stdout + proc.stderr

    with open(batch / "ops_status.csv", newline="") as f:
        rows = {r["operator"]: r for r in csv.DictReader(f)}
    got = {op: (r["status"], r["attempts"], r["dtype_level"]) for op, r in rows.items()}
    assert got == {
        "good_op": ("ok", "1", "0"),
        "hang_op": ("timeout", "2", "0"),       # retried once, timed out the same way: stop
        "crash_op": ("crashed", "2", "0"),      # SIGSEGV twice: deterministic, no dtype fallback
        "dtype_op": ("ok", "2", "1"),           # float16 fails, float32 (level 1) measures
        "flaky_op": ("ok", "2", "0"),           # CUDA launch failure once, then fine
        "broken_op": ("failed", "3", "2"),      # fails at every dtype level
    }, proc.stdout
    assert "SIGSEGV" in rows["crash_op"]["reason"]
    assert "broken_op: wrong result shape" in rows["broken_op"]["reason"]
    assert rows["dtype_op"]["dtypes"] == "float32"
    for op in ("good_op", "dtype_op", "flaky_op"):
        assert (batch / op / ".complete").is_file() and (batch / op / "run.log").is_file()
        identity = json.loads((batch / op / "run_identity.json").read_text())
        assert identity["backend"] == rows[op]["backend"] == "cpu"
        assert identity["device"]["index"] == rows[op]["device"]
    assert "Operator: dtype_op  Performance Test (dtype=torch.float32" in (batch / "dtype_op" / "run.log").read_text()

    # Nothing of any attempt is left running: every group is gone, the hang's
    # SIGTERM-ignoring pytest and its grandchild included.
    events = [json.loads(l) for l in (batch / "attempts.jsonl").read_text().splitlines()]
    groups = [e["pid"] for e in events if e["event"] == "attempt"]
    assert len(groups) == 12
    assert all(live_group_members(g) == [] for g in groups)
    hang_pids = [int(p) for line in (state / "hang_op.pids").read_text().splitlines()
                 for p in line.split()]
    assert hang_pids and not any(is_alive(p) for p in hang_pids)

    # Every attempt ran as asked, and says where its time went.
    assert {r["run_mode"] for r in rows.values()} == {mode}
    assert {e["mode"] for e in events if e["event"] == "attempt"} == {mode}
    assert rows["hang_op"]["timeout_kind"] == "timeout_measuring"
    assert "timed out after 8 s while measuring" in rows["hang_op"]["reason"]
    for op in ("good_op", "dtype_op", "flaky_op", "broken_op"):
        for column in ("startup_s", "collect_s", "measure_s", "overhead_s"):
            assert float(rows[op][column]) >= 0, (op, column)
    # No worker (nor anything else carrying the batch's tag) outlives the batch.
    assert tagged_processes("ZL_BATCH_DIR", str(batch.resolve())) == {}
    assert bool(list((batch / "logs" / "workers").glob("worker-*.log"))) == (mode == "worker")

    assert "6 operators" in proc.stdout and "Failures (3):" in proc.stdout
    assert "ok 3, failed 1, timeout 1, crashed 1" in proc.stdout

    # summary reads the fixture's tables as FlagGems prints them: title, then the column
    # titles with no blank line between (a blank line there would end each table empty).
    summary = summarize(batch)
    assert {r.op for r in summary.rows} == {"good_op", "dtype_op", "flaky_op"}
    assert not [i for i in summary.issues if i.kind == "empty_table"]

"""SIGKILL the batch driver mid-batch, then `zlbench batch --resume`: completed
operators are kept (not measured again), the interrupted one is set aside and re-run,
and what the dead driver left running is stopped."""

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from zlbench.proc import is_alive, tagged_processes

CORPUS = Path(__file__).parent / "fixtures" / "faulty_corpus"


def _events(batch):
    path = batch / "attempts.jsonl"
    if not path.exists():
        return []
    return [json.loads(l) for l in path.read_text().splitlines() if l.endswith("}")]



@pytest.mark.parametrize("mode", ["worker", "fresh"])
def test_sigkill_driver_then_resume(tmp_path, mode):
    batch = tmp_path / "batch"
    env = {**os.environ, "FAULTY_STATE_DIR": str(tmp_path / "state"),
           "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "FAULTY_SLOW_S": "300"}
    # One slot, name order: good_op completes, slow_op is running when the driver dies.
    first = subprocess.Popen(
        [sys.executable, "-m", "zlbench", "batch", "--flaggems-dir", str(CORPUS), "--backend", "cpu",
         "--devices", "0", "--out", str(batch), "--ops", "good_op,slow_op", "--dismiss", "none",
         "--kill-grace", "1", "--progress", "plain", "--run-mode", mode],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 90
    while not any(e["event"] == "attempt" and e["op"] == "slow_op" for e in _events(batch)):
        assert time.monotonic() < deadline and first.poll() is None, "slow_op never started"
        time.sleep(0.1)
    first.send_signal(signal.SIGKILL)
    first.wait()
    orphan = next(e["pid"] for e in _events(batch) if e["event"] == "attempt" and e["op"] == "slow_op")
    assert is_alive(orphan)  # the dead driver's child still runs: resume must deal with it
    good_complete = (batch / "good_op" / ".complete").stat().st_mtime_ns
    good_log = (batch / "good_op" / "run.log").read_text()

    # The resume gives no settings at all: they come from plan.json.
    resumed = subprocess.run(
        [sys.executable, "-m", "zlbench", "batch", "--resume", "--out", str(batch), "--progress", "plain"],
        env={**env, "FAULTY_SLOW_S": "0"}, capture_output=True, text=True, timeout=180)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr

    assert not is_alive(orphan)
    assert tagged_processes("ZL_BATCH_DIR", str(batch.resolve())) == {}
    with open(batch / "ops_status.csv", newline="") as f:
        rows = {r["operator"]: r for r in csv.DictReader(f)}
    assert {op: r["status"] for op, r in rows.items()} == {"good_op": "ok", "slow_op": "ok"}
    # good_op was measured once, by the first driver, and its run dir is untouched.
    good_attempts = [e for e in _events(batch) if e["event"] == "attempt" and e["op"] == "good_op"]
    assert len(good_attempts) == 1
    assert (batch / "good_op" / ".complete").stat().st_mtime_ns == good_complete
    assert (batch / "good_op" / "run.log").read_text() == good_log
    # slow_op's partial dir from the killed driver is kept aside; the new one is complete.
    aside = list((batch / "set-aside" / "slow_op").iterdir())
    assert len(aside) == 1 and (aside[0] / "run.log").exists()
    assert (batch / "slow_op" / ".complete").is_file()
    plan = json.loads((batch / "plan.json").read_text())
    assert [s["resume"] for s in plan["sessions"]] == [False, True]
    assert "resume: 1 operator(s) complete and kept, 1 to run" in resumed.stdout
    # The resumed driver ran as the plan says (plan.json keeps the run mode).
    assert [e["mode"] for e in _events(batch) if e["event"] == "attempt"] == [mode] * 3

"""The batch driver with a stand-in for `zlbench run` (same contract, starts in
milliseconds): retries, dtype fallback, replay per operator, extra environment,
dismissal, Ctrl-C and resume, refusals."""

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from zlbench import knobs
from zlbench.batch import BatchConfig, BatchError, run_batch
from zlbench.batch.plan import shard
from zlbench.proc import is_alive, live_group_members
from zlbench.rundir import read_journal

FIXTURES = Path(__file__).parent / "fixtures" / "faulty_corpus"
STANDIN = [sys.executable, str(FIXTURES / "standin_run.py")]


def settings(**flags):
    return knobs.resolve({"backend": "cpu", **flags}, {}, names=knobs.MEASURE_KNOBS)


def config(out, ops, **kw):
    base = dict(out=out, settings=settings(), ops=ops, devices=["0", "1"], run_command=STANDIN,
                run_mode="fresh", progress="off", kill_grace_s=0.5)
    base.update(kw)
    return BatchConfig(**base)


def rows_of(batch):
    with open(batch / "ops_status.csv", newline="") as f:
        return {r["operator"]: r for r in csv.DictReader(f)}


def argv_of(batch, op):
    return json.loads((batch / op / "args.json").read_text())


def test_statuses_attempts_and_dtype_levels(tmp_path):
    batch = tmp_path / "b"
    dismiss = tmp_path / "dismiss.yaml"
    dismiss.write_text("dismissed:\n  - operator: ok_dismissed\n    reason: known wrong results\n"
                       "    verified: {date: 2026-08-01, backend: cpu, seen: mismatch}\n")
    ops = ["ok_a", "ok_b", "fail_x", "transient_y", "half_z", "pre_w", "skip_v", "ok_dismissed"]
    result = run_batch(config(batch, ops, dismiss=dismiss, extra_env={"MY_SWITCH": "1"}, retries=2))
    rows = rows_of(batch)
    got = {op: (r["status"], r["attempts"], r["dtype_level"], r["dtypes"]) for op, r in rows.items()}
    assert got == {
        "ok_a": ("ok", "1", "0", "default"),
        "ok_b": ("ok", "1", "0", "default"),
        # not transient: no retry, straight down the dtype ladder
        "fail_x": ("failed", "3", "2", "float16"),
        # transient-looking, but the same error twice is deterministic: 2 per level
        "transient_y": ("failed", "6", "2", "float16"),
        "half_z": ("ok", "2", "1", "float32"),
        # preflight: the environment, not the operator: no retry, no fallback
        "pre_w": ("failed", "1", "0", "default"),
        # exit 0, but pytest skipped every test: nothing was measured
        "skip_v": ("skipped", "1", "0", "default"),
        "ok_dismissed": ("dismissed", "", "", ""),
    }
    assert rows["ok_dismissed"]["reason"] == "known wrong results"
    assert rows["pre_w"]["reason"] == "preflight failed (torch): missing"
    assert "ValueError: fail_x computes the wrong thing" in rows["fail_x"]["reason"]
    assert result.exit_code == 1 and not result.interrupted
    assert result.counts() == {"ok": 3, "failed": 3, "skipped": 1, "dismissed": 1}
    assert rows["skip_v"]["reason"] == "every test skipped: 2 skipped in 0.01s"
    assert not (batch / "ok_dismissed").exists()
    # Earlier attempts are set aside, never deleted; the op dir holds the last one.
    assert sorted(p.name for p in (batch / "set-aside" / "half_z").iterdir()) == ["attempt1-l0-failed"]
    assert len(list((batch / "set-aside" / "transient_y").iterdir())) == 5
    # Children got the extra environment, the batch tag and the planned device.
    plan = json.loads((batch / "plan.json").read_text())
    where = shard([op for op in ops if op != "ok_dismissed"], ["0", "1"])
    assert {p["op"]: p["device"] for p in plan["ops"]} == where
    for op in ("ok_a", "ok_b", "half_z"):
        args = argv_of(batch, op)
        assert args["env"]["MY_SWITCH"] == "1"
        assert args["env"]["ZL_BATCH_DIR"] == str(batch.resolve())
        assert args["argv"][args["argv"].index("--device") + 1] == where[op] == rows[op]["device"]
        assert args["argv"][args["argv"].index("--level") + 1] == "core"
    assert plan["extra_env"] == {"MY_SWITCH": "1"} and plan["dismissed"] == {"ok_dismissed": "known wrong results"}


def test_replay_from_an_earlier_batch_per_operator(tmp_path):
    earlier = tmp_path / "earlier"
    (earlier / "ok_rec" / "autotune_records").mkdir(parents=True)
    (earlier / "ok_rec" / "autotune_records" / "kernel.json").write_text("{}")
    own = tmp_path / "own_records"
    batch = tmp_path / "b"
    run_batch(config(batch, ["ok_rec", "ok_none", "ok_own"], settings=settings(replay_from=str(earlier)),
                     replay_dirs={"ok_own": own}))
    def replay_arg(op):
        argv = argv_of(batch, op)["argv"]
        return argv[argv.index("--replay-from") + 1] if "--replay-from" in argv else None
    assert replay_arg("ok_rec") == str((earlier / "ok_rec" / "autotune_records").resolve())
    assert replay_arg("ok_none") is None
    assert replay_arg("ok_own") == str(own.resolve())
    marker = "AUTOTUNE_REPLAY_NONE op=ok_none reason=no_records"
    assert marker in (batch / "batch.log").read_text()
    assert rows_of(batch)["ok_none"]["notes"] == marker
    assert rows_of(batch)["ok_rec"]["notes"] == ""


def test_op_list_timeouts_and_timeout_status(tmp_path):
    op_list = tmp_path / "ops.txt"
    op_list.write_text("ok_fast\ntree_hang 0.5  # hangs\n")
    batch = tmp_path / "b"
    started = time.monotonic()
    run_batch(config(batch, None, op_list=op_list, retries=0, timeout_s=60))
    assert time.monotonic() - started < 30
    rows = rows_of(batch)
    assert rows["tree_hang"]["status"] == "timeout" and rows["tree_hang"]["attempts"] == "1"
    assert rows["ok_fast"]["status"] == "ok"
    leader, grandchild = map(int, (batch / "tree_hang" / "tree.pids").read_text().split())
    assert live_group_members(leader) == []
    for pid in (leader, grandchild):
        assert not is_alive(pid)



DRIVER = """
import os, sys
from pathlib import Path
from zlbench import knobs
from zlbench.batch import BatchConfig, run_batch
settings = knobs.resolve({"backend": "cpu"}, {}, names=knobs.MEASURE_KNOBS)
result = run_batch(BatchConfig(out=Path(sys.argv[1]), settings=settings, ops=sys.argv[2].split(","),
                               devices=["0"], run_command=sys.argv[3:], run_mode="fresh",
                               progress="plain",
                               kill_grace_s=0.5, resume="--resume" in os.environ.get("ARGS", "")))
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "triton", "flag_gems"))
print("HEAVY", heavy)
sys.exit(result.exit_code)
"""


def test_driver_never_imports_torch(tmp_path):
    # Whatever the children import, the driver (and so every GPU's parent) stays clean.
    proc = subprocess.run([sys.executable, "-c", DRIVER, str(tmp_path / "b"), "ok_1,fail_2", *STANDIN],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "HEAVY []" in proc.stdout


def test_ctrl_c_stops_cleanly_and_resume_finishes(tmp_path):
    batch = tmp_path / "b"
    log = tmp_path / "standin.log"
    env = {**os.environ, "STANDIN_LOG": str(log), "STANDIN_SLOW_S": "600"}
    # One slot, name order: ok_1 finishes, ok_2_slow runs until interrupted, ok_3 waits.
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, str(batch), "ok_1,ok_2_slow,ok_3", *STANDIN],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 30
    while not (log.exists() and "ok_2_slow" in log.read_text()):
        if time.monotonic() > deadline:
            driver.kill()
            raise AssertionError("ok_2_slow never started")
        time.sleep(0.05)
    child_pid = int(log.read_text().split("ok_2_slow ")[1].split()[1])
    driver.send_signal(signal.SIGINT)
    out, _ = driver.communicate(timeout=30)
    assert driver.returncode == 130, out
    assert "HEAVY []" in out                      # the driver never imported torch
    assert not is_alive(child_pid)                  # the running child was stopped
    assert list(rows_of(batch)) == ["ok_1"]       # consistent: only finished operators
    assert (batch / "ok_2_slow").is_dir() and not (batch / "ok_2_slow" / ".complete").exists()

    result = run_batch(config(batch, ["ok_1", "ok_2_slow", "ok_3"], devices=["0"], resume=True,
                              environ={**os.environ, "STANDIN_LOG": str(log), "STANDIN_SLOW_S": "0"}))
    events = list(read_journal(batch))
    session = events[-1]["session"]
    measured = {e["op"] for e in events if e["event"] == "attempt" and e["session"] == session}
    assert result.exit_code == 0 and sorted(measured) == ["ok_2_slow", "ok_3"]
    assert {op: r["status"] for op, r in rows_of(batch).items()} == {
        "ok_1": "ok", "ok_2_slow": "ok", "ok_3": "ok"}
    starts = [line.split()[0] for line in log.read_text().splitlines()]
    assert starts == ["ok_1", "ok_2_slow", "ok_2_slow", "ok_3"]   # ok_1 measured once
    aside = list((batch / "set-aside" / "ok_2_slow").iterdir())
    assert len(aside) == 1 and aside[0].name.endswith("-partial")


def test_refusals(tmp_path):
    batch = tmp_path / "b"
    run_batch(config(batch, ["ok_1"], devices=["0"]))
    with pytest.raises(BatchError, match="already holds a batch .*--resume"):
        run_batch(config(batch, ["ok_1"], devices=["0"]))
    with pytest.raises(BatchError, match=r"other settings \(level: 'core' -> 'comprehensive'"):
        run_batch(config(batch, ["ok_1"], devices=["0"], resume=True,
                         settings=settings(level="comprehensive")))
    with pytest.raises(BatchError, match="--devices"):
        run_batch(config(tmp_path / "c", ["ok_1"], settings=settings(backend="cuda"),
                         devices=["99"], environ={"CUDA_VISIBLE_DEVICES": "0"}))
    with pytest.raises(BatchError, match=r"extra_env sets USE_FLAGTUNE \(--use-flagtune\)"):
        run_batch(config(tmp_path / "d", ["ok_1"], extra_env={"USE_FLAGTUNE": "1"}))
    with pytest.raises(BatchError, match="custom run command needs --run-mode fresh"):
        run_batch(config(tmp_path / "f", ["ok_1"], run_mode="worker"))
    with pytest.raises(BatchError, match="--run-mode 'warm'"):
        run_batch(config(tmp_path / "g", ["ok_1"], run_mode="warm"))
    with pytest.raises(BatchError, match="--replay-from .*not a directory"):
        run_batch(config(tmp_path / "e", ["ok_1"], settings=settings(replay_from=str(tmp_path / "nope"))))

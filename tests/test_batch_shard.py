"""Host shards: `zlbench batch --shard K/N` and `--shard auto`, the composed plan, and
a sharded screen read as one batch by summary."""

import csv
import json
import shutil
from pathlib import Path

import pytest

from conftest import zlbench
from zlbench.batch.config import resolve_shard
from zlbench.batch.plan import WHOLE, HostShard, make_plan, shard, stable_hash
from zlbench.batch.state import BatchError
from zlbench.summary import pair_runs, summarize
from zlbench.summary.screen import read_screen

CORPUS = Path(__file__).parent / "fixtures" / "faulty_corpus"
OPS = [f"op_{i}" for i in range(300)]


def test_host_shards_partition_the_corpus_and_each_uses_every_device():
    shards = [HostShard(k, 3) for k in range(3)]
    owners = {op: [s.index for s in shards if s.holds(op)] for op in OPS}
    assert all(len(o) == 1 for o in owners.values())
    for host in shards:
        mine = [op for op in OPS if host.holds(op)]
        # Dividing by N before the device choice: with N=2 and 2 devices a plain h % 2
        # would leave one card of each shard idle.
        assert set(shard(mine, ["0", "1"], host).values()) == {"0", "1"}
    two = [HostShard(k, 2) for k in range(2)]
    for host in two:
        assert set(shard([op for op in OPS if host.holds(op)], ["0", "1"], host).values()) == {"0", "1"}


def test_device_of_an_operator_is_fixed_by_n_and_the_device_list():
    host = HostShard(1, 4)
    mine = [op for op in OPS if host.holds(op)]
    where = shard(mine, ["3", "1", "2", "0"], host)
    # The same N and device list on side B of an A/B: the same card, whatever the order.
    assert shard(list(reversed(mine)), ["0", "1", "2", "3"], host) == where
    assert all(where[op] == str((stable_hash(op) // 4) % 4) for op in mine)
    # N=1 is the plain batch: h % devices, as before shards existed.
    assert shard(OPS, ["0", "1", "2"]) == {op: str(stable_hash(op) % 3) for op in OPS}


def test_plan_holds_only_its_shard_dismissed_operators_included():
    ops = ["a", "b", "c", "d", "e", "f"]
    plans = [make_plan(ops, ["0"], {"c": "wrong"}, None, {}, host=HostShard(k, 2)) for k in range(2)]
    measured = sorted(p.op for plan in plans for p in plan.ops)
    dismissed = [op for plan in plans for op in plan.dismissed]
    assert measured == ["a", "b", "d", "e", "f"] and dismissed == ["c"]
    assert {p.op for p in make_plan(ops, ["0"], {}, None, {}, host=WHOLE).ops} == set(ops)


@pytest.mark.parametrize("text, shards, env, want", [
    ("2/5", None, {}, (2, 5)),
    ("auto", None, {"SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_COUNT": "3"}, (1, 3)),
    ("auto", None, {"SLURM_ARRAY_TASK_ID": "2", "SLURM_ARRAY_TASK_MIN": "0",
                    "SLURM_ARRAY_TASK_MAX": "3"}, (2, 4)),
    # A resubmission of some indices: the array's own count is not N; --shards is.
    ("auto", 5, {"SLURM_ARRAY_TASK_ID": "4", "SLURM_ARRAY_TASK_COUNT": "2",
                 "SLURM_ARRAY_TASK_MIN": "1", "SLURM_ARRAY_TASK_MAX": "4"}, (4, 5)),
    ("auto", 3, {"JOB_COMPLETION_INDEX": "2"}, (2, 3)),
])
def test_resolve_shard(text, shards, env, want):
    got = resolve_shard(text, shards, env)
    assert (got.index, got.count) == want


@pytest.mark.parametrize("text, shards, env, says", [
    ("auto", None, {}, "no SLURM_ARRAY_TASK_ID or JOB_COMPLETION_INDEX"),
    ("auto", None, {"JOB_COMPLETION_INDEX": "0"}, "needs --shards N"),
    ("auto", None, {"SLURM_ARRAY_TASK_ID": "3", "SLURM_ARRAY_TASK_COUNT": "2",
                    "SLURM_ARRAY_TASK_MIN": "2", "SLURM_ARRAY_TASK_MAX": "3"}, "not 0..N-1"),
    ("auto", 2, {"JOB_COMPLETION_INDEX": "2"}, "outside 0..1"),
    ("auto", None, {"SLURM_ARRAY_TASK_ID": "x"}, "not a whole number"),
    ("3/3", None, {}, "0 <= K < N"),
    ("1-3", None, {}, "expected K/N"),
    ("0/3", 3, {}, "--shards goes with --shard auto"),
    (None, 3, {}, "--shards N goes with --shard auto"),
])
def test_resolve_shard_refuses_with_one_line(text, shards, env, says):
    with pytest.raises(BatchError, match=says) as e:
        resolve_shard(text, shards, env)
    assert "\n" not in str(e.value)


def test_batch_shard_errors_are_one_line_exit_2(tmp_path):
    proc = zlbench("batch", "--shard", "1/3", "--backend", "cpu")
    assert proc.returncode == 2 and "--shard 1/3 needs --out DIR" in proc.stderr
    assert "Traceback" not in proc.stderr
    env = {k: "" for k in ("SLURM_ARRAY_TASK_ID", "JOB_COMPLETION_INDEX")}
    proc = zlbench("batch", "--shard", "auto", "--out", tmp_path, "--backend", "cpu", env=env)
    assert proc.returncode == 2 and "--shard auto:" in proc.stderr, proc.stderr


FAULTY = ["--flaggems-dir", CORPUS, "--backend", "cpu", "--dismiss", "none", "--progress", "plain",
          "--ops", "good_op,crash_op,dtype_op,broken_op,slow_op", "--timeout", "60", "--retries", "1",
          "--kill-grace", "1"]
SAME = ("operator", "status", "attempts", "dtype_level", "dtypes", "exit_code")
ENV = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}


def _rows(path):
    with open(path, newline="") as f:
        return {r["operator"]: tuple(r[c] for c in SAME) for r in csv.DictReader(f)}


def test_a_sharded_screen_reads_as_the_one_host_batch(tmp_path):
    state = {"FAULTY_STATE_DIR": str(tmp_path / "state"), **ENV}
    one = zlbench("batch", *FAULTY, "--out", tmp_path / "one", env=state, timeout=240)
    assert one.returncode == 1, one.stdout + one.stderr
    screen = tmp_path / "screen"
    for k in range(3):
        proc = zlbench("batch", *FAULTY, "--shard", f"{k}/3", "--out", screen, env=state, timeout=240)
        assert proc.returncode in (0, 1), proc.stdout + proc.stderr
        assert (screen / f"shard-{k}-of-3" / "plan.json").is_file()
    # Shard 2 holds crash_op and broken_op: run again, it keeps their failures; --resume
    # measures them again.
    again = zlbench("batch", *FAULTY, "--shard", "2/3", "--out", screen, env=state, timeout=120)
    assert "continuing" in again.stderr and "0 complete and kept, 2 failed and kept, 0 to run" in \
        again.stdout.replace("operator(s) ", ""), again.stdout + again.stderr
    retry = zlbench("batch", *FAULTY, "--shard", "2/3", "--resume", "--out", screen, env=state,
                    timeout=120)
    assert "0 complete and kept, 2 to run" in retry.stdout.replace("operator(s) ", ""), retry.stdout

    done = zlbench("summary", screen)
    assert done.returncode == 0, done.stderr
    merged = _rows(screen / "ops_status.csv")
    assert merged == _rows(tmp_path / "one" / "ops_status.csv")
    assert len(merged) == 5
    read = read_screen(screen)
    assert read.finished and [i.kind for i in read.issues] == []

    # A shard that stopped half-way, one that never started, an operator in two shards.
    status = screen / "shard-1-of-3" / "ops_status.csv"
    lines = status.read_text().splitlines()
    status.write_text("\n".join(lines[:-1]) + "\n")
    lost = lines[-1].split(",")[0]
    shutil.rmtree(screen / "shard-2-of-3")
    copy = screen / "shard-0-of-3" / "ops_status.csv"
    copy.write_text(copy.read_text() + lines[1] + "\n")
    dup = lines[1].split(",")[0]
    done = zlbench("summary", screen)
    assert done.returncode == 0, done.stderr
    issues = {(i.kind, i.op) for i in summarize(screen).issues}
    assert ("shard_missing", None) in issues and ("shard_unfinished", None) in issues
    assert ("op_in_two_shards", dup) in issues
    assert "shard-2-of-3 is missing" in done.stdout and "shard-1-of-3 is unfinished" in done.stdout
    assert lost not in _rows(screen / "ops_status.csv")


@pytest.mark.slow
def test_summary_ab_pairs_a_sharded_screen_with_a_plain_batch(tmp_path):
    pytest.importorskip("torch", reason="the sample corpus times torch operators")
    ops = ["abs", "silu"]   # abs is in shard 1 of 2, silu in shard 0: both shards hold one
    assert {HostShard(1, 2).holds("abs"), HostShard(0, 2).holds("silu")} == {True}
    common = ["--ops", ",".join(ops), "--backend", "cpu", "--progress", "off", "--dismiss", "none"]
    plain = zlbench("batch", *common, "--out", tmp_path / "a", timeout=300)
    assert plain.returncode == 0, plain.stdout + plain.stderr
    for k in range(2):
        proc = zlbench("batch", *common, "--shard", f"{k}/2", "--out", tmp_path / "b", timeout=300)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    result = pair_runs(tmp_path / "a", tmp_path / "b")
    assert result.pairs and not result.only_a and not result.only_b
    assert {p.a.op for p in result.pairs} == set(ops)
    assert not result.caliber.mismatch, result.caliber
    proc = zlbench("summary", "--ab", tmp_path / "a", tmp_path / "b", "--format", "csv")
    assert proc.returncode == 0, proc.stderr


def test_shard_auto_in_a_kubernetes_indexed_job(tmp_path):
    """A pod of an indexed job sees JOB_COMPLETION_INDEX and is told N with --shards."""
    ops = "good_op,dtype_op,slow_op,flaky_op"
    env = {**ENV, "FAULTY_STATE_DIR": str(tmp_path / "state"), "JOB_COMPLETION_INDEX": "1",
           "HOSTNAME": "zlbench-nightly-1-x7k2p", "SLURM_ARRAY_TASK_ID": "", "SLURM_JOB_ID": ""}
    args = ["batch", "--shard", "auto", "--flaggems-dir", CORPUS, "--backend", "cpu",
            "--dismiss", "none", "--ops", ops, "--out", tmp_path / "screen"]
    refused = zlbench(*args, env=env)
    assert refused.returncode == 2 and "needs --shards N" in refused.stderr, refused.stderr
    proc = zlbench(*args, "--shards", "2", env=env, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    shard_dir = tmp_path / "screen" / "shard-1-of-2"
    plan = json.loads((shard_dir / "plan.json").read_text())
    assert plan["shard"] == [1, 2]
    assert plan["sessions"][-1]["pod"] == "zlbench-nightly-1-x7k2p"
    mine = [op for op in ops.split(",") if HostShard(1, 2).holds(op)]
    assert sorted(_rows(shard_dir / "ops_status.csv")) == sorted(mine) and mine
    assert not (tmp_path / "screen" / "shard-0-of-2").exists()

"""A screen over a cluster of three Slurm nodes (tests/slurm_cluster.py: zln1..zln3, each
slurmd in its own UTS and mount namespace, with its own hostname and home dir) that
loses a node mid-shard: Slurm requeues the task, it runs on another node, picks up
where the lost one stopped without measuring a completed operator again, and the
merged screen reads as a one-host batch of the same corpus (the bundled sample)."""

import csv
import json
import time

import pytest
from slurm_cluster import status_rows, zl

from zlbench import rundir
from zlbench.batch.plan import HostShard
from zlbench.summary.screen import read_screen

OPS = "abs,add,addmm,gelu,layer_norm,mm,rms_norm,silu,softmax,sum"
BATCH = ["--backend", "cpu", "--devices", "0", "--dtypes", "float32", "--dismiss", "none",
         "--ops", OPS]
# Shard 2 of 4 holds three operators, run in name order on its one device slot: the
# node running it is lost once the first is measured.
VICTIM, SHARDS = 2, 4


def _summary_keys(batch):
    with open(batch / rundir.SUMMARY_CSV, newline="") as f:
        return sorted((r["op"], r["dtype"], r["shape"]) for r in csv.DictReader(f))


def _until(what, check, deadline_s, every=0.1):
    deadline = time.monotonic() + deadline_s
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(every)


def _task_state(cluster, task):
    out = cluster.run("squeue", "-h", "-j", task, "-o", "%T %N").stdout.split()
    return (out + ["", ""])[:2] if out else ["", ""]


@pytest.fixture(scope="module")
def lost_node(slurm_nodes, tmp_path_factory):
    cluster = slurm_nodes
    tmp = tmp_path_factory.mktemp("nodes")
    env = {**cluster.env, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    env.pop("ZL_BACKEND", None)
    victim_ops = [op for op in sorted(OPS.split(",")) if HostShard(VICTIM, SHARDS).holds(op)]
    assert victim_ops == ["layer_norm", "rms_norm", "softmax"]
    screen = tmp / "screen"
    submit = zl(env, "slurm", "submit", "--shards", SHARDS, "--out", screen,
                "--sbatch-arg=--time=10", *BATCH, cwd=tmp)
    assert submit.returncode == 0, submit.stdout + submit.stderr
    job = submit.stdout.strip().splitlines()[-1]
    task = f"{job}_{VICTIM}"
    shard = screen / f"shard-{VICTIM}-of-{SHARDS}"

    def first_measured():
        events = list(rundir.read_journal(shard))
        return any(e.get("event") == "result" and e.get("op") == victim_ops[0]
                   and e.get("status") == "ok" for e in events)

    _until(f"{victim_ops[0]} measured in shard {VICTIM}", first_measured, 120, every=0.05)
    state, node = _task_state(cluster, task)
    assert state == "RUNNING" and node in cluster.nodes, (state, node)
    running = zl(env, "slurm", "status", screen)
    killed = cluster.kill_node(node)
    done_before = {op for op, ev in rundir.accepted_runs(rundir.read_journal(shard)).items()}
    # Slurm notices the node is gone (SlurmdTimeout) and requeues the task.
    _until(f"{node} down", lambda: cluster.node_states().get(node, "").startswith("down"), 90, 0.5)
    _until(f"{task} requeued", lambda: _task_state(cluster, task)[0] == "PENDING", 30, 0.5)
    requeued = zl(env, "slurm", "status", screen)
    # A requeued task waits out a begin time; the test does not.
    cluster.run("scontrol", "update", f"JobId={task}", "StartTime=now")
    _until(f"{task} running again", lambda: _task_state(cluster, task)[0] in ("RUNNING", ""), 60, 0.5)

    def all_finished():
        status = zl(env, "slurm", "status", screen)
        return status if status.returncode == 0 else None

    finished = _until("every shard finished", all_finished, 180, 1)

    # The same corpus on one host, no Slurm, a home dir of its own.
    one = tmp / "one"
    single = zl({**env, "HOME": str(tmp / "home-one")}, "batch", *BATCH, "--out", one,
                "--progress", "off", timeout=300)
    assert single.returncode == 0, single.stdout + single.stderr
    return {"cluster": cluster, "env": env, "screen": screen, "one": one, "job": job,
            "task": task, "node": node, "shard": shard, "ops": victim_ops, "killed": killed,
            "done_before": done_before, "running": running, "requeued": requeued,
            "finished": finished}


def test_the_lost_task_finished_on_another_node_without_measuring_again(lost_node):
    shard, ops = lost_node["shard"], lost_node["ops"]
    assert lost_node["killed"], "nothing was running on the node"
    plan = json.loads((shard / "plan.json").read_text())
    hosts = [s["host"] for s in plan["sessions"]]
    assert hosts[0] == lost_node["node"] and len(hosts) == 2 and hosts[1] != lost_node["node"]
    assert hosts[1] in lost_node["cluster"].nodes
    assert [s.get("slurm_job") for s in plan["sessions"]] == [lost_node["task"]] * 2
    events = list(rundir.read_journal(shard))
    first, second = plan["sessions"][0]["session"], plan["sessions"][1]["session"]
    ran_first = {e["op"] for e in events if e["event"] == "attempt" and e["session"] == first}
    ran_second = [e["op"] for e in events if e["event"] == "attempt" and e["session"] == second]
    # What the lost node finished is kept; what it left is measured on the new node.
    assert ops[0] in lost_node["done_before"]
    assert not set(ran_second) & lost_node["done_before"]
    assert set(ran_second) | lost_node["done_before"] == set(ops)
    assert ran_first | set(ran_second) == set(ops)
    log = (shard / rundir.BATCH_LOG).read_text()
    assert f"resume: {len(lost_node['done_before'])} operator(s) complete and kept" in log
    assert "not trusted" not in log
    assert {op: r[1] for op, r in status_rows(shard / "ops_status.csv").items()} == dict.fromkeys(ops, "ok")


def test_status_followed_the_node_loss(lost_node):
    running, requeued, finished = lost_node["running"], lost_node["requeued"], lost_node["finished"]

    def line(out):
        return next(ln.split() for ln in out.stdout.splitlines() if ln.startswith(f"{VICTIM}/{SHARDS} "))

    assert running.returncode == 3 and line(running)[2] == "RUNNING", running.stdout
    assert requeued.returncode == 3 and line(requeued)[2] == "PENDING", requeued.stdout
    assert line(requeued)[-1] == "queued", requeued.stdout
    assert finished.returncode == 0 and line(finished)[-1] == "finished", finished.stdout


def test_four_shards_ran_over_three_nodes(lost_node):
    hosts = set()
    for k in range(SHARDS):
        plan = json.loads((lost_node["screen"] / f"shard-{k}-of-{SHARDS}" / "plan.json").read_text())
        hosts |= {s["host"] for s in plan["sessions"]}
    assert hosts == set(lost_node["cluster"].nodes)


def test_merged_screen_equals_the_one_host_batch(lost_node):
    screen, one, env = lost_node["screen"], lost_node["one"], lost_node["env"]
    merged = zl(env, "summary", screen)
    assert merged.returncode == 0, merged.stdout + merged.stderr
    plain = zl(env, "summary", one)
    assert plain.returncode == 0, plain.stdout + plain.stderr
    assert status_rows(screen / "ops_status.csv") == status_rows(one / "ops_status.csv")
    assert sorted(status_rows(one / "ops_status.csv")) == sorted(OPS.split(","))
    assert _summary_keys(screen) == _summary_keys(one) and _summary_keys(one)
    read = read_screen(screen)
    assert read.finished and read.issues == []


def test_each_host_kept_its_own_flaggems_tuning_db(lost_node):
    """A shard's operators use FlagGems' DB under hosts/<node> (the home dir every job
    sees at the same path); the one-host batch FlagGems' default."""
    home = lost_node["env"]["HOME"]
    for k in range(SHARDS):
        shard = lost_node["screen"] / f"shard-{k}-of-{SHARDS}"
        ran_on = {}
        for ev in rundir.read_journal(shard):
            if ev.get("event") == "session":
                session = ev["session"]
            if ev.get("event") == "result" and ev.get("status") == "ok":
                ran_on[ev["op"]] = session
        hosts = {s["session"]: s["host"] for s in json.loads((shard / "plan.json").read_text())["sessions"]}
        for op, session in ran_on.items():
            ident = json.loads((shard / op / rundir.IDENTITY).read_text())
            assert ident["tuner_cache"] == f"shared:{home}/.flaggems/hosts/{hosts[session]}", op
    ident = json.loads((lost_node["one"] / "abs" / rundir.IDENTITY).read_text())
    assert ident["tuner_cache"] == f"shared:{lost_node['one'].parent}/home-one/.flaggems"

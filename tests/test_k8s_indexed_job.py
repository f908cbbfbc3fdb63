"""Kubernetes without a cluster. The indexed-job manifest of docs/schedulers.md is checked
offline against the Kubernetes API schema (kubernetes-validate), and its contract is run
here: one process per completion index with JOB_COMPLETION_INDEX, each the manifest's own
shell command; one "pod" is killed mid-shard (every process of it, SIGKILL, as a node
losing the container) and a new one, with a fresh HOME and another pod name, takes the
same index and finishes the shard by resuming it."""

import os
import re
import shlex
import signal
import sys
import time
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from zlbench import proc, rundir
from zlbench.batch.plan import HostShard
from zlbench.summary.screen import read_screen

DOC = Path(__file__).parent.parent / "docs" / "schedulers.md"
OPS = "abs,add,addmm,gelu,layer_norm,mm,rms_norm,silu,softmax,sum"
SHARDS, VICTIM = 3, 2


def manifest():
    text = DOC.read_text()
    section = text[text.index("## Kubernetes indexed job"):]
    return yaml.safe_load(re.search(r"```yaml\n(.*?)```", section, re.S).group(1))


def _container(doc):
    return doc["spec"]["template"]["spec"]["containers"][0]


@pytest.mark.parametrize("version", ["1.29", kubernetes_validate.latest_version()])
def test_the_manifest_is_a_valid_indexed_job(version):
    doc = manifest()
    # strict: a misspelt field (backofLimitPerIndex) is an error, not ignored.
    kubernetes_validate.validate(doc, version, strict=True)
    spec = doc["spec"]
    assert doc["kind"] == "Job" and spec["completionMode"] == "Indexed"
    # backoffLimitPerIndex needs restartPolicy Never; each index is one shard.
    assert spec["template"]["spec"]["restartPolicy"] == "Never" and spec["backoffLimitPerIndex"] >= 1
    argv = shlex.split(_container(doc)["args"][0].split(";")[0])
    assert argv[:4] == ["zlbench", "batch", "--shard", "auto"]
    assert int(argv[argv.index("--shards") + 1]) == spec["completions"]
    mount = _container(doc)["volumeMounts"][0]["mountPath"]
    assert argv[argv.index("--out") + 1].startswith(mount + "/")


def test_the_schema_check_catches_a_misspelt_field():
    doc = manifest()
    doc["spec"]["backofLimitPerIndex"] = doc["spec"].pop("backoffLimitPerIndex")
    with pytest.raises(kubernetes_validate.ValidationError, match="backofLimitPerIndex"):
        kubernetes_validate.validate(doc, "1.29", strict=True)


def pod_command(screen):
    """The manifest's shell command, pointed at this machine: the bundled sample corpus
    on the CPU instead of FlagGems on 8 GPUs, the screen dir in a temp dir."""
    script = _container(manifest())["args"][0]
    batch, tail = script.split(";", 1)
    argv = shlex.split(batch)
    out, skip = [sys.executable, "-m", "zlbench", "batch"], 0
    for i, arg in enumerate(argv[2:], start=2):
        if skip:
            skip -= 1
            continue
        if arg in ("--flaggems-dir", "--devices", "--backend", "--out", "--shards"):
            skip = 1
            continue
        out.append(arg)
    out += ["--shards", str(SHARDS), "--out", str(screen), "--backend", "cpu", "--devices", "0",
            "--ops", OPS, "--dtypes", "float32", "--dismiss", "none"]
    return shlex.join(out) + ";" + tail


def start_pod(tmp, screen, index, name):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "ZL_"))}
    env.update({"JOB_COMPLETION_INDEX": str(index), "HOSTNAME": name,
                "HOME": str(tmp / name / "home"), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})
    (tmp / name / "home").mkdir(parents=True)
    return proc.start_group(["/bin/sh", "-c", pod_command(screen)], env, tmp / name / "pod.log")


def kill_pod(pod, shard_dir):
    """Every process of the pod at once: its group, and what left the group carrying the
    batch's tag (warm workers, their forks)."""
    os.killpg(pod.pid, signal.SIGKILL)  # the shell and the batch driver
    pod.wait(timeout=30)
    deadline = time.monotonic() + 30
    while proc.tagged_processes("ZL_BATCH_DIR", str(shard_dir)):
        assert time.monotonic() < deadline
        for pid in proc.tagged_processes("ZL_BATCH_DIR", str(shard_dir)):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.1)


def test_an_index_whose_pod_died_finishes_its_shard_in_a_new_pod(tmp_path):
    screen = tmp_path / "screens" / "nightly"
    victim_ops = [op for op in sorted(OPS.split(",")) if HostShard(VICTIM, SHARDS).holds(op)]
    assert len(victim_ops) >= 2
    shard = screen / f"shard-{VICTIM}-of-{SHARDS}"
    pods = {k: start_pod(tmp_path, screen, k, f"zlbench-nightly-{k}-a") for k in range(SHARDS)}

    def measured():
        return rundir.accepted_runs(rundir.read_journal(shard)) if shard.is_dir() else {}

    deadline = time.monotonic() + 180
    while not measured():
        assert time.monotonic() < deadline and pods[VICTIM].poll() is None, \
            (tmp_path / f"zlbench-nightly-{VICTIM}-a" / "pod.log").read_text()
        time.sleep(0.05)
    kill_pod(pods[VICTIM], shard)
    assert pods[VICTIM].returncode == -signal.SIGKILL  # a failed index: the Job starts another pod
    kept = set(measured())
    assert kept and kept < set(victim_ops), "the pod was killed after its shard finished"

    retry = start_pod(tmp_path, screen, VICTIM, f"zlbench-nightly-{VICTIM}-b")
    for k, pod in [*pods.items(), (VICTIM, retry)]:
        if pod is pods[VICTIM]:
            continue
        assert pod.wait(timeout=300) == 0, (tmp_path / f"zlbench-nightly-{k}-a" / "pod.log").read_text()

    plan = rundir.read_plan(shard)
    assert [(s["pod"], s["completion_index"]) for s in plan["sessions"]] == [
        (f"zlbench-nightly-{VICTIM}-a", str(VICTIM)), (f"zlbench-nightly-{VICTIM}-b", str(VICTIM))]
    second = plan["sessions"][1]["session"]
    ran_again = {e["op"] for e in rundir.read_journal(shard)
                 if e.get("event") == "attempt" and e["session"] == second}
    assert ran_again == set(victim_ops) - kept  # the new pod measured only what was left
    log = (tmp_path / f"zlbench-nightly-{VICTIM}-b" / "pod.log").read_text()
    assert f"resume: {len(kept)} operator(s) complete and kept" in log, log
    read = read_screen(screen)
    assert read.finished and read.issues == [], read.issues
    assert {r["status"] for r in read.rows.values()} == {"ok"}
    assert sorted(read.rows) == sorted(OPS.split(","))

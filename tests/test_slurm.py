"""Sharded screens on a real Slurm (Debian's slurm-wlm, started by the ``slurm`` fixture):
real sbatch, squeue and scancel; every array task a real `zlbench batch --shard auto`
over a corpus whose operators hang, crash and fail."""

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from slurm_cluster import status_rows, zl

from zlbench.batch.plan import HostShard
from zlbench.summary.screen import read_screen

CORPUS = Path(__file__).parent / "fixtures" / "faulty_corpus"
ALL_OPS = "good_op,slow_op,hang_op,crash_op,dtype_op,flaky_op,broken_op"
BATCH = ["--flaggems-dir", str(CORPUS), "--backend", "cpu", "--devices", "0", "--dismiss", "none",
         "--timeout", "60", "--op-timeout", "hang_op=3", "--kill-grace", "1", "--retries", "1"]


def _env(slurm, tmp_path, name, **more):
    return {**slurm.env, "FAULTY_STATE_DIR": str(tmp_path / f"state-{name}"),
            "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", **more}


def _wait_status(env, screen, deadline_s, until=(0,)):
    """Poll `zlbench slurm status` until its exit code is one of ``until``."""
    deadline = time.monotonic() + deadline_s
    while True:
        proc = zl(env, "slurm", "status", screen)
        if proc.returncode in until:
            return proc
        assert proc.returncode in (0, 3, 4), proc.stdout + proc.stderr
        assert time.monotonic() < deadline, f"status never reached {until}:\n{proc.stdout}"
        time.sleep(1)


def _events(shard_dir):
    return [json.loads(line) for line in (shard_dir / "attempts.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def screen(slurm, tmp_path_factory):
    """A 3-shard screen of the faulty corpus through real sbatch, and beside it (at the
    same time: the cluster's two CPUs run two tasks) the same corpus as a one-host batch."""
    tmp = tmp_path_factory.mktemp("screen")
    one_host = subprocess.Popen(
        [sys.executable, "-m", "zlbench", "batch", *BATCH, "--ops", ALL_OPS, "--progress", "off",
         "--out", str(tmp / "one")], env=_env(slurm, tmp, "one"),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    env = _env(slurm, tmp, "screen")
    submit = zl(env, "slurm", "submit", "--shards", 3, "--out", tmp / "screen",
                "--sbatch-arg=--time=10", *BATCH, "--ops", ALL_OPS, cwd=tmp)
    assert submit.returncode == 0, submit.stdout + submit.stderr
    status = _wait_status(env, tmp / "screen", 150)
    # The shards' files can say finished a moment before Slurm lets the last task go:
    # wait for the scheduler's word too, past its epilog (COMPLETING) to the final state.
    deadline = time.monotonic() + 60
    while any(f" {state} " in status.stdout for state in ("RUNNING", "COMPLETING", "CONFIGURING")) \
            and time.monotonic() < deadline:
        time.sleep(1)
        status = _wait_status(env, tmp / "screen", 60)
    output, _ = one_host.communicate(timeout=150)
    assert one_host.returncode == 1, output
    return {"dir": tmp / "screen", "one": tmp / "one", "env": env, "submit": submit,
            "status": status, "tmp": tmp}


def test_merged_screen_equals_the_one_host_batch(screen):
    job = screen["submit"].stdout.strip().splitlines()[-1]
    assert job.isdigit() and f"Submitted job {job}: array tasks {job}_0, {job}_1, {job}_2" \
        in screen["submit"].stdout
    done = zl(screen["env"], "summary", screen["dir"])
    assert done.returncode == 0, done.stderr
    merged = status_rows(screen["dir"] / "ops_status.csv")
    assert merged == status_rows(screen["one"] / "ops_status.csv")
    assert sorted(merged) == sorted(ALL_OPS.split(","))
    assert {op: r[1] for op, r in merged.items()} == {
        "good_op": "ok", "slow_op": "ok", "hang_op": "timeout", "crash_op": "crashed",
        "dtype_op": "ok", "flaky_op": "ok", "broken_op": "failed"}
    read = read_screen(screen["dir"])
    assert read.finished and read.issues == []


def test_each_array_task_ran_its_own_shard_by_shard_auto(screen):
    job = screen["submit"].stdout.strip().splitlines()[-1]
    for k in range(3):
        shard_dir = screen["dir"] / f"shard-{k}-of-3"
        plan = json.loads((shard_dir / "plan.json").read_text())
        assert plan["shard"] == [k, 3]
        assert plan["sessions"][-1]["slurm_job"] == f"{job}_{k}"
        assert {p["op"] for p in plan["ops"]} == {
            op for op in ALL_OPS.split(",") if HostShard(k, 3).holds(op)}
        log = screen["dir"] / "slurm" / f"shard-{k}-job-{job}.out"
        assert f"shard {k}/3 into {shard_dir}" in log.read_text()
    script = (screen["dir"] / "slurm" / "array.sbatch").read_text()
    assert "#SBATCH --array=0-2" in script and "#SBATCH --time=10" in script
    assert "--shard auto \\\n    --shards 3 \\" in script


def test_status_of_a_finished_screen(screen):
    out = screen["status"].stdout
    assert screen["status"].returncode == 0, out
    lines = [line.split() for line in out.splitlines() if line[:2] in ("0/", "1/", "2/")]
    assert [line[0] for line in lines] == ["0/3", "1/3", "2/3"]
    assert all(line[-1] == "finished" for line in lines), out
    # Slurm's word beside the batch's: a shard with a failed operator exits 1, FAILED.
    states = {line[0]: line[2] for line in lines}
    assert states == {"0/3": "COMPLETED", "1/3": "COMPLETED", "2/3": "FAILED"}, out
    assert f"Next: zlbench summary {screen['dir']}" in out


def test_submit_again_skips_finished_shards_and_refuses_other_settings(screen):
    again = zl(screen["env"], "slurm", "submit", "--shards", 3, "--out", screen["dir"], *BATCH,
               "--ops", ALL_OPS, cwd=screen["tmp"])
    assert again.returncode == 0 and "Nothing to submit" in again.stdout, again.stdout + again.stderr
    other = zl(screen["env"], "slurm", "submit", "--shards", 3, "--out", screen["dir"], *BATCH,
               "--ops", ALL_OPS, "--level", "comprehensive", cwd=screen["tmp"])
    assert other.returncode == 2 and "measured with other settings (level: 'core' -> " \
        "'comprehensive')" in other.stderr, other.stderr
    count = zl(screen["env"], "slurm", "submit", "--shards", 4, "--out", screen["dir"], *BATCH)
    assert count.returncode == 2 and "holds a screen in 3 shards" in count.stderr, count.stderr
    assert len((screen["dir"] / "slurm" / "submissions.jsonl").read_text().splitlines()) == 1


def test_scancel_a_running_task_then_resubmit_resumes_it(slurm, tmp_path):
    # Shard 0 of 2, in name order on one slot: broken_op (fails), flaky_op (ok on its
    # retry), then slow_op, which sleeps long enough to be cancelled mid-run.
    ops = "good_op,dtype_op,broken_op,flaky_op,slow_op"
    assert [op for op in ops.split(",") if HostShard(0, 2).holds(op)] == \
        ["broken_op", "flaky_op", "slow_op"]
    screen = tmp_path / "screen"
    env = _env(slurm, tmp_path, "scancel", FAULTY_SLOW_S="300")
    args = ["slurm", "submit", "--shards", 2, "--out", screen, *BATCH, "--ops", ops]
    first = zl(env, *args, cwd=tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    job = first.stdout.strip().splitlines()[-1]
    shard0 = screen / "shard-0-of-2"
    deadline = time.monotonic() + 90
    while not (shard0 / "attempts.jsonl").exists() or not any(
            e.get("op") == "slow_op" and e["event"] == "attempt" for e in _events(shard0)):
        assert time.monotonic() < deadline, "slow_op never started"
        time.sleep(0.5)
    running = zl(env, "slurm", "status", screen)
    assert running.returncode in (3, 4) and "slow_op" in running.stdout, running.stdout
    cancel = slurm.run("scancel", f"{job}_0")
    assert cancel.returncode == 0, cancel.stderr
    stuck = _wait_status(env, screen, 60, until=(4,))
    assert "CANCELLED" in stuck.stdout and "needs resubmit" in stuck.stdout, stuck.stdout
    assert "Needs resubmit: shard(s) 0" in stuck.stdout and "zlbench slurm submit" in stuck.stdout
    said = next(line for line in stuck.stdout.splitlines() if "its log" in line)
    assert f"its log {screen}/slurm/shard-0-job-{job}.out says: slurmstepd" in said
    assert "*** JOB" in said and "CANCELLED" in said, said
    before = [e for e in _events(shard0) if e["event"] == "attempt"]
    assert {e["op"] for e in before} == {"broken_op", "flaky_op", "slow_op"}

    env["FAULTY_SLOW_S"] = "0"
    again = zl(env, *args, cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "finished, not submitted again: shard(s) 1" in again.stderr, again.stderr
    job2 = again.stdout.strip().splitlines()[-1]
    assert f"array tasks {job2}_0 (shards 0 of 2)" in again.stdout
    _wait_status(env, screen, 90)
    after = [e for e in _events(shard0) if e["event"] == "attempt"][len(before):]
    # Only the cancelled operator ran again: the finished ones (a failure included) kept.
    assert [e["op"] for e in after] == ["slow_op"]
    rows = status_rows(shard0 / "ops_status.csv")
    assert {op: r[1] for op, r in rows.items()} == {
        "broken_op": "failed", "flaky_op": "ok", "slow_op": "ok"}
    assert (shard0 / "set-aside" / "slow_op").is_dir()
    plan = json.loads((shard0 / "plan.json").read_text())
    assert [s.get("slurm_job") for s in plan["sessions"]] == [f"{job}_0", f"{job2}_0"]


def test_shard_auto_in_a_plain_array_reads_the_array_count(slurm, tmp_path):
    """`--shard auto` without --shards, as a person would write it in their own script."""
    out = tmp_path / "screen"
    cmd = (f"{sys.executable} -m zlbench batch --shard auto --out {out} "
           f"--flaggems-dir {CORPUS} --backend cpu --dismiss none --ops good_op,dtype_op,slow_op")
    proc = slurm.run("sbatch", "--parsable", "--array=0-1", "-o", str(tmp_path / "task-%a.out"),
                     "--wrap", cmd)
    assert proc.returncode == 0, proc.stderr
    job = proc.stdout.strip()
    deadline = time.monotonic() + 60
    while slurm.run("squeue", "-h", "-j", job).stdout.strip():
        assert time.monotonic() < deadline, slurm.run("squeue", "-j", job).stdout
        time.sleep(0.5)
    for k in range(2):
        plan = json.loads((out / f"shard-{k}-of-2" / "plan.json").read_text())
        assert plan["shard"] == [k, 2], (tmp_path / f"task-{k}.out").read_text()
        assert {p["op"] for p in plan["ops"]} == {
            op for op in ("good_op", "dtype_op", "slow_op") if HostShard(k, 2).holds(op)}


def test_dry_run_prints_a_readable_script_and_writes_nothing(tmp_path):
    """No cluster needed: --dry-run only prints."""
    import os

    # Batch settings from the environment are spelled out too (a task's shell may lack them).
    env = {**os.environ, "BENCH_LEVEL": "comprehensive", "ZL_RUN_MODE": "fresh", "ZL_WORKER_PRESTART": "0"}
    env.pop("ZL_BACKEND", None)
    screen = tmp_path / "nightly"
    proc = zl(env, "slurm", "submit", "--shards", 4, "--out", screen, "--dry-run",
              "--sbatch-arg=--partition=gpu", "--sbatch-arg", "--gres=gpu:8", "--max-parallel", 2,
              "--flaggems-dir", CORPUS, "--backend", "cpu", "--ops", "good_op,dtype_op",
              "--timeout", 600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    script = proc.stdout
    assert script.startswith("#!/bin/bash\n")
    for line in ("#SBATCH --array=0-3%2", f"#SBATCH --output={screen}/slurm/shard-%a-job-%A.out",
                 "#SBATCH --partition=gpu", "#SBATCH --gres=gpu:8", f"cd {tmp_path}",
                 f"exec {sys.executable} -m zlbench batch \\", "    --shard auto \\",
                 "    --shards 4 \\", f"    --out {screen} \\", f"    --flaggems-dir {CORPUS} \\",
                 "    --backend cpu \\", "    --ops good_op,dtype_op \\", "    --timeout 600 \\",
                 "# From the submitting environment: BENCH_LEVEL=comprehensive, "
                 "ZL_RUN_MODE=fresh, ZL_WORKER_PRESTART=0",
                 "    --level comprehensive \\", "    --run-mode fresh \\", "    --no-worker-prestart \\",
                 "    --progress plain"):
        assert line in script.splitlines(), (line, script)
    assert f"would write {screen}/slurm/array.sbatch and run: sbatch --parsable " \
           f"{screen}/slurm/array.sbatch" in proc.stderr
    assert not screen.exists()
    # The script is valid bash.
    (tmp_path / "array.sbatch").write_text(script)
    assert subprocess.run(["bash", "-n", str(tmp_path / "array.sbatch")]).returncode == 0


@pytest.mark.parametrize("args, says", [
    (["--resume"], "--resume is set by zlbench slurm submit"),
    (["--shard", "0/2"], "--shard is set by zlbench slurm submit"),
    (["--level", "nope"], "batch option: --level / BENCH_LEVEL='nope'"),
    (["--no-such"], "batch option: No such option '--no-such'"),
    (["--sbatch-arg=--array=0-9"], "zlbench sets --array"),
    (["--sbatch-arg", "gpu"], "give an sbatch option"),
])
def test_submit_refuses_bad_options_in_one_line(tmp_path, args, says):
    proc = zl(None, "slurm", "submit", "--shards", 2, "--out", tmp_path / "s", "--dry-run", *args)
    assert proc.returncode == 2 and says in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_status_of_a_dir_without_a_screen(tmp_path):
    proc = zl(None, "slurm", "status", tmp_path)
    assert proc.returncode == 2 and "holds no sharded screen" in proc.stderr, proc.stderr


def test_array_spec_and_option_lines():
    from zlbench.slurm.script import array_spec, pair_options

    assert array_spec(range(8)) == "0-7" and array_spec([4, 1]) == "1,4"
    assert array_spec([2, 3, 4], 2) == "2-4%2" and array_spec([5]) == "5"
    assert pair_options(["--ops", "a,b", "--dismiss=none", "--level", "core", "--x"]) == [
        ("--ops", "a,b"), ("--dismiss=none",), ("--level", "core"), ("--x",)]

"""The parallel warmup plugin in real pytest processes: shards are real children.

The corpus is tests/fixtures/warmup/corpus (see its README): test_mm sweeps 5 BLAS
shapes whose fake tuner keys on K (K=64 on both shards, and the winner depends on the
device parity), test_mm_self_transpose 3 shapes with one winner: 7 keys, 1 conflict.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest

from zlbench import autotune_sweep as sweep
from zlbench.markers import parse_marker
from zlbench.plugins import parallel_warmup as plugin

REPO = Path(__file__).resolve().parents[1]
CORPUS = Path(__file__).parent / "fixtures" / "warmup" / "corpus"
# backends.plugin_plan's order. pluggy calls later-registered plugins first, so this
# order alone would hide a missing tryfirst; REVERSED does not.
PLUGINS = ["zlbench.plugins.autotune", "zlbench.plugins.parallel_warmup"]
REVERSED = PLUGINS[::-1]


def bench_cmd(level="core", plugins=PLUGINS):
    cmd = [sys.executable, "-m", "pytest", "-s", "-q", "-p", "no:cacheprovider"]
    for name in plugins:
        cmd += ["-p", name]
    return cmd + ["benchmark/test_mm.py", "-m", "mm", "--level", level, "--mode", "kernel"]


def bench_env(run_dir: Path, **extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("ZL_") and k not in ("REPLAY_FROM", "PARALLEL_WARMUP_GPUS")}
    env.update(PYTHONPATH=str(REPO), PYTHONDONTWRITEBYTECODE="1", PYTHONUNBUFFERED="1",
               PYTEST_DISABLE_PLUGIN_AUTOLOAD="1", ZL_RUN_DIR=str(run_dir), ZL_AUTOTUNE_MODE="record",
               ZL_VISIBLE_KEY="CUDA_VISIBLE_DEVICES", CUDA_VISIBLE_DEVICES="6",
               ZL_WARMUP_DEVICES="6,7", PARALLEL_WARMUP_GPUS="2")
    env.update(extra)
    return {k: v for k, v in env.items() if v is not None}


def run_bench(run_dir: Path, level="core", plugins=PLUGINS, **extra):
    run_dir.mkdir()
    return subprocess.run(bench_cmd(level, plugins), cwd=CORPUS, env=bench_env(run_dir, **extra),
                          capture_output=True, text=True, timeout=90)


def read(path: Path):
    return json.loads(path.read_text())


def markers(stdout):
    return [m for m in map(parse_marker, stdout.splitlines()) if m is not None]


def test_sharded_sweep_merges_and_the_measurement_replays_it(tmp_path):
    run_dir = tmp_path / "run"
    proc = run_bench(run_dir, plugins=REVERSED)  # replay switched on before autotune reads it
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "shape key BlasBenchmark for benchmark/test_mm.py::test_mm (tried mm, BlasBenchmark)" in out
    assert "WARNING: parallel warmup: 1 of 7 keys chose different configs on different shards" in out
    assert "autotune: replayed 7, fell back 0" in out
    assert markers(out) == []

    report = read(run_dir / "plugins" / "parallel_warmup.json")
    assert report["refused"] is None
    assert (report["devices"], report["shard_exit_codes"]) == (["6", "7"], [0, 0])
    assert report["resolved_keys"] == ["BlasBenchmark", "mm_self_transpose"]
    assert report["shapes_per_shard"] == [{"BlasBenchmark": 3, "mm_self_transpose": 1},
                                          {"BlasBenchmark": 2, "mm_self_transpose": 2}]
    assert (report["merged_keys"], report["conflicts"]) == (7, 1)
    assert report["sweep_wall_s"] > 0

    # Each shard: its device from the caller's selection, its share of the shapes, record
    # mode, its own shape file, short timing, and no recursion.
    swept = []
    for i, device in enumerate(["6", "7"]):
        seen = read(run_dir / "warmup" / f"shard-{i}" / "seen-mm.json")
        assert (seen["device"], seen["mode"]) == (device, "record")
        assert (seen["replay_from"], seen["gpus"]) == (None, None)
        argv = seen["argv"]
        assert argv[argv.index("--shape_file") + 1] == str(run_dir / "warmup" / f"shard-{i}" / "shapes.yaml")
        assert argv[argv.index("--warmup") + 1] == "1" and "--level" in argv and "core" in argv
        swept += seen["shapes"]
    assert sorted(swept) == sorted([[2, 64, 64, 64], [2, 128, 128, 64], [2, 256, 256, 128],
                                    [2, 512, 512, 256], [2, 64, 64, 512]])

    # The measurement: this process, its own device, every shape, replaying the merge.
    main = read(run_dir / "seen-mm.json")
    assert (main["device"], main["mode"]) == ("6", "replay")
    assert main["replay_from"] == str(run_dir / "warmup" / "merged") and len(main["shapes"]) == 5
    autotune = read(run_dir / "plugins" / "autotune.json")
    assert (autotune["mode"], autotune["replayed"], autotune["fell_back"]) == ("replay", 7, 0)


def test_a_failing_shard_discards_the_sweep_and_the_run_sweeps_serially(tmp_path):
    run_dir = tmp_path / "run"
    proc = run_bench(run_dir, FAKE_FAIL_DEVICE="7")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    found = markers(proc.stdout)
    assert [(m.name, m.get("reason"), m.get("shard"), m.get("rc")) for m in found] == \
        [("PARALLEL_WARMUP_REFUSED", "shard_failed", "1", "1")]
    assert "autotune: recorded 7 keys in 2 kernels" in proc.stdout
    report = read(run_dir / "plugins" / "parallel_warmup.json")
    assert (report["refused"], report["shard_exit_codes"]) == ("shard_failed", [0, 1])
    assert "fake failure on device 7" in (run_dir / "warmup" / "shard-1" / "shard.log").read_text()
    assert not (run_dir / "warmup" / "merged").exists()
    assert read(run_dir / "seen-mm.json")["mode"] == "record"


def test_comprehensive_level_refuses_before_launching_anything(tmp_path):
    run_dir = tmp_path / "run"
    proc = run_bench(run_dir, level="comprehensive")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [(m.get("reason"), m.get("level")) for m in markers(proc.stdout)] == \
        [("level_comprehensive", "comprehensive")]
    assert "refused (--level comprehensive" in proc.stdout
    assert not (run_dir / "warmup").exists()
    assert read(run_dir / "plugins" / "parallel_warmup.json")["refused"] == "level_comprehensive"
    assert read(run_dir / "plugins" / "autotune.json")["mode"] == "record"


def test_unset_is_a_silent_no_op(tmp_path):
    run_dir = tmp_path / "run"
    proc = run_bench(run_dir, PARALLEL_WARMUP_GPUS=None)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "parallel warmup" not in proc.stdout
    assert not (run_dir / "plugins" / "parallel_warmup.json").exists()
    assert not (run_dir / "warmup").exists()


def test_importing_the_plugin_leaves_the_sweep_machinery_unloaded():
    # Every benchmark process loads the plugin; only PARALLEL_WARMUP_GPUS>=1 needs these.
    code = ("import sys, zlbench.plugins.parallel_warmup; print(sorted(m for m in "
            "('yaml', 'zlbench.autotune_sweep', 'zlbench.corpus.shapes', 'zlbench.corpus.scan') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=REPO)
    assert out.stdout.strip() == "[]"


# ---- interrupting the sweep ------------------------------------------------------

def alive(pid: int) -> bool:
    """Running (a zombie nobody reaped yet counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def wait_for(predicate, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("sig, expected_rc", [(signal.SIGINT, 2), (signal.SIGTERM, -signal.SIGTERM)])
def test_interrupting_the_sweep_stops_every_shard_and_its_children(tmp_path, sig, expected_rc):
    run_dir, pids = tmp_path / "run", tmp_path / "pids"
    run_dir.mkdir()
    pids.mkdir()
    main = subprocess.Popen(bench_cmd(), cwd=CORPUS, env=bench_env(run_dir, FAKE_HANG="1",
                            FAKE_PID_DIR=str(pids)), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    try:
        # Two shards, each with a child of its own, all sleeping.
        assert wait_for(lambda: len(list(pids.iterdir())) == 4), "shards never started"
        hung = [int(p.name) for p in pids.iterdir()]
        assert all(alive(pid) for pid in hung)
        main.send_signal(sig)
        rc = main.wait(timeout=30)
        out = main.communicate()[0]
        assert rc == expected_rc, out
        assert wait_for(lambda: not any(alive(pid) for pid in hung), timeout=5), out
    finally:
        if main.poll() is None:
            main.kill()
        kill_leftovers(int(p.name) for p in pids.iterdir())
    assert read(run_dir / "plugins" / "parallel_warmup.json")["refused"] == "interrupted"


def test_stop_escalates_to_sigkill_and_reaps(tmp_path):
    """KeyboardInterrupt inside wait_shards (a shard sends SIGINT to this process):
    every shard is reaped, one that ignores SIGTERM by SIGKILL after the grace period."""
    ready = tmp_path / "ready"
    stubborn = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                f"open({str(ready)!r}, 'w').close(); time.sleep(60)")
    trigger = ("import os, signal, time, pathlib; p = pathlib.Path(" + repr(str(ready)) + ")\n"
               "while not p.exists(): time.sleep(0.02)\n"
               "os.kill(os.getppid(), signal.SIGINT); time.sleep(60)")
    jobs = [{"cmd": [sys.executable, "-c", code], "env": dict(os.environ),
             "log": tmp_path / f"shard-{i}.log"} for i, code in enumerate([stubborn, trigger])]
    procs = []
    started = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            procs = plugin.launch_shards(jobs, tmp_path)
            plugin.wait_shards(procs, grace_s=0.5)
        assert [p.returncode for p in procs] == [-signal.SIGKILL, -signal.SIGTERM]
        assert time.monotonic() - started < 20
    finally:
        kill_leftovers(p.pid for p in procs if p.poll() is None)


def kill_leftovers(pids):
    """After a failure: the sleepers the code under test should have stopped (checked by
    command line, so a recycled pid is left alone)."""
    for pid in pids:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            if alive(pid) and (b"time.sleep" in cmdline or b"test_mm.py" in cmdline):
                os.kill(pid, signal.SIGKILL)
        except (FileNotFoundError, ProcessLookupError):
            pass


def test_a_broken_warmup_refuses_instead_of_failing_the_run(tmp_path, monkeypatch, capsys):
    def boom(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(sweep, "resolve_keys", boom)
    monkeypatch.delenv("REPLAY_FROM", raising=False)
    for name, value in bench_env(tmp_path).items():
        if name.startswith("ZL_") or name == "PARALLEL_WARMUP_GPUS":
            monkeypatch.setenv(name, value)
    config = types.SimpleNamespace(
        invocation_params=types.SimpleNamespace(dir=CORPUS, args=("benchmark/test_mm.py", "--level", "core")),
        option=types.SimpleNamespace(markexpr="", level="core"), args=["benchmark/test_mm.py"])
    plugin.pytest_configure(config)
    found = markers(capsys.readouterr().out)
    assert [(m.get("reason"), m.get("error")) for m in found] == [("warmup_error", "RuntimeError")]
    assert read(tmp_path / "plugins" / "parallel_warmup.json")["refused"] == "warmup_error"
    assert os.environ["ZL_AUTOTUNE_MODE"] == "record" and "REPLAY_FROM" not in os.environ

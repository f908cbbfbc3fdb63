"""`zlbench run` end to end on the bundled sample corpus, in real subprocesses."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import zlbench
from zlbench.proc import is_alive
from zlbench.markers import parse_marker
from zlbench.run.tee import AnsiStripper


def _last_line(text):
    return text.strip().splitlines()[-1]


def test_sample_run_records_identity_and_completes(tmp_path):
    proc = zlbench("run", "--op", "abs", "--dtypes", "float32", "--out", tmp_path, check=True)
    run_dir = Path(_last_line(proc.stdout))
    assert run_dir.parent == tmp_path and run_dir.name.endswith("_abs")
    assert (run_dir / ".complete").is_file()
    log = (run_dir / "run.log").read_text()
    assert "Operator: abs  Performance Test (dtype=torch.float32, mode=kernel,level=core)" in log
    assert "\x1b[" not in log
    ident = json.loads((run_dir / "run_identity.json").read_text())
    assert ident["status"] == "ok" and ident["exit_code"] == 0
    assert ident["backend"] == "cpu" and ident["timer"] == "direct"
    assert ident["level"] == "core" and ident["dtypes"] == ["float32"]
    assert ident["test_node"] == "benchmark/test_abs.py::test_abs"
    assert ident["knobs"]["BENCH_LEVEL"] == "core" and ident["knobs"]["ZL_DIRECT_REPEAT"] == 1
    assert ident["versions"]["torch"] and ident["versions"]["python"]
    assert ident["tuner_cache"]
    # The planned plugins ran inside pytest and their counts were folded in.
    timer = ident["plugins"]["direct_timer"]
    assert timer["timer"] == "direct" and timer["rows_direct"] == 3
    # The quiet CPU caliber: one pinned thread, per-call timing, no L2 flush, no NVML.
    assert ident["cpu_threads"] == 1 == ident["knobs"]["ZL_CPU_THREADS"] == timer["host_threads"]
    assert ident["direct_timer"] == {"mode": "kernels", "noise_target_pct": 0.5,
                                     "l2_flush": False, "clock": "host"}
    assert ident["clocks_locked"] == "unknown" and ident["device_state"]["source"] == "host"
    # summary joins every row's samples and spread from row_stats.jsonl.
    from zlbench.summary import summarize
    rows = summarize(run_dir).rows
    assert len(rows) == 3 and all(r.gems_samples >= 2 and r.torch_spread is not None for r in rows)
    assert "autotune" in ident["plugins"]
    # Third-party plugins stay off unless asked for; what loaded is recorded.
    assert ident["pytest_plugins"]["autoload"] is False
    assert ident["pytest_plugins"]["distributions"] == []
    assert "zlbench.plugins.phases" in ident["pytest_plugins"]["modules"]
    phases = [parse_marker(ln) for ln in log.splitlines() if ln.startswith("RUN_PHASE")]
    assert [m.get("phase") for m in phases] == ["session_start", "collected", "first_row",
                                                "session_finish"]
    shapes = (run_dir / "shapes.yaml").read_text()
    assert shapes.startswith("# zlbench: level=core")


def test_cpu_rows_that_allocate_are_not_timed_with_page_faults(tmp_path):
    # The sample's gems add allocates two 2 MiB halves a call; with glibc's adaptive
    # thresholds they went back to the kernel and faulted in again (992 faults a call,
    # 5x the time). ZL_CPU_KEEP_MEMORY (on by default) keeps them in the process, also
    # in a process the warm worker forks (the batch's default), whose malloc it set up.
    zlbench("batch", "--ops", "add", "--dtypes", "float16", "--out", tmp_path / "b",
            "--progress", "off", check=True)
    run_dir = tmp_path / "b" / "add"
    ident = json.loads((run_dir / "run_identity.json").read_text())
    assert ident["knobs"]["ZL_CPU_KEEP_MEMORY"] is True
    assert ident["plugins"]["direct_timer"]["keep_freed_memory"] is True
    records = [json.loads(line) for line in (run_dir / "row_stats.jsonl").read_text().splitlines()]
    assert len(records) == 6
    for rec in records:
        before, after = rec["device"]["before"], rec["device"]["after"]
        assert (after["minflt"] - before["minflt"]) / rec["samples"] < 1, rec
        assert before["host_speed"] > 0 and after["host_speed"] > 0


def test_env_knobs_reach_the_run_and_flags_beat_them(tmp_path):
    env = {"BENCH_LEVEL": "comprehensive", "ZL_DIRECT_REPEAT": "2", "DTYPES": "float16"}
    proc = zlbench("run", "--op", "sum", "--level", "core", "--dtypes", "float32",
                   "--out", tmp_path, env=env, check=True)
    ident = json.loads((Path(_last_line(proc.stdout)) / "run_identity.json").read_text())
    assert ident["level"] == "core" and ident["repeat"] == 2 and ident["dtypes"] == ["float32"]
    assert ident["knob_sources"]["level"] == "flag" and ident["knob_sources"]["direct_repeat"] == "env"


def _preflight(proc):
    markers = [parse_marker(line) for line in proc.stdout.splitlines()]
    found = [m for m in markers if m and m.name == "PREFLIGHT_FAILED"]
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert found, proc.stdout
    return found[0]


@pytest.mark.parametrize("args,env,check", [
    (["--op", "abs", "--level", "fast"], {}, "BENCH_LEVEL"),
    (["--op", "abs"], {"BENCH_LEVEL": "quick"}, "BENCH_LEVEL"),
    (["--op", "abs", "--direct-repeat", "0"], {}, "ZL_DIRECT_REPEAT"),
    (["--op", "nosuchop"], {}, "benchmark_file"),
    (["--test-node", "benchmark/test_nope.py::test_x"], {}, "benchmark_file"),
    (["--op", "abs", "--shape-file", "/nonexistent/shapes.yaml"], {}, "SHAPE_FILE"),
    (["--op", "abs", "--shape-mode", "file"], {}, "SHAPE_FILE"),
    (["--op", "abs", "--replay-from", "/nonexistent/records"], {}, "REPLAY_FROM"),
    (["--op", "abs", "--backend", "tpu"], {}, "ZL_BACKEND"),
    (["--op", "abs", "--flaggems-dir", "/nonexistent/FlagGems"], {}, "flaggems_dir"),
    (["--op", "abs", "--backend", "cuda", "--device", "5"], {"CUDA_VISIBLE_DEVICES": "0"}, "device"),
])
def test_every_preflight_check_exits_3_and_names_itself(tmp_path, args, env, check):
    proc = zlbench("run", *args, "--out", tmp_path, env=env)
    assert _preflight(proc).get("check") == check
    assert not any(tmp_path.iterdir()), "a failed preflight must not claim a run dir"


def test_replay_from_dir_without_records_is_a_preflight_failure(tmp_path):
    empty = tmp_path / "records"
    empty.mkdir()
    proc = zlbench("run", "--op", "abs", "--replay-from", empty, "--out", tmp_path / "out")
    assert _preflight(proc).get("check") == "REPLAY_FROM"


def test_flaggems_dir_without_benchmark_names_the_fix(tmp_path):
    proc = zlbench("run", "--op", "abs", "--flaggems-dir", tmp_path, "--out", tmp_path / "out")
    marker = _preflight(proc)
    assert marker.get("check") == "flaggems_dir" and "checkout root" in marker.get("reason")


def test_failing_benchmark_exits_1_without_complete(tmp_path):
    # rms_norm has no int32 variant: the corpus refuses the dtype, as FlagGems does.
    shapes = tmp_path / "bad_shapes.yaml"
    shapes.write_text("Benchmark:\n  shapes: [[3, 5, 7, 9, 11]]\nNormBenchmark:\n  shapes: [[4]]\n")
    proc = zlbench("run", "--op", "rms_norm", "--shape-file", shapes, "--dtypes", "float32",
                   "--out", tmp_path / "out")
    assert proc.returncode == 1, proc.stdout
    run_dir = Path(_last_line(proc.stdout))
    assert not (run_dir / ".complete").exists()
    assert json.loads((run_dir / "run_identity.json").read_text())["status"] == "failed"


CLAIMER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from zlbench.run.outdir import claim_run_dir
    root, go = Path(sys.argv[1]), float(sys.argv[2])
    while time.time() < go:
        time.sleep(0.001)
    print(claim_run_dir(root, "abs", when=go))
""")


def test_concurrent_claims_in_the_same_second_get_distinct_dirs(tmp_path):
    go = time.time() + 1.0
    procs = [subprocess.Popen([sys.executable, "-c", CLAIMER, str(tmp_path), str(go)],
                              stdout=subprocess.PIPE, text=True) for _ in range(6)]
    dirs = [p.communicate(timeout=30)[0].strip() for p in procs]
    assert len(set(dirs)) == 6
    names = sorted(Path(d).name for d in dirs)
    base = names[0]
    assert names == [base] + [f"{base}-{n}" for n in range(2, 7)]


def test_two_real_runs_at_once_never_share_a_dir(tmp_path):
    cmd = [sys.executable, "-m", "zlbench", "run", "--op", "abs", "--dtypes", "float32",
           "--out", str(tmp_path)]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    dirs = {_last_line(o) for o in outs}
    assert len(dirs) == 2 and all((Path(d) / ".complete").exists() for d in dirs)


def test_run_dir_flag_refuses_a_complete_dir(tmp_path):
    done = tmp_path / "abs"
    done.mkdir()
    (done / ".complete").write_text("x")
    proc = zlbench("run", "--op", "abs", "--run-dir", done)
    assert proc.returncode != 0 and ".complete" in (proc.stdout + proc.stderr)
    # A preflight failure (exit 3, with its marker), not a failed benchmark or a traceback.
    assert proc.returncode == 3 and "PREFLIGHT_FAILED check=run_dir" in proc.stdout
    assert "Traceback" not in proc.stderr


def test_ansi_stripping_across_chunk_boundaries():
    s = AnsiStripper()
    out = s.feed(b"\x1b[32mSUCC") + s.feed(b"ESS\x1b[") + s.feed(b"0m done\x1b") + s.feed(b"]0;title\x07!")
    out += s.flush()
    assert out == b"SUCCESS done!"
    whole = AnsiStripper()
    assert whole.feed(b"\x1b[31mFAILED\x1b[0m: Operator=x") + whole.flush() == b"FAILED: Operator=x"


HANG_CORPUS = {
    "benchmark/__init__.py": "",
    "benchmark/base.py": "",
    "benchmark/conftest.py": textwrap.dedent("""
        def pytest_addoption(parser):
            parser.addoption("--level"); parser.addoption("--mode")
    """),
    "benchmark/test_hang.py": textwrap.dedent("""
        import os, pathlib, time, pytest
        @pytest.mark.hang
        def test_hang():
            pathlib.Path(os.environ["ZL_RUN_DIR"], "child.pid").write_text(str(os.getpid()))
            time.sleep(120)
    """),
}



def test_ctrl_c_leaves_no_child_running(tmp_path):
    for rel, text in HANG_CORPUS.items():
        (tmp_path / "fg" / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "fg" / rel).write_text(text)
    run_dir = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "zlbench", "run", "--flaggems-dir",
                             str(tmp_path / "fg"), "--op", "hang", "--run-dir", str(run_dir)],
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    pid_file = run_dir / "child.pid"
    deadline = time.time() + 60
    while not pid_file.exists() and time.time() < deadline:
        time.sleep(0.1)
    child = int(pid_file.read_text())
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
    proc.communicate(timeout=60)
    assert proc.returncode != 0
    assert proc.returncode == 130  # the shell's code for Ctrl-C, which the batch reads as interrupted
    deadline = time.time() + 10
    while is_alive(child) and time.time() < deadline:
        time.sleep(0.1)
    assert not is_alive(child)
    assert not (run_dir / ".complete").exists()
    assert json.loads((run_dir / "run_identity.json").read_text())["status"] != "ok"


def test_the_benchmark_child_can_import_this_zlbench_from_the_corpus_root(monkeypatch):
    import site

    from zlbench.proc import importable_pythonpath

    parent = str(Path(__file__).resolve().parents[1])
    other = os.path.join(os.sep, "opt", "flaggems", "src")
    # A source-tree zlbench (found only through the caller's cwd) is appended, once.
    monkeypatch.setattr(site, "getsitepackages", lambda: [])
    assert importable_pythonpath(other).split(os.pathsep) == [other, parent]
    assert importable_pythonpath(os.pathsep.join([other, parent])).split(os.pathsep) == [other, parent]
    assert importable_pythonpath(None) == parent
    # An installed zlbench lives in a site dir, which never goes on PYTHONPATH.
    monkeypatch.setattr(site, "getsitepackages", lambda: [parent])
    assert importable_pythonpath(other) == other


def test_a_parallel_warmup_run_asks_the_vendor_tool_once(tmp_path, monkeypatch):
    from zlbench import knobs
    from zlbench.run import plan_run

    calls = tmp_path / "calls"
    tool = tmp_path / "nvidia-smi"
    tool.write_text(f'#!/bin/sh\necho x >> {calls}\nprintf "0, NVIDIA H200\\n1, NVIDIA H200\\n"\n')
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    settings = knobs.resolve({"backend": "cuda", "op": "abs", "device": "1",
                              "parallel_warmup_gpus": "2"}, {})
    plan = plan_run(settings)
    assert plan.parallel_warmup_pool == ["1", "0"]   # the run's own device first
    assert calls.read_text().count("x") == 1

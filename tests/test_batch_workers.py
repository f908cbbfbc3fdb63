"""Warm workers (`zlbench batch --run-mode worker`): the same run dirs as fresh
processes, refusal when a device is initialised, recycling, reaping on SIGTERM; the
device probes; timeouts that say what the operator was doing."""

import csv
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from zlbench import backends
from zlbench.proc import is_alive, tagged_processes
from zlbench.run.worker import SPARES, conftest_imports

CORPUS = Path(__file__).parent / "fixtures" / "faulty_corpus"
SAMPLE_SHAPES = 'Benchmark:\n  shapes: [[64, 64]]\n  shape_desc: "M, N"\n'


def _env(tmp_path, **extra):
    return {**os.environ, "FAULTY_STATE_DIR": str(tmp_path / "state"),
            "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", **extra}


def _batch(tmp_path, out, *args, env=None, timeout=240):
    cmd = [sys.executable, "-m", "zlbench", "batch", "--backend", "cpu", "--out", str(out),
           "--progress", "plain", "--dismiss", "none", "--kill-grace", "1", *args]
    return subprocess.run(cmd, env=env or _env(tmp_path), capture_output=True, text=True,
                          timeout=timeout)


def _rows(batch):
    with open(batch / "ops_status.csv", newline="") as f:
        return {r["operator"]: r for r in csv.DictReader(f)}


def _events(batch):
    path = batch / "attempts.jsonl"
    if not path.exists():
        return []
    return [json.loads(l) for l in path.read_text().splitlines() if l.endswith("}")]


# -- the device probes ------------------------------------------------------------

class _FakeRuntime:
    def __init__(self, initialised):
        self.initialised = initialised

    def is_initialized(self):
        return self.initialised


def test_probes_read_the_imported_runtime_and_never_import_one(monkeypatch):
    fake = type(sys)("torch")
    fake.cuda = _FakeRuntime(False)
    monkeypatch.setitem(sys.modules, "torch", fake)
    assert backends.initialised_runtimes() == []
    fake.cuda = _FakeRuntime(True)
    assert backends.initialised_runtimes() == ["cuda", "rocm"]   # both speak torch.cuda
    fake.cuda, fake.npu = _FakeRuntime(False), _FakeRuntime(True)
    assert backends.initialised_runtimes() == ["ascend"]
    fake.npu = None
    monkeypatch.setitem(sys.modules, "flag_gems", type(sys)("flag_gems"))
    assert backends.initialised_runtimes() == ["flag_gems"]       # initialises CUDA at import
    monkeypatch.delitem(sys.modules, "torch")
    monkeypatch.delitem(sys.modules, "flag_gems")
    assert backends.initialised_runtimes() == []


def test_conftest_imports_leave_out_the_library_and_the_corpus(tmp_path):
    (tmp_path / "benchmark").mkdir()
    (tmp_path / "mylocal.py").write_text("")
    (tmp_path / "benchmark" / "conftest.py").write_text(
        "import os, torch\nimport flag_gems\nfrom flag_gems.utils import x\nimport numpy as np\n"
        "from benchmark.base import y\nfrom . import consts\nimport mylocal\n"
        "def f():\n    import triton\n")
    assert conftest_imports(tmp_path) == ["os", "torch", "numpy"]
    assert conftest_imports(tmp_path / "nowhere") == []


# -- end to end -------------------------------------------------------------------

def _sample_batch(tmp_path, mode):
    shapes = tmp_path / "shapes.yaml"
    shapes.write_text(SAMPLE_SHAPES)
    out = tmp_path / mode
    proc = _batch(tmp_path, out, "--devices", "0", "--ops", "abs", "--dtypes", "float32",
                  "--shape-file", str(shapes), "--run-mode", mode)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


def test_worker_and_fresh_leave_the_same_run_dir(tmp_path):
    dirs = {mode: _sample_batch(tmp_path, mode) / "abs" for mode in ("worker", "fresh")}
    listing = {m: sorted(str(p.relative_to(d)) for p in d.rglob("*")) for m, d in dirs.items()}
    assert listing["worker"] == listing["fresh"]
    assert ".complete" in listing["worker"] and "plugins/phases.json" in listing["worker"]
    ident = {m: json.loads((d / "run_identity.json").read_text().replace(str(d.parent), "<batch>"))
             for m, d in dirs.items()}
    for data in ident.values():
        for key in ("started", "finished", "duration_s", "command", "tuner_cache"):
            data.pop(key)
        data["plugins"]["phases"].pop("times")        # when each phase happened
        data["plugins"]["phases"].pop("last_row_t")
        # Measurements, not layout: why each timing stopped, rows the machine slowed.
        data["plugins"]["direct_timer"].pop("stops")
        # How much the collector had to walk: a worker froze its imports before forking.
        assert data["plugins"]["gc_freeze"].pop("frozen") > 0
        data["plugins"]["gc_freeze"].pop("collect_ms_before")
        data["plugins"]["gc_freeze"].pop("collect_ms_after")
        for where in (data, data["plugins"]["direct_timer"]):
            where["device_state"].pop("rows_throttled")
            where["device_state"].pop("median_host_speed", None)  # the core's speed
    assert ident["worker"] == ident["fresh"]
    assert ident["worker"]["status"] == "ok" and ident["worker"]["pytest_plugins"]["autoload"] is False
    # The same lines in run.log, numbers aside (timings, times, pids), and aside from
    # DEVICE_THROTTLED lines: whether the host's CPU was contended is the machine's load.
    def shape(text):
        return [" ".join("#" if any(c.isdigit() for c in w) else w for w in line.split())
                for line in text.splitlines()
                if line.strip() and not line.startswith(("command", "run dir", "DEVICE_THROTTLED"))]
    logs = {m: shape((d / "run.log").read_text()) for m, d in dirs.items()}
    assert logs["worker"] == logs["fresh"]


def test_a_worker_that_finds_a_device_initialised_refuses_and_the_batch_goes_on_fresh(tmp_path):
    # sitecustomize imports a stand-in flag_gems into every interpreter, the worker's
    # included: it must not fork after that.
    site = tmp_path / "site"
    site.mkdir()
    (site / "flag_gems.py").write_text("")
    (site / "sitecustomize.py").write_text("import flag_gems\n")
    env = _env(tmp_path, PYTHONPATH=os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]))
    out = tmp_path / "b"
    proc = _batch(tmp_path, out, "--flaggems-dir", str(CORPUS), "--devices", "0",
                  "--ops", "good_op", "--run-mode", "worker", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    marker = "WORKER_FORK_REFUSED device=0 reason=device_initialised detail=flag_gems"
    assert marker in proc.stdout and marker in (out / "batch.log").read_text()
    row = _rows(out)["good_op"]
    assert (row["status"], row["run_mode"]) == ("ok", "fresh")


def test_workers_are_recycled_after_max_ops(tmp_path):
    out = tmp_path / "b"
    proc = _batch(tmp_path, out, "--flaggems-dir", str(CORPUS), "--devices", "0",
                  "--ops", "good_op,slow_op,dtype_op", "--fallback-dtypes", "none",
                  "--run-mode", "worker", "--worker-max-ops", "2")
    assert proc.returncode == 1, proc.stdout + proc.stderr   # dtype_op fails on float16
    rows = _rows(out)
    assert {op: (r["status"], r["run_mode"]) for op, r in rows.items()} == {
        "dtype_op": ("failed", "worker"), "good_op": ("ok", "worker"), "slow_op": ("ok", "worker")}
    log = (out / "batch.log").read_text()
    assert log.count("recycled: 2 attempts served") == 1
    # An ordinary benchmark failure leaves the worker as it was: no recycle for it.
    assert "recycled: an attempt ended failed" not in log
    assert tagged_processes("ZL_BATCH_DIR", str(out.resolve())) == {}


def test_sigterm_to_the_driver_reaps_workers_and_their_children(tmp_path):
    out = tmp_path / "b"
    driver = subprocess.Popen(
        [sys.executable, "-m", "zlbench", "batch", "--backend", "cpu", "--flaggems-dir", str(CORPUS),
         "--devices", "0,1", "--out", str(out), "--ops", "slow_op,good_op", "--dismiss", "none",
         "--kill-grace", "1", "--progress", "plain", "--run-mode", "worker"],
        env=_env(tmp_path, FAULTY_SLOW_S="300"), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True)
    deadline = time.monotonic() + 120
    while not any(e["event"] == "attempt" and e["op"] == "slow_op" for e in _events(out)):
        assert time.monotonic() < deadline and driver.poll() is None, "slow_op never started"
        time.sleep(0.1)
    child = next(e["pid"] for e in _events(out) if e["event"] == "attempt" and e["op"] == "slow_op")
    time.sleep(1)
    driver.send_signal(signal.SIGTERM)
    output, _ = driver.communicate(timeout=60)
    assert driver.returncode == 130, output
    assert not is_alive(child)
    assert tagged_processes("ZL_BATCH_DIR", str(out.resolve())) == {}


@pytest.mark.parametrize("mode", ["worker", "fresh"])
def test_timeouts_say_compiling_or_no_progress(tmp_path, mode):
    out = tmp_path / "b"
    env = _env(tmp_path, TRITON_CACHE_DIR=str(tmp_path / "triton"))
    started = time.monotonic()
    proc = _batch(tmp_path, out, "--flaggems-dir", str(CORPUS), "--devices", "0",
                  "--ops", "compile_op,hang_op", "--timeout", "60", "--op-timeout", "compile_op=8",
                  "--stall-timeout", "5", "--retries", "0", "--run-mode", mode, env=env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    rows = _rows(out)
    # compile_op prints nothing but keeps adding kernels: only the hard cap stops it.
    assert rows["compile_op"]["status"] == "timeout"
    assert rows["compile_op"]["timeout_kind"] == "timeout_compiling"
    assert rows["compile_op"]["reason"].startswith("timed out after 8 s while compiling (")
    # hang_op stops moving: the no-progress timeout stops it long before the 60 s cap.
    assert rows["hang_op"]["status"] == "timeout"
    assert rows["hang_op"]["timeout_kind"] == "timeout_no_progress"
    assert rows["hang_op"]["reason"].startswith("no progress for 5 s")
    assert float(rows["hang_op"]["duration_s"]) < 40
    assert time.monotonic() - started < 120


# -- prestart: the next operator's benchmark process readied while one runs ------------

LIBRARY = '''import gc, os, sys
# What a library's import leaves for the collector (flag_gems: hundreds of thousands).
_held = [[] for _ in range(20000)]
with open(os.path.join(os.environ["FAULTY_STATE_DIR"], "library.log"), "a") as f:
    f.write(f"import {os.getpid()} {os.environ.get('LIB_FLAG', '-')}\\n")
    f.write(f"frozen {os.getpid()} {gc.get_freeze_count()}\\n")
print(f"stand-in library imported in {os.getpid()}", flush=True)
'''
RECORD_PID = '''

import os as _os
import pytest as _pytest


@_pytest.fixture(autouse=True)
def _record_pid(request):
    with open(_os.path.join(_os.environ["FAULTY_STATE_DIR"], "library.log"), "a") as f:
        f.write(f"test {_os.getpid()} {request.node.name}\\n")
'''


def _library_corpus(tmp_path):
    """The faulty corpus with a conftest that imports a stand-in flag_gems, the library
    under test, which a worker never imports (the real one initialises the device)."""
    import shutil

    corpus = tmp_path / "corpus"
    shutil.copytree(CORPUS, corpus)
    conftest = corpus / "benchmark" / "conftest.py"
    text = conftest.read_text().replace("from . import base", "import flag_gems  # noqa: F401\n\nfrom . import base")
    conftest.write_text(text + RECORD_PID)
    site = tmp_path / "site"
    site.mkdir()
    (site / "flag_gems.py").write_text(LIBRARY)   # never imported by a worker
    (tmp_path / "state").mkdir()
    env = _env(tmp_path, PYTHONPATH=os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]),
               LIB_FLAG="one")
    return corpus, env


def _library_log(tmp_path, kind_of_line="import"):
    """{pid: what} of the stand-in library's import lines (or of another kind: frozen,
    the objects frozen when its import ended) and of its tests."""
    found, tests = {}, {}
    for line in (tmp_path / "state" / "library.log").read_text().splitlines():
        kind, pid, what = line.split()
        if kind == "test":
            tests[int(pid)] = what
        elif kind == kind_of_line:
            found[int(pid)] = what
    return found, tests


def test_a_prestarted_benchmark_process_imports_the_library_before_its_run(tmp_path):
    corpus, env = _library_corpus(tmp_path)
    out = tmp_path / "b"
    proc = _batch(tmp_path, out, "--flaggems-dir", str(corpus), "--devices", "0",
                  "--ops", "good_op,slow_op,broken_op", "--run-mode", "worker", env=env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert {op: r["status"] for op, r in _rows(out).items()} == {
        "good_op": "ok", "slow_op": "ok", "broken_op": "failed"}
    imports, tests = _library_log(tmp_path)
    # Every benchmark process imported the library itself, once, in the environment the
    # run gave it; the worker never did (it would have refused to fork).
    assert set(tests) <= set(imports) and set(imports.values()) == {"one"}
    workers = set(map(int, re.findall(r"worker (\d+) for device 0: ready", (out / "batch.log").read_text())))
    assert workers and not workers & set(imports)
    # The first operator started plainly; the next ones got a prestarted process, and
    # what the library printed while it was imported is in their run.log, before pytest's.
    attempts = [e for e in _events(out) if e["event"] == "attempt"]
    logs = [(e["op"], (out / e["log"]).read_text()) for e in attempts]
    assert "prestarted benchmark process" not in logs[0][1]
    used = re.compile(r"prestarted benchmark process (\d+) used")
    served = {op: int(used.search(text).group(1)) for op, text in logs[1:] if op != "broken_op"}
    assert len(served) >= 1
    frozen_at_import, _ = _library_log(tmp_path, "frozen")
    for op, pid in served.items():
        assert tests[pid] == f"test_{op}"
        run_log = (out / op / "run.log").read_text()
        assert f"stand-in library imported in {pid}" in run_log
        assert run_log.index("stand-in library imported") < run_log.index("test session starts")
        # What the import left was frozen before the run began (the freeze at the end of
        # collection then walks only what pytest made): the library's 20,000 lists too.
        froze = int(re.search(r"froze the (\d+) objects the import left", run_log).group(1))
        assert run_log.index("objects the import left") < run_log.index("test session starts")
        # Counted apart from what the worker froze before it forked (frozen at import end).
        assert 20000 <= froze < int(frozen_at_import[pid])
    # Two spares were readied while the first operator ran: the second operator's
    # process and the third's had both imported before the second's test began.
    order = (tmp_path / "state" / "library.log").read_text().splitlines()
    second = next(i for i, line in enumerate(order) if line.endswith(f"test_{attempts[1]['op']}"))
    first_pid = next(int(line.split()[1]) for line in order if line.endswith(f"test_{attempts[0]['op']}"))
    ahead = {int(line.split()[1]) for line in order[:second] if line.startswith("import")} - {first_pid}
    assert len(ahead) >= 2, order
    # The spares readied after the last operator were stopped with the worker.
    spare = set(imports) - set(tests)
    assert len(spare) <= SPARES and not any(is_alive(p) for p in spare)


def test_a_prestarted_process_freezes_nothing_where_zl_gc_freeze_is_off(tmp_path):
    corpus, env = _library_corpus(tmp_path)
    env["ZL_GC_FREEZE"] = "0"
    out = tmp_path / "b"
    proc = _batch(tmp_path, out, "--flaggems-dir", str(corpus), "--devices", "0",
                  "--ops", "good_op,slow_op", "--run-mode", "worker", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    logs = "\n".join(p.read_text() for p in out.rglob("*.log") if p.is_file())
    assert re.search(r"prestarted benchmark process \d+ used", logs)
    assert "the import left" not in logs and "the import left" not in (out / "slow_op" / "run.log").read_text()
    assert json.loads((out / "slow_op" / "plugins" / "gc_freeze.json").read_text()) == {"enabled": False}


@pytest.mark.parametrize("value, frozen", [("", True), ("1", True), ("0", False), ("maybe", False)])
def test_freeze_import_counts_what_it_froze_and_follows_zl_gc_freeze(value, frozen):
    # In a process of its own: a freeze is never undone.
    code = textwrap.dedent(f"""
        import gc
        from zlbench.plugins.gc_freeze import freeze_import
        gc.freeze()  # what a worker froze before forking
        before = gc.get_freeze_count()
        made = [[] for _ in range(5000)]
        got = freeze_import({{"ZL_GC_FREEZE": {value!r}}})
        print(before, got, gc.get_freeze_count())
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    before, got, after = proc.stdout.split()
    if frozen:
        assert int(got) == int(after) - int(before) and int(got) >= 5000
    else:
        assert got == "None" and after == before


@pytest.mark.parametrize("how", ["--no-worker-prestart", "isolated caches"])
def test_without_a_usable_spare_every_attempt_forks_plainly(tmp_path, how):
    corpus, env = _library_corpus(tmp_path)
    out = tmp_path / "b"
    args = ["--no-worker-prestart"] if how.startswith("--") else []
    if how == "isolated caches":
        env["ZL_ISOLATE_TUNER_CACHE"] = "1"   # a fresh cache dir per run: no environment to ready
    proc = _batch(tmp_path, out, "--flaggems-dir", str(corpus), "--devices", "0",
                  "--ops", "good_op,slow_op", "--run-mode", "worker", *args, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    imports, tests = _library_log(tmp_path)
    assert set(imports) == set(tests) and len(tests) == 2
    logs = "\n".join(p.read_text() for p in (out / "logs").rglob("*") if p.is_file())
    assert not re.search(r"prestarted benchmark process \d+ used", logs)
    if how == "isolated caches":   # the spare says why it readied no process
        assert "no prestarted benchmark process: ValueError: isolated tuner caches" in logs


def test_a_library_that_fails_to_import_fails_its_runs_prestarted_or_not(tmp_path):
    corpus, env = _library_corpus(tmp_path)
    (tmp_path / "site" / "flag_gems.py").write_text(LIBRARY + "raise ImportError('stand-in library is broken')\n")
    out = tmp_path / "b"
    proc = _batch(tmp_path, out, "--flaggems-dir", str(corpus), "--devices", "0", "--retries", "0",
                  "--fallback-dtypes", "none", "--ops", "good_op,slow_op", "--run-mode", "worker", env=env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    rows = _rows(out)
    assert {op: r["status"] for op, r in rows.items()} == {"good_op": "failed", "slow_op": "failed"}
    attempts = [e for e in _events(out) if e["event"] == "attempt"]
    second = attempts[1]["op"]
    log = (out / attempts[1]["log"]).read_text()
    assert re.search(r"prestarted benchmark process \d+ used", log)
    # The failure the prestarted import met is said, and pytest's own import shows it.
    run_log = (out / second / "run.log").read_text()
    assert "failed: {'flag_gems': 'ImportError: stand-in library is broken'}" in run_log
    assert run_log.count("stand-in library is broken") >= 2


def test_a_spare_that_exited_before_its_attempt_is_not_used_and_says_so(capfd):
    # The attempt then forks plainly; the worker log must say why the spare was passed over.
    from zlbench.run.spare import Spare

    pid = os.fork()
    if pid == 0:
        os._exit(0)
    read_fd, write_fd = os.pipe()
    os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)  # exited, left for hand() to reap
    try:
        assert Spare(pid, write_fd).hand({"cmd": "attempt"}) is None
    finally:
        os.close(read_fd)
    assert f"zlbench worker: spare {pid} not used: it had exited" in capfd.readouterr().err


def test_prewarm_calls_the_first_function_of_a_name_that_works_and_skips_missing_ones(monkeypatch):
    import types

    from zlbench.run.worker import PREIMPORT, PREWARM, prewarm

    calls = []
    new = types.ModuleType("zl_fake_new_cache")
    new.triton_key = lambda: calls.append("new")
    old = types.ModuleType("zl_fake_old_compiler")
    old.triton_key = lambda: calls.append("old")
    broken = types.ModuleType("zl_fake_broken")

    def fails():
        raise RuntimeError("no libtriton here")

    broken.fingerprint = fails
    for module in (new, old, broken):
        monkeypatch.setitem(sys.modules, module.__name__, module)
    done, failed = prewarm([
        ("zl_fake_missing", "triton_key"),
        ("zl_fake_broken", "fingerprint"),
        ("zl_fake_new_cache", "triton_key"),
        ("zl_fake_old_compiler", "triton_key"),  # the same name already computed
    ])
    assert done == ["zl_fake_new_cache.triton_key()"] and calls == ["new"]
    # One that raised is reported (the worker's ready event lists it with failed imports).
    assert failed == {"zl_fake_broken.fingerprint()": "RuntimeError: no libtriton here"}
    # What the worker computes ahead names triton's key, and sympy is imported ahead.
    assert {f for _, f in PREWARM} == {"triton_key"} and "sympy" in PREIMPORT


def test_a_forked_benchmark_process_imports_nothing_of_torchs_at_its_first_profiler_session():
    """The direct timer's first traced timing starts torch.profiler, which imports
    torch._inductor and torch._dynamo (1.5-2.9 s on an H200 host) unless the worker did
    before forking. (That the imports leave a CUDA device alone is the GPU test
    test_the_workers_imports_leave_the_cuda_driver_uninitialised: on a CPU host torch
    has no runtime to initialise.)"""
    pytest.importorskip("torch")
    script = textwrap.dedent(
        """
        import sys
        from zlbench.run.fork import preimport
        from zlbench.run.worker import PREIMPORT
        from zlbench import backends
        imported, failed = preimport(PREIMPORT)
        assert "torch._inductor.config" in imported, failed
        assert backends.initialised_runtimes() == [], backends.initialised_runtimes()
        import torch
        before = set(sys.modules)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
            torch.ones(4).sum()
        print(sorted(m for m in set(sys.modules) - before if m.split(".")[0] == "torch"))
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    new = eval(out.stdout.strip().splitlines()[-1])
    assert not [m for m in new if m.startswith(("torch._inductor", "torch._dynamo"))], new
    assert new == [], new  # nothing else of torch's either


def test_the_tracer_starts_ahead_only_where_the_direct_timer_would_trace(monkeypatch):
    pytest.importorskip("torch")
    import dataclasses

    import torch

    from zlbench.backends import BACKENDS
    from zlbench.plugins import percall

    monkeypatch.setenv("TEARDOWN_CUPTI", "")  # restored after the test, set or not
    monkeypatch.delenv("TEARDOWN_CUPTI")
    # Nothing to start: no profiler activity (the CPU's timer), the knob off, or a direct
    # timer that does not trace.
    on = {"ZL_TRACER_PRESTART": "1"}
    assert percall.start_tracer({"ZL_BACKEND": "cpu", **on}) is None
    assert percall.start_tracer({"ZL_BACKEND": "cuda"}) is None  # off by default
    assert percall.start_tracer({"ZL_BACKEND": "cuda", "ZL_DIRECT_TIMER": "percall", **on}) is None
    assert "ZL_TRACER_PRESTART=" in percall.start_tracer({"ZL_BACKEND": "cuda", "ZL_TRACER_PRESTART": "maybe"})
    # A backend whose tracer this torch has (here the CPU's activity stands in): one empty
    # session, closed again, and CUPTI kept up after it as the traced clock keeps it.
    monkeypatch.setitem(BACKENDS, "cuda", dataclasses.replace(BACKENDS["cuda"], profiler_activity="CPU"))
    line = percall.start_tracer({"ZL_BACKEND": "cuda", **on})
    assert line.startswith("zlbench worker: this benchmark process started the profiler's tracer "
                           "(torch.profiler.CPU) in ") and line.endswith("s, before its run began")
    assert os.environ["TEARDOWN_CUPTI"] == "0" and not torch.autograd.profiler._is_profiler_enabled
    # Not while the run waits for this process: its first traced timing starts it.
    assert percall.start_tracer({"ZL_BACKEND": "cuda", **on}, run_waiting=lambda: True).endswith("the run was waiting")
    assert percall.start_tracer({"ZL_BACKEND": "cpu", **on}, run_waiting=lambda: True) is None  # nothing to say
    # One this torch lacks is said, and left to the first traced timing.
    monkeypatch.setitem(BACKENDS, "cuda", dataclasses.replace(BACKENDS["cuda"], profiler_activity="NO_SUCH"))
    assert "not started: AttributeError" in percall.start_tracer({"ZL_BACKEND": "cuda", **on})


def test_the_batch_gives_each_run_the_tracer_switch_as_a_switch():
    from zlbench import knobs
    from zlbench.batch.execute import knob_args

    off = knob_args(knobs.resolve({}, {}, names=knobs.MEASURE_KNOBS))
    on = knob_args(knobs.resolve({"tracer_prestart": "1"}, {}, names=knobs.MEASURE_KNOBS))
    assert "--tracer-prestart" in on and "--no-tracer-prestart" in off and "--tracer-prestart" not in off
    # Other knobs keep their value after the flag.
    assert on[on.index("--compile-workers") + 1] == "0"


def test_an_attempt_leaves_without_the_exit_handlers_it_inherited_and_runs_its_cleanup(tmp_path):
    """The attempt child's exit handlers are the worker's (its imports registered them):
    it leaves without them, after its own cleanup; a benchmark process keeps them."""
    import atexit

    from zlbench.run.attempt_child import run_attempt
    from zlbench.run.fork import exit_with

    inherited, cleaned, benchmark = tmp_path / "inherited", tmp_path / "cleaned", tmp_path / "benchmark"

    def worker_import_handler():
        inherited.write_text("ran")

    atexit.register(worker_import_handler)
    try:
        pid = os.fork()
        if pid == 0:  # an attempt whose zlbench run refuses its flags at once
            msg = {"log": str(tmp_path / "attempt.log"), "env": dict(os.environ), "cwd": str(tmp_path),
                   "argv": ["--no-such-flag"]}
            run_attempt(msg, start=None, cleanup=lambda: cleaned.write_text("ran"))
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) != 0
        assert cleaned.read_text() == "ran" and not inherited.exists()
        pid = os.fork()
        if pid == 0:  # a benchmark process leaves as an interpreter would
            exit_with(lambda: benchmark.write_text("ran") and 0)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert benchmark.read_text() == "ran" and inherited.read_text() == "ran"
    finally:
        atexit.unregister(worker_import_handler)


def test_the_worker_is_told_the_batchs_backend():
    from zlbench.batch.workers import worker_command

    cmd = worker_command("/corpus", True, "cuda")
    assert cmd[cmd.index("--backend") + 1] == "cuda" and "--prestart" in cmd
    assert "--backend" not in worker_command("/corpus")

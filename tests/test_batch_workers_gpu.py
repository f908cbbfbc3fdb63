"""Warm workers on a CUDA device with FlagGems (FLAGGEMS_DIR, a checkout).

    FLAGGEMS_DIR=~/FlagGems GEMS_VENDOR=nvidia python -m pytest -m gpu tests/test_batch_workers_gpu.py -s

- the device probe sees CUDA initialised only once something initialised it;
- the worker's imports leave the CUDA driver uninitialised, and a fork of it runs and traces
  a kernel without importing anything of torch's;
- a worker-mode batch over FlagGems measures (graph timer) without any worker refusing:
  nothing the worker imports (torch, triton, the conftest's imports) touches the GPU;
- a forked operator that crashes the CUDA context leaves the next operator's rows alone.
"""

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

FLAGGEMS_DIR = os.environ.get("FLAGGEMS_DIR")
needs_flaggems = pytest.mark.skipif(not FLAGGEMS_DIR, reason="FLAGGEMS_DIR is not set")

PROBE = """
import json
from zlbench import backends
import torch
before = backends.initialised_runtimes()
torch.zeros(1, device="cuda")
print(json.dumps([before, backends.initialised_runtimes()]))
"""


def test_the_probe_sees_cuda_only_once_initialised():
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True)
    before, after = json.loads(out.stdout.strip().splitlines()[-1])
    assert before == [] and "cuda" in after


FORK_AFTER_PREIMPORT = """
import ctypes, os, sys
from zlbench.run.fork import preimport
from zlbench.run.worker import PREIMPORT
imported, failed = preimport(PREIMPORT)
count = ctypes.c_int()
# CUDA_ERROR_NOT_INITIALIZED (3): nothing the worker imported called cuInit.
print("driver", ctypes.CDLL("libcuda.so.1").cuDeviceGetCount(ctypes.byref(count)), flush=True)
pid = os.fork()
if pid == 0:
    import torch
    before = set(sys.modules)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]):
        torch.ones(1024, device="cuda").sum().item()
    new = sorted(m for m in set(sys.modules) - before if m.split(".")[0] == "torch")
    print("child", new, flush=True)
    os._exit(0)
print("child exit", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)
"""


def test_the_workers_imports_leave_the_cuda_driver_uninitialised():
    out = subprocess.run([sys.executable, "-c", FORK_AFTER_PREIMPORT], capture_output=True, text=True, timeout=300)
    lines = out.stdout.splitlines()
    assert out.returncode == 0 and "driver 3" in lines, out.stdout + out.stderr
    # A forked benchmark process uses the device and traces it, importing nothing of torch's.
    assert "child []" in lines and "child exit 0" in lines, out.stdout + out.stderr


@needs_flaggems
def test_a_worker_batch_over_flaggems_forks_every_operator(tmp_path):
    out = tmp_path / "b"
    ops = ["abs", "softmax", "sum"]
    proc = subprocess.run(
        [sys.executable, "-m", "zlbench", "batch", "--flaggems-dir", FLAGGEMS_DIR, "--backend", "cuda",
         "--devices", "0", "--ops", ",".join(ops), "--dtypes", "float16", "--dismiss", "none",
         "--progress", "plain", "--out", str(out), "--run-mode", "worker", "--timeout", "600"],
        capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "WORKER_FORK_REFUSED" not in proc.stdout
    with open(out / "ops_status.csv", newline="") as f:
        rows = {r["operator"]: r for r in csv.DictReader(f)}
    for i, op in enumerate(ops):
        row = rows[op]
        assert (row["status"], row["run_mode"], row["timer"]) == ("ok", "worker", "graph")
        # No interpreter, torch or plugin start-up. The first operator finds no spare and
        # imports flag_gems itself (3-5.7 s on H200 hosts: 5.5 s of overhead once); the
        # others start in a spare that had imported it.
        assert float(row["overhead_s"]) < (10.0 if i == 0 else 5.0), (op, row["overhead_s"])
        identity = json.loads((out / op / "run_identity.json").read_text())
        assert identity["pytest_plugins"]["autoload"] is False
        assert identity["plugins"]["graph_timer"]["rows_graph"] > 0


CRASH_CORPUS = """
import os, signal, pytest, torch

from . import base


class CudaBenchmark(base.Benchmark):
    def measure(self, dtype):
        torch.zeros(1, device="cuda")
        {body}
        return super().measure(dtype)


@pytest.mark.{op}
def test_{op}():
    CudaBenchmark("{op}").run()
"""
FAULTY = Path(__file__).parent / "fixtures" / "faulty_corpus" / "benchmark"


def test_a_crash_in_one_forked_operator_leaves_the_next_alone(tmp_path):
    # Two CUDA operators on the faulty corpus' Benchmark (FlagGems' printed table):
    # the first dies by SIGSEGV with a live context, the second must measure.
    root = tmp_path / "corpus"
    bench = root / "benchmark"
    bench.mkdir(parents=True)
    for name in ("__init__.py", "base.py", "conftest.py", "core_shapes.yaml"):
        (bench / name).write_text((FAULTY / name).read_text())
    (bench / "test_acrash.py").write_text(CRASH_CORPUS.format(
        op="acrash", body="os.kill(os.getpid(), signal.SIGSEGV)"))
    (bench / "test_bfine.py").write_text(CRASH_CORPUS.format(op="bfine", body="pass"))
    out = tmp_path / "b"
    proc = subprocess.run(
        [sys.executable, "-m", "zlbench", "batch", "--flaggems-dir", str(root), "--backend", "cuda",
         "--devices", "0", "--ops", "acrash,bfine", "--dismiss", "none", "--retries", "0",
         "--fallback-dtypes", "none", "--progress", "plain", "--out", str(out), "--run-mode", "worker"],
        env={**os.environ, "FAULTY_STATE_DIR": str(tmp_path / "state")},
        capture_output=True, text=True, timeout=600)
    with open(out / "ops_status.csv", newline="") as f:
        rows = {r["operator"]: r for r in csv.DictReader(f)}
    assert rows["acrash"]["status"] == "crashed", proc.stdout[-3000:]
    assert (rows["bfine"]["status"], rows["bfine"]["run_mode"]) == ("ok", "worker"), proc.stdout[-3000:]

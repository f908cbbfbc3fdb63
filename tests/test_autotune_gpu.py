"""Autotune record/replay against real triton (and FlagGems when FLAGGEMS_DIR is set).

Skipped without CUDA (tests/conftest.py). The full-operator evidence through
``zlbench run`` is benchmarks/autotune_replay_check.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from zlbench import autotune_records as ar
from zlbench import rundir
from zlbench.plugins import autotune as plugin

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU CI: the tests below are skipped anyway
    triton = None

if triton is not None:

    @triton.autotune(
        configs=[triton.Config({"BLOCK": b}, num_warps=w) for b, w in ((128, 2), (512, 4), (1024, 8))],
        key=["n"],
    )
    @triton.jit
    def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2, mask=mask)


def _session(monkeypatch, run_dir, mode, replay_from=None):
    monkeypatch.setenv("ZL_RUN_DIR", str(run_dir))
    session = plugin.AutotuneSession(plugin.AutotuneSettings(run_dir, mode, replay_from, "0"))
    session.start()
    session.patch(sys.modules)
    return session


def _scale(torch, n):
    x = torch.randn(n, device="cuda")
    out = torch.empty_like(x)
    scale_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n)
    torch.testing.assert_close(out, x * 2)


@pytest.mark.gpu
def test_triton_autotune_record_then_replay(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    if triton is None:
        pytest.skip("triton is not installed")
    a = _session(monkeypatch, tmp_path / "a", "record")
    assert any(p.endswith("Autotuner") for p in a.report()["patched"])
    for n in (1000, 1 << 20):
        _scale(torch, n)
    assert a.counts()["recorded_keys"] == 2
    a.close()
    recorded = ar.load_records(tmp_path / "a" / rundir.RECORDS_DIR)[0]

    scale_kernel.cache.clear()
    b = _session(monkeypatch, tmp_path / "b", "replay", tmp_path / "a" / rundir.RECORDS_DIR)
    for n in (1000, 1 << 20, 3000):
        _scale(torch, n)
    c = b.counts()
    assert (c["replayed"], c["fell_back"], c["fallback_reasons"]) == (2, 1, {ar.KEY_MISSING: 1})
    b.close()
    assert len(scale_kernel.cache) == 1  # only the missing key was tuned
    replayed = ar.load_records(tmp_path / "b" / rundir.RECORDS_DIR)[0]
    (kernel,) = recorded
    for kid, entry in recorded[kernel].entries.items():
        assert replayed[kernel].entries[kid]["config"] == entry["config"]
        assert replayed[kernel].entries[kid]["origin"] == ar.ORIGIN_REPLAYED


DRIVER = textwrap.dedent('''
    import json, os, sys
    sys.path.insert(0, os.path.join(os.environ["FLAGGEMS_DIR"], "src"))
    import torch
    import flag_gems
    from zlbench.plugins import autotune as plugin

    session = plugin.AutotuneSession(plugin.settings_from_env(os.environ))
    session.start()
    session.patch(sys.modules)
    torch.manual_seed(0)
    for m, n, k in ((384, 384, 384),):  # fp16, N and K % 8 == 0: hopper's TMA mm (pre_hook)
        a = torch.randn(m, k, device="cuda", dtype=torch.float16)
        b = torch.randn(k, n, device="cuda", dtype=torch.float16)
        c = torch.randn(m, n, device="cuda", dtype=torch.float16)
        with flag_gems.use_gems():
            mm = torch.mm(a, b)
            addmm = torch.addmm(c, a, b)
        torch.testing.assert_close(mm, a @ b, atol=1e-1, rtol=1e-2)
        torch.testing.assert_close(addmm, c + a @ b, atol=1e-1, rtol=1e-2)
    torch.cuda.synchronize()
    session.write_report()
    session.close()
''')


def _drive(run_dir: Path, cache_dir: Path, **env) -> dict:
    full = {k: v for k, v in os.environ.items() if k != "FLAGGEMS_DB_URL"}
    full.update(ZL_RUN_DIR=str(run_dir), FLAGGEMS_CACHE_DIR=str(cache_dir),
                TRITON_CACHE_DIR=str(cache_dir / "triton"), **env)
    proc = subprocess.run([sys.executable, "-c", DRIVER], env=full, capture_output=True,
                          text=True, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return json.loads((run_dir / "plugins" / "autotune.json").read_text())


@pytest.mark.gpu
@pytest.mark.skipif(not os.environ.get("FLAGGEMS_DIR"), reason="FLAGGEMS_DIR is not set")
def test_flaggems_mm_addmm_record_warm_db_and_replay(tmp_path):
    shared = tmp_path / "shared_cache"
    cold = _drive(tmp_path / "cold", shared, ZL_AUTOTUNE_MODE="record")
    warm = _drive(tmp_path / "warm", shared, ZL_AUTOTUNE_MODE="record")
    assert cold["recorded_keys"] > 0 and warm["recorded_keys"] == cold["recorded_keys"]
    # The warm DB answered every LibTuner key, and the records still caught them.
    assert warm["recorded_origins"].get(ar.ORIGIN_TUNED, 0) <= cold["recorded_origins"].get(ar.ORIGIN_TUNED, 0)
    warm_recs = ar.load_records(tmp_path / "warm" / rundir.RECORDS_DIR)[0]
    libtuner_kernels = [k for k, r in warm_recs.items() if r.tuner == ar.LIBTUNER]
    assert libtuner_kernels, "no LibTuner kernel was recorded"
    for k in libtuner_kernels:
        assert {e["origin"] for e in warm_recs[k].entries.values()} == {ar.ORIGIN_CACHED}

    replay = _drive(tmp_path / "replay", tmp_path / "fresh_cache", ZL_AUTOTUNE_MODE="replay",
                    REPLAY_FROM=str(tmp_path / "warm"))
    assert (replay["replayed"], replay["fell_back"]) == (warm["recorded_keys"], 0), replay["markers"]
    replay_recs = ar.load_records(tmp_path / "replay" / rundir.RECORDS_DIR)[0]
    for kernel, rec in warm_recs.items():
        for kid, entry in rec.entries.items():
            assert replay_recs[kernel].entries[kid]["config"] == entry["config"]

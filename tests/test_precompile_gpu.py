"""Parallel compile of autotune candidates against real triton (skipped without CUDA).

Each case runs in a fresh interpreter with its own TRITON_CACHE_DIR, so every candidate
is compiled cold, once in the pool's forked children (ZL_COMPILE_WORKERS=4) and once
without (1). The
operator-level figures (cold/warm wall, the same winners with the pool on and off) come
from benchmarks/cold_warm.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

DRIVER = textwrap.dedent('''
    import json, os, sys
    import torch
    import triton
    import triton.language as tl
    from zlbench.plugins import autotune as plugin

    CASE = os.environ["ZL_TEST_CASE"]

    if CASE == "plain":
        # Four candidates; BLOCK=4096 fails to compile (static_assert), which triton's
        # _bench scores as inf, so it never wins.
        @triton.autotune(
            configs=[triton.Config({"BLOCK": b}, num_warps=w)
                     for b, w in ((128, 2), (512, 4), (1024, 8), (4096, 8))],
            key=["n"],
        )
        @triton.jit
        def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
            tl.static_assert(BLOCK <= 2048)
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            mask = offs < n
            tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2, mask=mask)

        tuner = scale_kernel
    else:
        # Host TMA descriptors whose block shape a config's pre_hook sets, as FlagGems'
        # Hopper mm does: the block shape is part of what the kernel specialises on.
        from triton.tools.tensor_descriptor import TensorDescriptor

        def set_block(nargs):
            shape = [nargs["BLOCK_M"], nargs["BLOCK_N"]]
            nargs["in_desc"].block_shape = shape
            nargs["out_desc"].block_shape = shape

        @triton.autotune(
            configs=[triton.Config({"BLOCK_M": m, "BLOCK_N": n}, num_warps=4, pre_hook=set_block)
                     for m, n in ((32, 32), (64, 64), (64, 128))],
            key=["M", "N"],
        )
        @triton.jit
        def tma_scale(in_desc, out_desc, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
            off_m = tl.program_id(0) * BLOCK_M
            off_n = tl.program_id(1) * BLOCK_N
            tile = in_desc.load([off_m, off_n])
            out_desc.store([off_m, off_n], tile * 2)

        tuner = tma_scale

    session = plugin.AutotuneSession(plugin.settings_from_env(os.environ))
    session.start()
    session.patch(sys.modules)
    if CASE == "plain":
        n = 1 << 20
        x = torch.randn(n, device="cuda")
        out = torch.empty_like(x)
        scale_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n)
        torch.testing.assert_close(out, x * 2)
    else:
        M = N = 512
        x = torch.randn(M, N, device="cuda", dtype=torch.float16)
        out = torch.empty_like(x)
        in_desc = TensorDescriptor.from_tensor(x, [32, 32])
        out_desc = TensorDescriptor.from_tensor(out, [32, 32])
        grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]), triton.cdiv(N, meta["BLOCK_N"]))
        tma_scale[grid](in_desc, out_desc, M, N)
        torch.testing.assert_close(out, x * 2)
    torch.cuda.synchronize()
    session.write_report()
    session.close()
    print(json.dumps({"best": tuner.best_config.all_kwargs()}))
''')


def _drive(tmp_path: Path, case: str, workers: int) -> dict:
    run_dir = tmp_path / f"{case}-{workers}"
    env = dict(os.environ)
    env.update(
        ZL_RUN_DIR=str(run_dir),
        ZL_TEST_CASE=case,
        ZL_COMPILE_WORKERS=str(workers),
        TRITON_CACHE_DIR=str(tmp_path / f"triton-{case}-{workers}"),
        PYTHONPATH=os.pathsep.join([str(Path(__file__).resolve().parents[1]), env.get("PYTHONPATH", "")]),
    )
    # A file, not -c: triton reads a @jit function's source from the file it is defined in.
    driver = tmp_path / f"drive_{case}_{workers}.py"
    driver.write_text(DRIVER)
    proc = subprocess.run([sys.executable, str(driver)], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    report = json.loads((run_dir / "plugins" / "autotune.json").read_text())
    report["best"] = json.loads(proc.stdout.strip().splitlines()[-1])["best"]
    return report


@pytest.mark.gpu
def test_candidates_compile_on_the_pool_and_a_failing_one_fails_as_before(tmp_path):
    pytest.importorskip("triton")
    on = _drive(tmp_path, "plain", 4)
    off = _drive(tmp_path, "plain", 1)
    assert on["compile_clock"] == "triton compilation listener"
    assert on["precompile"]["passes"] == 1 and on["precompile"]["submitted"] == 4
    assert on["precompile"]["failed"] == 1  # the static_assert, on the pool
    # The three good candidates compiled in the pool's children and the benchmarks found
    # them: no compile in the benchmark process succeeded (the failing one's retry
    # reports none; loading what the children compiled counts as the wait).
    assert on["pool_compiles"] == 3 and on["compiles"] == 3, on
    assert off["pool_compiles"] == 0 and off["compiles"] == 3, off
    assert off["precompile"]["skipped"] == {"one_worker": 1}
    for report in (on, off):
        assert report["best"]["BLOCK"] != 4096
        assert report["tunings"] == 1 and report["compile_s"] > 0 and report["tune_s"] > 0


@pytest.mark.gpu
def test_a_pre_hook_that_sets_the_tma_block_shape_runs_before_each_compile(tmp_path):
    pytest.importorskip("triton")
    on = _drive(tmp_path, "tma", 4)
    # Each candidate compiled once, on the pool, with the block shape its pre_hook set:
    # had the hook not run first, the benchmarks would have compiled them again.
    assert on["precompile"]["submitted"] == 3 and on["precompile"]["failed"] == 0, on
    assert on["pool_compiles"] == 3 and on["compiles"] == 3, on

"""Time `zlbench summary` and `summary --ab` on a generated 1,100-operator batch.

Each operator gets a run dir like a real batch leaves: run.log with three dtypes of
FlagGems tables (some with TFLOPS and GBPS columns), a few direct-timer markers,
run_identity.json and .complete; the batch root gets ops_status.csv. B is A with
latencies jittered. Usage: python benchmarks/summary_speed.py [--ops 1100] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Tuple

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from summary_logwriter import SESSION_START, identity, session_end, table_text, write_run  # noqa: E402
from zlbench.markers import format_marker  # noqa: E402

DTYPES = ("torch.float16", "torch.float32", "torch.bfloat16")
SHAPES = (
    "[torch.Size([1073741824])]", "[torch.Size([64, 64])]", "[torch.Size([4096, 4096])]",
    "[torch.Size([64, 512, 512])]", "[torch.Size([1024, 1024, 1024])]",
    "[torch.Size([1024, 1024]), 1]", "[torch.Size([16, 1024, 4096]), -1]",
    "([torch.Size([1024, 1024]), torch.Size([1024])], {'eps': 1e-05})",
    "[torch.Size([4096, 4096]), torch.Size([4096, 4096])]",
    "{'inp': torch.Size([64, 64]), 'accumulate': False}",
)
ENTRY = "from zlbench.summary.command import summary_command; summary_command()"


def op_log(op: str, rng: random.Random, scale: float) -> str:
    text = SESSION_START.format(n=1) + f"benchmark/test_{op}.py "
    with_columns = rng.random() < 0.3
    for dtype in DTYPES:
        rows = []
        for shape in SHAPES:
            torch_ms = rng.uniform(0.004, 3.0)
            gems_ms = torch_ms * rng.uniform(0.5, 1.5) * scale * rng.uniform(0.97, 1.03)
            row = {"shape": shape, "torch_ms": torch_ms, "gems_ms": gems_ms}
            if with_columns:
                row.update(tflops=rng.uniform(0.1, 300), torch_gbps=rng.uniform(10, 3000),
                           gems_gbps=rng.uniform(10, 3000))
            rows.append(row)
        if rng.random() < 0.05:
            text += format_marker("BENCHMARK_DIRECT_NO_CUDAGRAPH", phase="capture", repeat=3,
                                  op=op, dtype=dtype, shape=SHAPES[1], side="gems",
                                  reason="operation not permitted when stream is capturing"
                                  ) + "\n"
        text += table_text(op, dtype, rows)
    return text + "." + session_end(1)


def make_batch(root: Path, ops: int, seed: int, scale: float) -> Path:
    rng = random.Random(seed)
    status = ["op,status,attempts,reason,run_dir"]
    for i in range(ops):
        op = f"op{i:04d}"
        write_run(root / op, op_log(op, rng, scale), identity(test_node=f"benchmark/test_{op}.py"))
        status.append(f"{op},ok,1,,{op}")
    (root / "ops_status.csv").write_text("\n".join(status) + "\n")
    return root


def timed(args) -> Tuple[float, float]:
    """(wall s, CPU s) of one whole `summary` process; CPU time shrugs off a busy host."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", ENTRY, *map(str, args)],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"summary failed ({done.returncode}): {done.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return elapsed, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=1100)
    parser.add_argument("--keep", type=Path, help="write the batches here and keep them")
    args = parser.parse_args()
    base = args.keep or Path(tempfile.mkdtemp(prefix="zlbench-summary-speed-"))
    t0 = time.perf_counter()
    a = make_batch(base / "a", args.ops, seed=1, scale=1.0)
    b = make_batch(base / "b", args.ops, seed=1, scale=0.95)
    rows = args.ops * len(DTYPES) * len(SHAPES)
    print(f"generated 2 batches of {args.ops} operators, {rows} rows each, "
          f"in {time.perf_counter() - t0:.1f} s under {base}")
    for label, cmd in (
        ("summary (table to stdout, summary.csv)", [a]),
        ("summary --format csv", [a, "--format", "csv"]),
        ("summary --ab (table)", ["--ab", a, b]),
        ("summary --ab --format markdown", ["--ab", a, b, "--format", "markdown"]),
    ):
        wall, cpu = min(timed(cmd) for _ in range(3))
        print(f"{label:<40} {wall:5.2f} s wall, {cpu:5.2f} s CPU  (best of 3, whole process)")
    print(f"load average while timing: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    if not args.keep:
        shutil.rmtree(base)


if __name__ == "__main__":
    main()

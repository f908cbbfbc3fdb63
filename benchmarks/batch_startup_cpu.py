"""What a batch costs per operator against one plain `python -m pytest` per operator.

On CPU, over the bundled sample corpus (its conftest imports torch, as FlagGems' does),
small shapes, float32, one slot. Each round measures, for the same operators:

  pytest   one fresh `python -m pytest <the operator's node> --level core --mode kernel
           ...` per operator, as a user would run them by hand (the caller's environment:
           installed pytest plugins autoload);
  pytest_noautoload   the same with PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 (a stricter
           baseline: what pytest alone costs without third-party plugins);
  fresh    `zlbench batch --run-mode fresh` (a `zlbench run` process per operator);
  worker   `zlbench batch --run-mode worker` (one warm worker forks each operator).

and prints the median over rounds of each per-operator cost, the ratios to `pytest`
(goal: worker <= 0.5), and the batches' median fixed cost per operator from
ops_status.csv (wall minus the pytest session body, from the RUN_PHASE markers).
The batch wall includes starting the driver and its worker (the torch import is paid
once per batch): over a real corpus of a thousand operators that share vanishes, so the
marginal cost per operator (the median attempt duration) is printed too.

Usage: python benchmarks/batch_startup_cpu.py [--rounds 3] [--ops abs,add,...] [--json F]
Exit status 0 when the worker batch met the goal.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List

from zlbench.providers import SampleProvider

SHAPES = """\
Benchmark:
  shapes: [[64, 64]]
  shape_desc: "M, N"
BlasBenchmark:
  shapes: [[64, 64, 64]]
  shape_desc: "M, N, K"
NormBenchmark:
  shapes: [[64, 256]]
  shape_desc: "M, N"
"""
GOAL = 0.5


def plain_pytest(ops: List[str], shape_file: Path, autoload: bool = True) -> float:
    """Seconds for one fresh `python -m pytest` per operator, summed."""
    provider = SampleProvider()
    env = dict(os.environ)
    if not autoload:
        env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    total = 0.0
    for op in ops:
        target = provider.resolve(op, None, None)
        cmd = [sys.executable, "-m", "pytest", "-s", "-q", "-p", "no:cacheprovider",
               *target.pytest_args, "--level", "core", "--mode", "kernel", "--dtypes", "float32",
               "--shape_file", str(shape_file)]
        started = time.monotonic()
        proc = subprocess.run(cmd, cwd=target.root, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
        total += time.monotonic() - started
        if proc.returncode != 0:
            print(f"warning: pytest {op} exited {proc.returncode}", file=sys.stderr)
    return total


def batch(ops: List[str], shape_file: Path, out: Path, mode: str) -> Dict[str, object]:
    cmd = [sys.executable, "-m", "zlbench", "batch", "--backend", "cpu", "--devices", "0",
           "--ops", ",".join(ops), "--dtypes", "float32", "--shape-file", str(shape_file),
           "--run-mode", mode, "--progress", "off", "--dismiss", "none", "--out", str(out)]
    started = time.monotonic()
    proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.monotonic() - started
    if proc.returncode != 0:
        print(f"warning: batch ({mode}) exited {proc.returncode}: {proc.stderr[-500:]}", file=sys.stderr)
    with open(out / "ops_status.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    overheads = [float(r["overhead_s"]) for r in rows if r.get("overhead_s")]
    durations = [float(r["duration_s"]) for r in rows if r.get("duration_s")]
    return {"wall": wall, "overhead": statistics.median(overheads) if overheads else None,
            "marginal": statistics.median(durations) if durations else None,
            "modes": sorted({r.get("run_mode") for r in rows})}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ops", default=None,
                        help="comma list of sample operators (default: all of them, the sample's "
                             "whole screen)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    ops = args.ops.split(",") if args.ops else SampleProvider().operators()
    per_op: Dict[str, List[float]] = {"pytest": [], "pytest_noautoload": [], "fresh": [],
                                      "worker": []}
    overhead: Dict[str, List[float]] = {"fresh": [], "worker": []}
    marginal: Dict[str, List[float]] = {"fresh": [], "worker": []}
    with tempfile.TemporaryDirectory(prefix="zl-startup-") as tmp:
        tmp_path = Path(tmp)
        shape_file = tmp_path / "shapes.yaml"
        shape_file.write_text(SHAPES)
        for n in range(args.rounds):
            # Alternate the order so that a load drift on a shared host hits all three.
            order = ["pytest", "pytest_noautoload", "fresh", "worker"]
            if n % 2:
                order.reverse()
            line = []
            for what in order:
                if what.startswith("pytest"):
                    seconds = plain_pytest(ops, shape_file, autoload=what == "pytest")
                else:
                    got = batch(ops, shape_file, tmp_path / f"{what}-{n}", what)
                    assert got["modes"] == [what], got
                    seconds = got["wall"]
                    if got["overhead"] is not None:
                        overhead[what].append(got["overhead"])
                    if got["marginal"] is not None:
                        marginal[what].append(got["marginal"])
                per_op[what].append(seconds / len(ops))
                line.append(f"{what} {seconds / len(ops):.2f} s/op")
            print(f"round {n + 1}: " + ", ".join(line), flush=True)
    med = {k: statistics.median(v) for k, v in per_op.items()}
    figures = {
        "operators": len(ops), "rounds": args.rounds, "load_average": os.getloadavg()[0],
        "pytest_s_per_op": round(med["pytest"], 3),
        "pytest_noautoload_s_per_op": round(med["pytest_noautoload"], 3),
        "fresh_batch_s_per_op": round(med["fresh"], 3),
        "worker_batch_s_per_op": round(med["worker"], 3),
        "fresh_over_pytest": round(med["fresh"] / med["pytest"], 3),
        "worker_over_pytest": round(med["worker"] / med["pytest"], 3),
        "worker_over_pytest_noautoload": round(med["worker"] / med["pytest_noautoload"], 3),
        "worker_marginal_s_per_op": round(statistics.median(marginal["worker"]), 3) if marginal["worker"] else None,
        "fresh_marginal_s_per_op": round(statistics.median(marginal["fresh"]), 3) if marginal["fresh"] else None,
        "fresh_fixed_cost_s": round(statistics.median(overhead["fresh"]), 3) if overhead["fresh"] else None,
        "worker_fixed_cost_s": round(statistics.median(overhead["worker"]), 3) if overhead["worker"] else None,
    }
    print()
    for key, value in figures.items():
        print(f"{key:<24} {value}")
    print(f"goal: worker batch <= {GOAL} x one fresh pytest per operator: "
          f"{'MET' if figures['worker_over_pytest'] <= GOAL else 'NOT MET'}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0 if figures["worker_over_pytest"] <= GOAL else 1


if __name__ == "__main__":
    sys.exit(main())

"""How much does `zlbench batch` cost on top of the runs it makes?

On CPU with N worker slots, this measures:

1. by hand: the same `zlbench run` calls, one after another, each timed;
2. the batch: `run_batch` over the same operators with N slots.

and reports
- the batch's wall time against the sum of the hand-made runs (the speedup from N slots);
- the makespan against the lower bound max(total / N, longest), and against the
  makespan the hash sharding implies with the hand-measured durations (imbalance);
- the orchestration overhead: the batch's wall time minus the busiest slot's time
  inside its own children, as a share of the wall time (target: under 5%).

Usage: python benchmarks/batch_overhead.py [--slots 2] [--ops abs,mm,...] [--json out.json]
Runs the bundled sample corpus at float32 on small shapes unless told otherwise.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from zlbench import knobs
from zlbench.batch import BatchConfig, run_batch
from zlbench.batch.execute import knob_args
from zlbench.batch.plan import shard
from zlbench.providers import SampleProvider

SMALL_SHAPES = """\
Benchmark:
  shapes: [[64, 64], [256, 256]]
  shape_desc: "M, N"
BlasBenchmark:
  shapes: [[64, 64, 64]]
  shape_desc: "M, N, K"
NormBenchmark:
  shapes: [[64, 256]]
  shape_desc: "M, N"
"""


def run_by_hand(ops, flags, root: Path) -> dict:
    durations = {}
    for op in ops:
        cmd = [sys.executable, "-m", "zlbench", "run", "--run-dir", str(root / op), "--op", op,
               "--backend", "cpu", "--device", "0", *flags]
        started = time.monotonic()
        proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        durations[op] = time.monotonic() - started
        if proc.returncode != 0:
            print(f"warning: {op} exited {proc.returncode} by hand", file=sys.stderr)
        print(f"  by hand  {op:<12} {durations[op]:7.2f} s", flush=True)
    return durations


def makespan(durations: dict, where: dict) -> float:
    per_device: dict = {}
    for op, seconds in durations.items():
        per_device[where[op]] = per_device.get(where[op], 0.0) + seconds
    return max(per_device.values())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--slots", type=int, default=2, help="worker slots (cpu devices)")
    parser.add_argument("--ops", default=None, help="comma list (default: every sample operator)")
    parser.add_argument("--full-shapes", action="store_true", help="the corpus' own shapes")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args()

    ops = args.ops.split(",") if args.ops else SampleProvider().operators()
    devices = [str(i) for i in range(args.slots)]
    with tempfile.TemporaryDirectory(prefix="zl-overhead-") as tmp:
        tmp = Path(tmp)
        raw = {"backend": "cpu", "dtypes": "float32"}
        if not args.full_shapes:
            (tmp / "shapes.yaml").write_text(SMALL_SHAPES)
            raw["shape_file"] = str(tmp / "shapes.yaml")
        settings = knobs.resolve(raw, {}, names=knobs.MEASURE_KNOBS)
        # Pass every knob the batch passes, so both sides measure the same thing.
        flags = knob_args(settings, skip=("backend",))

        print(f"{len(ops)} operators, {args.slots} slot(s)")
        hand = run_by_hand(ops, flags, tmp / "hand")
        started = time.monotonic()
        result = run_batch(BatchConfig(out=tmp / "batch", settings=settings, ops=ops, devices=devices,
                                       progress="plain", timeout_s=1800))
        wall = time.monotonic() - started

    where = shard(ops, devices)
    inside = {op: float(result.rows[op]["total_s"]) for op in ops}
    hand_total = sum(hand.values())
    lower_bound = max(hand_total / args.slots, max(hand.values()))
    hand_makespan = makespan(hand, where)
    busiest_inside = makespan(inside, where)
    overhead = wall - busiest_inside
    figures = {
        "operators": len(ops), "slots": args.slots,
        "statuses": result.counts(),
        "by_hand_total_s": round(hand_total, 2),
        "batch_wall_s": round(wall, 2),
        "speedup_vs_by_hand": round(hand_total / wall, 3),
        "lower_bound_s": round(lower_bound, 2),
        "makespan_over_lower_bound": round(wall / lower_bound, 3),
        "sharded_makespan_by_hand_s": round(hand_makespan, 2),
        "sharding_imbalance": round(hand_makespan / lower_bound, 3),
        "children_in_batch_total_s": round(sum(inside.values()), 2),
        "contention_slowdown": round(sum(inside.values()) / hand_total, 3),
        "busiest_slot_inside_children_s": round(busiest_inside, 2),
        "orchestration_overhead_s": round(overhead, 2),
        "orchestration_overhead_pct": round(100 * overhead / wall, 2),
        "overhead_per_operator_ms": round(1000 * overhead / len(ops), 1),
    }
    print()
    for key, value in figures.items():
        print(f"{key:<32} {value}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0 if figures["orchestration_overhead_pct"] < 5 else 1


if __name__ == "__main__":
    sys.exit(main())

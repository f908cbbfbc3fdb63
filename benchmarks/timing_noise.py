"""A/A noise of the two timers on a GPU: the same operators measured twice by each.

For every operator in --ops, ``zlbench run`` measures it with the graph timer and with
FlagGems' own kernel-mode timer (ZL_ENABLE_CUDAGRAPH=0, ZL_DIRECT_REPEAT=1: triton's
do_bench, untouched), alternating graph / kernel, for --rounds rounds (2 by default).
Rows are paired across the rounds of one timer by (op, dtype, Size Detail) and the
relative difference of FlagGems' latency, |a - b| / min(a, b), is reported as median,
p90 and max per timer; graph-timed rows and rows that fell back to the direct timer
(BENCHMARK_DIRECT_NO_CUDAGRAPH) are also reported apart.

Calling it again with the same --out reuses every run that completed (a run dir with
.complete), so a time limit costs only the run it cut short.

Goal (docs/design.md, "Two timing calibers"): on graph-timed rows median < 0.1% and
max < 2%, and every row measured (none missing compared with kernel mode).

    python benchmarks/timing_noise.py --flaggems-dir ~/FlagGems --ops abs,softmax,sum \\
        --out /tmp/noise --result /tmp/noise/timing_noise.json
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from zlbench.markers import BENCHMARK_DIRECT_NO_CUDAGRAPH  # noqa: E402
from zlbench.summary.parse import parse_log  # noqa: E402
from zlbench.timing import quantile  # noqa: E402

Key = Tuple[str, str, str]
TIMER_ENV = {
    "graph": {"ZL_ENABLE_CUDAGRAPH": "1", "ZL_DIRECT_REPEAT": "1"},
    "kernel": {"ZL_ENABLE_CUDAGRAPH": "0", "ZL_DIRECT_REPEAT": "1"},
}
GOAL_MEDIAN_PCT = 0.1
GOAL_MAX_PCT = 2.0


def rel_diff_pct(a: float, b: float) -> float:
    return abs(a - b) / min(a, b) * 100.0


def spread(values: Sequence[float]) -> Dict[str, Optional[float]]:
    if not values:
        return {"n": 0, "median": None, "p90": None, "max": None}
    ordered = sorted(values)
    return {"n": len(ordered), "median": round(statistics.median(ordered), 4),
            "p90": round(quantile(ordered, 0.9), 4), "max": round(ordered[-1], 4)}


def measured(row) -> bool:
    return row.status == "SUCCESS" and row.gems_ms is not None and row.gems_ms > 0


def read_run(run_dir: Path) -> Tuple[Dict[Key, float], set, List[Key]]:
    """(gems latency by key for measured rows, keys with a fallback marker, unmeasured keys)."""
    log = run_dir / "run.log"
    parsed = parse_log(log.read_text(errors="replace") if log.exists() else "", str(log))
    latency = {r.key: r.gems_ms for r in parsed.rows if measured(r)}
    unmeasured = [r.key for r in parsed.rows if not measured(r)]
    fallback = {
        (m.get("op"), m.get("dtype"), m.get("shape"))
        for _, m in parsed.markers if m.name == BENCHMARK_DIRECT_NO_CUDAGRAPH
    }
    return latency, fallback, unmeasured


def compare(rounds: List[Tuple[Dict[Key, float], set, List[Key]]]) -> dict:
    """Noise between the first two rounds of one timer (all later rounds against the first)."""
    first, fallback0, unmeasured = rounds[0]
    diffs: Dict[Key, float] = {}
    missing = set()
    fallback = set(fallback0)
    for latency, fb, unmeasured_n in rounds[1:]:
        fallback |= fb
        unmeasured = unmeasured + unmeasured_n
        missing |= set(first) ^ set(latency)
        for key in set(first) & set(latency):
            diffs[key] = max(diffs.get(key, 0.0), rel_diff_pct(first[key], latency[key]))
    graph_rows = [d for k, d in diffs.items() if k not in fallback]
    fallback_rows = [d for k, d in diffs.items() if k in fallback]
    worst = sorted(diffs.items(), key=lambda kv: -kv[1])[:5]
    return {
        "rows_paired": len(diffs),
        "rows_missing_between_rounds": sorted(map(list, missing)),
        "rows_unmeasured": sorted(map(list, set(unmeasured))),
        "gems_rel_diff_pct": spread(list(diffs.values())),
        "graph_timed_rel_diff_pct": spread(graph_rows),
        "fallback_rel_diff_pct": spread(fallback_rows),
        "rows_with_fallback_marker": len({k for k in diffs if k in fallback}),
        "worst": [{"op": k[0], "dtype": k[1], "shape": k[2], "pct": round(v, 4)} for k, v in worst],
    }


def zlbench_run(zlbench: List[str], flaggems_dir: str, op: str, level: str, run_dir: Path,
                timer: str, extra: List[str]) -> dict:
    if (run_dir / ".complete").is_file():  # measured by an earlier call with this --out
        return {"op": op, "timer": timer, "run_dir": str(run_dir), "exit_code": 0,
                "seconds": None, "reused": True}
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZL_")}
    env.update(TIMER_ENV[timer])
    cmd = zlbench + ["run", "--flaggems-dir", flaggems_dir, "--op", op, "--level", level,
                     "--run-dir", str(run_dir)] + extra
    started = time.monotonic()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    (run_dir.parent / f"{run_dir.name}.stdout").write_text(proc.stdout + proc.stderr)
    return {"op": op, "timer": timer, "run_dir": str(run_dir), "exit_code": proc.returncode,
            "seconds": round(time.monotonic() - started, 1)}


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--flaggems-dir", required=True, help="FlagGems checkout (parent of benchmark/)")
    ap.add_argument("--ops", default="abs,softmax,sum", help="comma-separated operators (pytest marks)")
    ap.add_argument("--level", default="core", choices=["core", "comprehensive"])
    ap.add_argument("--rounds", type=int, default=2, help="runs per timer (>= 2)")
    ap.add_argument("--out", default="timing_noise_runs", help="where the run dirs go")
    ap.add_argument("--result", default=None, help="JSON result file (default: <out>/timing_noise.json)")
    ap.add_argument("--zlbench", default=f"{shlex.quote(sys.executable)} -m zlbench",
                    help="how to invoke zlbench")
    ap.add_argument("--run-arg", action="append", default=[],
                    help="extra argument for every `zlbench run` (repeatable)")
    args = ap.parse_args(argv)
    if args.rounds < 2:
        ap.error("--rounds must be at least 2")

    ops = [o.strip() for o in args.ops.split(",") if o.strip()]
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    zlbench = shlex.split(args.zlbench)
    runs: List[dict] = []
    per_timer: Dict[str, Dict[str, list]] = {t: {op: [] for op in ops} for t in TIMER_ENV}
    for rnd in range(args.rounds):
        for op in ops:
            for timer in ("graph", "kernel"):  # alternate, so drift hits both alike
                run_dir = out / f"{op}-{timer}-{rnd + 1}"
                info = zlbench_run(zlbench, args.flaggems_dir, op, args.level, run_dir, timer,
                                   args.run_arg)
                runs.append(info)
                print(f"{op:<16} {timer:<6} round {rnd + 1}: exit {info['exit_code']} "
                      f"in {info['seconds']} s", flush=True)
                per_timer[timer][op].append(read_run(run_dir))

    timers = {}
    for timer, by_op in per_timer.items():
        merged = [({}, set(), []) for _ in range(args.rounds)]
        for rounds in by_op.values():
            for i, (lat, fb, un) in enumerate(rounds):
                merged[i][0].update(lat)
                merged[i][1].update(fb)
                merged[i][2].extend(un)
        timers[timer] = compare(merged)

    graph_keys = set(per_key for rounds in per_timer["graph"].values() for per_key in rounds[0][0])
    kernel_keys = set(per_key for rounds in per_timer["kernel"].values() for per_key in rounds[0][0])
    graph = timers["graph"]
    g = graph["graph_timed_rel_diff_pct"]
    every_row = (not graph["rows_missing_between_rounds"] and not graph["rows_unmeasured"]
                 and kernel_keys <= graph_keys and all(r["exit_code"] == 0 for r in runs))
    goal = {
        "graph_median_below_pct": GOAL_MEDIAN_PCT,
        "graph_max_below_pct": GOAL_MAX_PCT,
        "median_met": g["median"] is not None and g["median"] < GOAL_MEDIAN_PCT,
        "max_met": g["max"] is not None and g["max"] < GOAL_MAX_PCT,
        "every_row_measured": every_row,
    }
    goal["met"] = goal["median_met"] and goal["max_met"] and goal["every_row_measured"]
    result = {
        "flaggems_dir": args.flaggems_dir, "ops": ops, "level": args.level,
        "rounds": args.rounds, "runs": runs, "timers": timers,
        "rows_missing_vs_kernel": sorted(map(list, kernel_keys - graph_keys)),
        "goal": goal,
    }
    result_path = Path(args.result) if args.result else out / "timing_noise.json"
    result_path.parent.mkdir(parents=True, exist_ok=True)
    result_path.write_text(json.dumps(result, indent=2) + "\n")

    print(f"\n{'timer':<8} {'rows':>5} {'median %':>10} {'p90 %':>10} {'max %':>10}   (|a-b|/min, gems latency)")
    for timer, data in timers.items():
        s = data["gems_rel_diff_pct"]
        print(f"{timer:<8} {s['n']:>5} {s['median']!s:>10} {s['p90']!s:>10} {s['max']!s:>10}")
    print(f"graph-timed rows only: {g}")
    print(f"goal met: {goal['met']}  ({json.dumps(goal)})")
    print(f"result: {result_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

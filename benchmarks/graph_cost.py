"""Where one graph-timed row's time goes, and what each timing rule does to its number.

On a CUDA host: for a few operators and shapes that stand for the corpus (tiny, L2-sized,
HBM-sized and huge pointwise rows, a reduction, a scan, a normalisation, GEMMs), time the
same call with ``graph_bench`` under several rules, interleaved, ``--repeats`` times each:

  budget   FlagGems' warm-up (1,000 ms at least) and every replay of the rep budget
           (ZL_WARMUP_RULE=budget ZL_GRAPH_NOISE=0: zlbench before the settle rule)
  settle   the default: warm-up until settled, replays until the pooled median is pinned
  ...      more rules from --rules (name:warmup_rule:noise_pct:replay_ms)

It prints per rule: the timing's wall (ms) and its steps (warm-up, captures, replays,
moving inputs), the measure efficiency (wall / rep), and each case's median against the
``budget`` rule's (the bias a rule brings) and across repeats (its spread in-process).
Between-process noise needs two batches: ``screen_throughput.py`` measures that.

Usage (H200, FlagGems' src on PYTHONPATH for the flag_gems cases):
  python benchmarks/graph_cost.py --out /tmp/graph-cost [--repeats 3] [--places 8] [--profile]
--profile adds a cProfile of the timings (where the host time of each step goes).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
from pathlib import Path

DEFAULT_RULES = ("budget:budget:0:1.0", "settle:settle:0.5:1.0", "settle-0.25ms:settle:0.5:0.25")


def cases(torch, gems):
    """(name, fn) pairs: inputs made once; each runs inside ``gems()`` (FlagGems'
    use_gems(), around the whole timing as its benchmark does, or a null context)."""
    dev = "cuda"
    half = torch.float16
    out = []

    def add(name, make):
        try:
            fn = make()
            with gems():
                fn()
            torch.cuda.synchronize()
            out.append((name, fn))
        except Exception as e:  # noqa: BLE001 - a case this build cannot run is left out
            print(f"case {name} left out: {type(e).__name__}: {e}", flush=True)

    def clamp(shape):
        # The timed function closes over its input: the placements find tensors through
        # closure cells, never through default arguments (every timing at one placement).
        x = torch.randn(shape, device=dev, dtype=half)
        return lambda: torch.clamp(x, -0.5, 0.5)

    for shape in ((64, 64), (1024, 1024), (4096, 4096), (64, 512, 512), (1024, 1024, 1024)):
        add(f"clamp {'x'.join(map(str, shape))}", lambda shape=shape: clamp(shape))
    x = torch.randn(4096, 4096, device=dev, dtype=half)
    add("sum 4096x4096", lambda: lambda: torch.sum(x, dim=1))
    add("cumsum 4096x4096", lambda: lambda: torch.cumsum(x, dim=1))
    add("softmax 4096x4096", lambda: lambda: torch.softmax(x, dim=1))
    w = torch.randn(4096, device=dev, dtype=half)
    add("layer_norm 4096x4096", lambda: lambda: torch.nn.functional.layer_norm(x, (4096,), w, w))
    a = torch.randn(4096, 4096, device=dev, dtype=half)
    add("mm 4096", lambda: lambda: torch.mm(a, a))
    b = torch.randn(16, 1024, 1024, device=dev, dtype=half)
    add("baddbmm 16x1024", lambda: lambda: torch.baddbmm(b, b, b))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--places", type=int, default=8)
    parser.add_argument("--warmup-ms", type=float, default=1000.0, help="the caller's warmup (FlagGems: 1000)")
    parser.add_argument("--rep-ms", type=float, default=100.0, help="the caller's rep (FlagGems: 100)")
    parser.add_argument("--rules", default=",".join(DEFAULT_RULES))
    parser.add_argument("--no-gems", action="store_true", help="torch's kernels only")
    parser.add_argument("--profile", action="store_true",
                        help="also profile the timings (cProfile, repeats after the first) into "
                             "<out>/graph_cost.pstats and the 40 costliest functions into <out>/profile.txt")
    args = parser.parse_args()

    import torch

    from zlbench.plugins.graph_timer import graph_bench

    if args.no_gems:
        gems = contextlib.nullcontext
    else:
        import flag_gems

        gems = flag_gems.use_gems

    rules = []
    for text in args.rules.split(","):
        name, warm, noise, replay = text.split(":")
        rules.append((name, warm, float(noise) / 100.0, float(replay)))
    args.out.mkdir(parents=True, exist_ok=True)
    results = []
    log = open(args.out / "graph_cost.jsonl", "w")
    profiler = None
    if args.profile:
        import cProfile

        profiler = cProfile.Profile()
    for case, fn in cases(torch, gems):
        for repeat in range(args.repeats):
            # Each repeat starts with another rule: the first after a case change meets the
            # kernel cold and the clock lower, and no rule should always come after another.
            order = rules[repeat % len(rules):] + rules[: repeat % len(rules)]
            for name, warm, noise, replay in order:
                # The first repeat meets cold kernels and clocks: the profile leaves it out
                # (unless it is the only one).
                profiling = profiler is not None and (repeat > 0 or args.repeats == 1)
                with gems():
                    started = time.perf_counter()
                    if profiling:
                        profiler.enable()
                    m = graph_bench(fn, args.warmup_ms, args.rep_ms, None, None, "median", places=args.places,
                                    warmup_rule=warm, noise=noise, replay_ms=replay)
                    if profiling:
                        profiler.disable()
                    wall = (time.perf_counter() - started) * 1e3
                rec = {"case": case, "rule": name, "repeat": repeat, "wall_ms": round(wall, 2),
                       "median_ms": m.median_ms, "spread": m.spread, "samples": m.samples,
                       "placements": m.placements, "stop": m.stop, "cost": m.cost}
                results.append(rec)
                log.write(json.dumps(rec) + "\n")
                log.flush()
        print(f"{case}: done", flush=True)

    print(f"\n{'case':<24} {'rule':<16} {'wall ms':>8} {'eff':>5} {'warm':>6} {'capt':>6} {'repl':>6} "
          f"{'move':>5} {'n':>4} {'P':>2} {'bias%':>7} {'rsd%':>6}")
    summary = []
    for case in dict.fromkeys(r["case"] for r in results):
        ref = statistics.median(r["median_ms"] for r in results if r["case"] == case and r["rule"] == rules[0][0])
        for name, *_ in rules:
            rs = [r for r in results if r["case"] == case and r["rule"] == name]
            meds = [r["median_ms"] for r in rs]
            row = {
                "case": case, "rule": name,
                "wall_ms": statistics.median(r["wall_ms"] for r in rs),
                **{k: statistics.median(r["cost"][k] for r in rs) for k in ("warmup", "capture", "replay", "move")},
                "samples": statistics.median(r["samples"] for r in rs),
                "placements": min(r["placements"] for r in rs),
                "bias_pct": 100 * (statistics.median(meds) / ref - 1),
                "repeat_spread_pct": 100 * (max(meds) - min(meds)) / statistics.median(meds),
            }
            summary.append(row)
            print(f"{case:<24} {name:<16} {row['wall_ms']:>8.1f} {row['wall_ms'] / args.rep_ms:>5.2f} "
                  f"{row['warmup']:>6.1f} {row['capture']:>6.1f} {row['replay']:>6.1f} {row['move']:>5.1f} "
                  f"{row['samples']:>4.0f} {row['placements']:>2} {row['bias_pct']:>7.3f} "
                  f"{row['repeat_spread_pct']:>6.3f}")
    for name, *_ in rules:
        rs = [r for r in summary if r["rule"] == name]
        print(f"rule {name}: median efficiency {statistics.median(r['wall_ms'] for r in rs) / args.rep_ms:.2f}, "
              f"median |bias| {statistics.median(abs(r['bias_pct']) for r in rs):.3f}%")
    (args.out / "graph_cost.json").write_text(json.dumps(summary, indent=1) + "\n")
    if profiler is not None:
        import io
        import pstats

        profiler.dump_stats(str(args.out / "graph_cost.pstats"))
        text = io.StringIO()
        stats = pstats.Stats(profiler, stream=text)
        stats.sort_stats("tottime").print_stats(40)
        stats.sort_stats("cumulative").print_stats(40)
        (args.out / "profile.txt").write_text(text.getvalue())
        print(f"profile: {args.out / 'profile.txt'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

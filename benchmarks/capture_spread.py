"""Does a graph-timed row move between processes more than between timings in one?

A row's spread is what the graph timer can see inside its process: replay to replay,
and across the placements of its inputs, or its interleaved graphs
(``timing.row_spread``). H200 A/As (benchmarks/screen_throughput.py) found rows that
moved past their spread between two batches: tiny kernels, 1-5% apart at spreads of
0.01-0.04%, first in one interleaved graph, later some at eight separate placements that
each batch read alike. This script asks whether a second timing in the same process (new
copies of the inputs, new graphs) moves such a row as far as a new process does: if so,
the timer could show it in the row's spread; if not, the movement belongs to the process.

Each of --processes fresh processes times every case --timings times with
``graph_bench`` at the defaults (the settle warm-up, replays until pinned, 8 placements,
interleaved where the timer chooses to), and reports per case: whether it was
interleaved, each process's medians (each timing's ``median_ms``: over its placements,
``timing.over_placements``), the relative range and standard deviation of the
medians within a process (median over processes) and of the processes' means, and the
median of the spreads the timings recorded (a 95% half-width, about 1.96 standard
deviations: it should cover what the medians move by).

Usage (a CUDA host; FlagGems' src on PYTHONPATH for the gems cases):
  python benchmarks/capture_spread.py --processes 5 --timings 3 --json out.json
  python benchmarks/capture_spread.py --cases log1p --processes 4 --timings 3   # 4 GiB rows

The JSON keeps every timing's per-placement medians (``placement_ms``; an interleaved
timing's per-graph ones), where placements that fall into clusters show.

Around every timing the process also reads the SM clock its kernels really ran at: a
spin kernel of a known number of cycles (``torch.cuda._sleep``) timed by events, at two
lengths so that the launch's fixed cost drops out, beside NVML's reported clock where
pynvml is installed. In an A/A of the corpus' sample whole operators moved between the
two batches' processes by about one clock step (every row of FlagGems' linalg_lstsq
0.6-0.8%, torch's side too) while NVML read 1980 MHz around every row; the figures
``between_cycles`` (the processes' means turned into cycles by each timing's effective
clock) tell whether that clock moved them: a clock-bound case whose processes differ
by a step and whose cycles agree. On one H100 the slower of two such levels ran at the
top effective clock (docs/design.md, Device state and spread per row).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

REPO = Path(__file__).resolve().parents[1]


LARGE = 1 << 30  # elements: log1p's largest core shape, 4 GiB in fp32
SPIN_CYCLES = 2_000_000  # the effective clock's spin kernel: about 1 ms at 2 GHz


def clock_readers(torch):
    """(effective_mhz, nvml_mhz) of the current CUDA device: the SM clock from a spin
    kernel of known cycles timed by events (the difference of two lengths, median of
    five), and NVML's reported SM clock (None without pynvml)."""

    def spin_ms(cycles: int) -> float:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        end.synchronize()
        return start.elapsed_time(end)

    def effective_mhz() -> float:
        return statistics.median(
            SPIN_CYCLES / ((spin_ms(2 * SPIN_CYCLES) - spin_ms(SPIN_CYCLES)) * 1e3) for _ in range(5)
        )

    try:  # zlbench's NVML reader: the device found by torch's UUID, as the rows' samples find it
        from zlbench.backends.nvml import NvmlState

        state = NvmlState()
    except Exception as e:  # noqa: BLE001 - the effective clock does not need NVML
        print(f"no NVML reading ({type(e).__name__}: {e}): effective clock only", file=sys.stderr)
        state = None

    def nvml_mhz():
        return None if state is None else state.busy_sample()["sm_mhz"]

    return effective_mhz, nvml_mhz


def selected(name: str, wanted: List[str]) -> bool:
    """Is case ``name`` among ``wanted`` (substrings, any of them; none: every case)?"""
    return not wanted or any(w in name for w in wanted)


def closing_over(x, op):
    """``lambda: op(x)`` with x in its closure, where the graph timer finds the tensors it
    moves to other placements (``placement.closure_tensors``); a default argument
    (``lambda x=x: ...``) hides it, and every timing is then at one placement."""
    return lambda: op(x)


def solving(a, b, lstsq):
    """``lambda: lstsq(a, b)`` closing over both inputs (``closing_over``'s reason)."""
    return lambda: lstsq(a, b, driver="gels")


def cases(torch, gems, wanted: List[str] = ()):
    """(name, fn, context) triples of the ``wanted`` cases (``selected``): the small rows
    that moved unexplained in an H200 A/A (cumsum_ 256x256 and 1024x1024 fp32,
    segment_reduce 2^20 in 64 segments, max bf16 2^20), a large one for contrast, and
    log1p fp32 at 2^30 elements, whose placements fell 5-10% apart on some H200s (its
    inputs are made only when asked for)."""
    dev = "cuda"
    out = []
    small = {
        "int32 256x256": lambda: torch.randint(-100, 100, (256, 256), device=dev, dtype=torch.int32),
        "bf16 256x256": lambda: torch.randn(256, 256, device=dev, dtype=torch.bfloat16),
        "fp16 4096x4096": lambda: torch.randn(4096, 4096, device=dev, dtype=torch.float16),
        "fp32 1024x1024": lambda: torch.randn(1024, 1024, device=dev, dtype=torch.float32),
    }
    for side, ctx in (("gems", gems), ("torch", contextlib.nullcontext)):
        for shape, make in small.items():
            name = f"{side} cumsum {shape}"
            if selected(name, wanted):
                out.append((name, closing_over(make(), lambda x: torch.cumsum(x, 1)), ctx))
    name = "gems segment_reduce bf16 2^20 mean"
    if selected(name, wanted):
        data = torch.randn(1 << 20, device=dev, dtype=torch.bfloat16)
        lengths = torch.full((64,), (1 << 20) // 64, device=dev, dtype=torch.int64)
        out.append((name, lambda: torch.segment_reduce(data, "mean", lengths=lengths, unsafe=True), gems))
    name = "gems max bf16 2^20"
    if selected(name, wanted):
        y = torch.randn(1 << 20, device=dev, dtype=torch.bfloat16)
        out.append((name, lambda: torch.max(y), gems))
    # FlagGems' linalg_lstsq, whose every row moved about one SM clock step between an
    # H100 A/A's processes (a chain of small, clock-bound kernels).
    for shape, dtype in (((256, 32), torch.float32), ((1024, 1024), torch.float64)):
        name = f"gems linalg_lstsq {str(dtype).split('.')[-1]} {shape[0]}x{shape[1]}"
        if selected(name, wanted) and gems is not None:
            import flag_gems

            a = torch.randn(*shape, device=dev, dtype=dtype)
            b = torch.randn(shape[0], device=dev, dtype=dtype)
            # FlagGems' benchmark calls it by name, as here (its reference is composed).
            out.append((name, solving(a, b, flag_gems.linalg_lstsq), contextlib.nullcontext))
    for side, ctx in (("gems", gems), ("torch", contextlib.nullcontext)):
        name = f"{side} log1p fp32 2^30"
        if selected(name, wanted):
            x = torch.rand(LARGE, device=dev, dtype=torch.float32)
            out.append((name, closing_over(x, torch.log1p), ctx))
    return out


def child(timings: int, wanted: List[str]) -> Dict[str, dict]:
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("capture_spread.py times CUDA graphs: this host has no CUDA device")
    from zlbench.plugins.graph_timer import graph_bench

    try:
        import flag_gems

        def gems():
            return flag_gems.use_gems()
    except Exception as e:  # noqa: BLE001 - the torch cases still run
        print(f"flag_gems not importable ({type(e).__name__}: {e}): torch cases only", file=sys.stderr)
        gems = None
    effective_mhz, nvml_mhz = clock_readers(torch)
    got: Dict[str, dict] = {}
    for name, fn, ctx in cases(torch, gems, wanted):
        if ctx is None:
            continue
        medians, spreads, interleaved, placements, clocks = [], [], set(), [], []
        try:
            with ctx():
                for _ in range(timings):
                    before = effective_mhz()
                    m = graph_bench(fn, 1000.0, 100.0, None, None, "median", places=8)
                    # The effective clock around the timing (mean of before and after),
                    # and NVML's reading after it.
                    clocks.append({"effective_mhz": (before + effective_mhz()) / 2, "nvml_mhz": nvml_mhz()})
                    medians.append(m.median_ms)
                    spreads.append(m.spread)
                    interleaved.add(bool(m.cost.get("interleaved")))
                    # Each placement's (or interleaved graph's) own median: clusters show here.
                    placements.append(m.cost.get("placement_ms") or m.cost.get("graph_ms") or [])
        except Exception as e:  # noqa: BLE001 - a case this build cannot time is left out
            print(f"{name}: {type(e).__name__}: {e}", file=sys.stderr)
            continue
        got[name] = {
            "medians_ms": medians,
            "spreads": spreads,
            "interleaved": sorted(interleaved),
            "placement_ms": placements,
            "clocks": clocks,
        }
    return got


def relative(values: List[float]) -> Dict[str, float]:
    mid = statistics.median(values)
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return {"range_pct": 100 * (max(values) - min(values)) / mid, "sd_pct": 100 * sd / mid}


def summarise(runs: List[Dict[str, dict]]) -> Dict[str, dict]:
    """Per case: within a process (the median over processes of their medians' relative
    range and sd) against between processes (of the processes' means)."""
    out = {}
    for name in sorted({n for run in runs for n in run}):
        per = [run[name] for run in runs if name in run and run[name]["medians_ms"]]
        if len(per) < 2:
            continue
        within = [relative(p["medians_ms"]) for p in per]
        means = [statistics.fmean(p["medians_ms"]) for p in per]
        out[name] = {
            "processes": len(per),
            "interleaved": sorted({i for p in per for i in p["interleaved"]}),
            "within_range_pct": round(statistics.median(w["range_pct"] for w in within), 4),
            "within_sd_pct": round(statistics.median(w["sd_pct"] for w in within), 4),
            "between": {k: round(v, 4) for k, v in relative(means).items()},
            # What the timings said of themselves: the median of their spreads (a 95%
            # half-width: about 1.96 standard deviations).
            "spread_pct": round(
                100 * statistics.median(s for p in per for s in p.get("spreads") or [] if s is not None), 4
            )
            if any(p.get("spreads") for p in per)
            else None,
            "medians_us": [[round(1e3 * m, 4) for m in p["medians_ms"]] for p in per],
        }
        if all(len(p.get("clocks") or []) == len(p["medians_ms"]) for p in per):
            # Each process's mean in cycles (each timing's median x its effective clock):
            # a clock-bound case that the clock moved between processes agrees here.
            cycles = [
                statistics.fmean(m * c["effective_mhz"] for m, c in zip(p["medians_ms"], p["clocks"]))
                for p in per
            ]
            out[name]["between_cycles"] = {k: round(v, 4) for k, v in relative(cycles).items()}
            out[name]["effective_mhz"] = [
                round(statistics.median(c["effective_mhz"] for c in p["clocks"]), 1) for p in per
            ]
            out[name]["nvml_mhz"] = [
                sorted({c["nvml_mhz"] for c in p["clocks"] if c["nvml_mhz"] is not None}) for p in per
            ]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--processes", type=int, default=5)
    ap.add_argument("--timings", type=int, default=3, help="timings of each case in one process")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument(
        "--cases",
        default="",
        help="comma list of substrings: only the cases whose name holds one (e.g. 'log1p'); default every case",
    )
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.processes < 2 or args.timings < 2:
        ap.error("--processes and --timings need 2 at least: the script compares them")
    wanted = [w.strip() for w in args.cases.split(",") if w.strip()]
    if args.child:
        print(json.dumps(child(args.timings, wanted)))
        return 0
    runs = []
    for i in range(args.processes):
        proc = subprocess.run(
            [sys.executable, __file__, "--child", "--timings", str(args.timings), "--cases", args.cases],
            capture_output=True,
            text=True,
            cwd=REPO,
        )
        for line in proc.stderr.splitlines():  # cases a process left out, and why
            if line.strip() and proc.returncode == 0:
                print(f"process {i + 1}: {line}", file=sys.stderr)
        if proc.returncode != 0 or not proc.stdout.strip():
            print(f"process {i + 1} failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}", file=sys.stderr)
            return 1
        runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        print(f"process {i + 1} of {args.processes}: {len(runs[-1])} cases", flush=True)
    if not any(runs):
        print(
            f"no case was timed: does --cases {args.cases!r} name one? (see cases() in {Path(__file__).name})",
            file=sys.stderr,
        )
        return 2
    figures = summarise(runs)
    print(
        f"\n{'case':<38} {'interleaved':<12} {'within range/sd %':>18} {'between range/sd %':>19} {'spread %':>9}"
    )
    for name, f in figures.items():
        print(
            f"{name:<38} {str(f['interleaved']):<12} {f['within_range_pct']:>8.3f} /{f['within_sd_pct']:>7.3f}  "
            f"{f['between']['range_pct']:>9.3f} /{f['between']['sd_pct']:>7.3f} {f['spread_pct'] or float('nan'):>9.3f}"
        )
        if "between_cycles" in f:
            print(
                f"{'':<38} in cycles between range/sd % {f['between_cycles']['range_pct']:.3f} /"
                f"{f['between_cycles']['sd_pct']:.3f}; effective MHz {f['effective_mhz']}, NVML MHz {f['nvml_mhz']}"
            )
    if args.json:
        args.json.write_text(json.dumps({"runs": runs, "figures": figures}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

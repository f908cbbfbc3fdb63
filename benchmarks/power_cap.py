"""How a GEMM settles under the device's power cap: per-call time, SM clock, power and
the vendor's slowdown reasons, batch by batch, from an idle device through seconds of
back-to-back calls. The question it answers: how long must a warm-up go on before a
timing of ``rep`` milliseconds reads what the next one will (zlbench.timing's settle
rule), and how far apart two such timings land when the warm-up stops earlier.

Each case (shape x dtype) idles for --idle seconds, then runs batches of about
--batch-ms of calls for --seconds, each batch timed by device events, the device's state
read while the batch still runs (zlbench.backends: NVML on NVIDIA; an idle device's
reasons clear at once, as zlbench.timing.power_capped says). Per case it reports the clock at
the start and its median over the last second, when the power cap was first reported,
when the clock came within --within of that median and stayed there (settled_s), and the
medians of consecutive --rep-ms windows of per-call times: how far the window right
after the first power-cap report, and the spread of windows after settling, sit from
the settled median.

Usage (a CUDA GPU): python benchmarks/power_cap.py --json power_cap.json
The figures again from a saved run (no GPU): --from-json power_cap.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Dict, List, Optional


def parse_shape(text: str) -> List[int]:
    try:
        dims = [int(x) for x in text.lower().split("x")]
    except ValueError:
        raise SystemExit(f"--shapes: {text!r} is not BxMxNxK (e.g. 16x4096x4096x4096)")
    if len(dims) != 4 or min(dims) < 1:
        raise SystemExit(f"--shapes: {text!r} is not BxMxNxK (e.g. 16x4096x4096x4096)")
    return dims


def run_case(torch, state, op: str, dims: List[int], dtype, args) -> List[dict]:
    b, m, n, k = dims
    dev = "cuda"
    t = {
        "x": torch.randn(b, m, k, device=dev, dtype=dtype),
        "y": torch.randn(b, k, n, device=dev, dtype=dtype),
        "c": torch.randn(b, m, n, device=dev, dtype=dtype),
    }

    def fn():
        return torch.baddbmm(t["c"], t["x"], t["y"]) if op == "baddbmm" else torch.bmm(t["x"], t["y"])

    fn()
    torch.cuda.synchronize()
    time.sleep(args.idle)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    # One timed call sizes the batches.
    start.record()
    fn()
    end.record()
    end.synchronize()
    calls = max(1, int(args.batch_ms / max(start.elapsed_time(end), 1e-3)))
    series: List[dict] = []
    begin = time.perf_counter()
    while time.perf_counter() - begin < args.seconds:
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        s = state.sample(ending=False)
        end.synchronize()
        series.append(
            {
                "t_s": round(time.perf_counter() - begin, 4),
                "ms": start.elapsed_time(end) / calls,
                "sm_mhz": s.get("sm_mhz"),
                "power_w": s.get("power_w"),
                "temp_c": s.get("temp_c"),
                "throttle": s.get("throttle"),
            }
        )
    t.clear()
    torch.cuda.empty_cache()
    return series


def windows(series: List[dict], rep_s: float, after_s: float = 0.0) -> List[float]:
    """Median per-call ms of consecutive windows of rep_s, from after_s on."""
    out, cur, edge = [], [], after_s + rep_s
    for p in series:
        if p["t_s"] < after_s:
            continue
        if p["t_s"] >= edge:
            if cur:
                out.append(statistics.median(cur))
            cur, edge = [], edge + rep_s
        cur.append(p["ms"])
    return out


def window_spread(series: List[dict], after_s: float, lengths) -> Dict[str, Optional[float]]:
    out: Dict[str, Optional[float]] = {}
    for length in lengths:
        meds = windows(series, length, after_s)
        mid = statistics.median(meds) if meds else None
        out[f"{length:g}s"] = round(max(abs(w / mid - 1) for w in meds), 4) if mid else None
    return out


def describe(series: List[dict], args) -> Dict[str, Optional[float]]:
    end_t = series[-1]["t_s"]
    last = [p for p in series if p["t_s"] >= end_t - 1.0]
    clocks = [p["sm_mhz"] for p in last if p["sm_mhz"]]
    final_mhz = statistics.median(clocks) if clocks else None
    final_ms = statistics.median(p["ms"] for p in last)
    capped = next((p["t_s"] for p in series if "sw_power_cap" in (p["throttle"] or [])), None)
    settled = None
    if final_mhz:
        # The first reading after the last one outside the band (none: never settled).
        for i in range(len(series) - 1, -1, -1):
            mhz = series[i]["sm_mhz"]
            if not mhz or abs(mhz / final_mhz - 1) > args.within:
                settled = series[i + 1]["t_s"] if i + 1 < len(series) else None
                break
        else:
            settled = series[0]["t_s"]
    rep_s = args.rep_ms / 1e3
    after_cap = windows(series, rep_s, capped)[:1] if capped is not None else []
    steady = windows(series, rep_s, settled if settled is not None else end_t - 1.0)
    dev = [abs(w / final_ms - 1) for w in steady]
    return {
        "first_mhz": series[0]["sm_mhz"],
        "final_mhz": final_mhz,
        "final_ms": round(final_ms, 5),
        "first_batch_vs_final": round(series[0]["ms"] / final_ms - 1, 4),
        "capped_s": capped,
        "settled_s": settled,
        "window_after_cap_vs_final": round(after_cap[0] / final_ms - 1, 4) if after_cap else None,
        "settled_windows": len(steady),
        "settled_windows_max_dev": round(max(dev), 4) if dev else None,
        # From the first power-cap report on (the whole run if none): how far the median
        # of one window of each length sits from the median of those windows, at most.
        "window_max_dev": window_spread(series, capped or 0.0, (rep_s, 0.5, 1.0)),
        "final_power_w": statistics.median(p["power_w"] for p in last if p["power_w"]) if last else None,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--op", choices=("bmm", "baddbmm"), default="baddbmm")
    ap.add_argument(
        "--shapes",
        default="16x4096x4096x4096,16x2048x2048x2048,2x4096x4096x4096",
        help="comma-separated BxMxNxK (default: the three largest of FlagGems' BlasBenchmark core shapes)",
    )
    ap.add_argument("--dtypes", default="float16,bfloat16,float32")
    ap.add_argument("--seconds", type=float, default=3.0, help="back-to-back calls per case")
    ap.add_argument("--idle", type=float, default=0.5, help="idle seconds before each case")
    ap.add_argument("--batch-ms", type=float, default=5.0, help="calls per timed batch, in ms")
    ap.add_argument("--rep-ms", type=float, default=100.0, help="a timing's replay budget (FlagGems' --iter)")
    ap.add_argument(
        "--within", type=float, default=0.01, help="settled: the clock this close to its final median"
    )
    ap.add_argument("--json", help="write every case's series and figures here")
    ap.add_argument("--from-json", help="no GPU: the figures again from the series of an earlier --json")
    args = ap.parse_args(argv)
    if args.from_json:
        with open(args.from_json) as f:
            for case in json.load(f)["cases"]:
                print(case["shape"], case["dtype"], json.dumps(describe(case["series"], args)))
        return 0
    shapes = [(text, parse_shape(text)) for text in args.shapes.split(",")]
    import torch

    dtypes = [(name, getattr(torch, name, None)) for name in args.dtypes.split(",")]
    for name, dtype in dtypes:
        if not isinstance(dtype, torch.dtype):
            raise SystemExit(f"--dtypes: {name!r} is not a torch dtype (float16, bfloat16, float32)")

    from zlbench.backends.cuda import open_device_state

    if not torch.cuda.is_available():
        print("power_cap.py needs a CUDA GPU", file=sys.stderr)
        return 2
    state = open_device_state()
    if not state.available():
        print(f"power_cap.py needs the device's state (NVML): {state.reason}", file=sys.stderr)
        return 2
    results = []
    for shape, dims in shapes:
        for name, dtype in dtypes:
            series = run_case(torch, state, args.op, dims, dtype, args)
            figures = describe(series, args)
            results.append({"op": args.op, "shape": shape, "dtype": name, **figures, "series": series})
            print(shape, name, json.dumps(figures), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "cases": results}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())

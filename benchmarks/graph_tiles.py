"""Does a tiled graph time what an unrolled one does, and what does it save?

The graph timer builds a graph of many calls from one captured tile of the probe's calls,
chained as child graphs (``zlbench.plugins.graph_tiles``). On a CUDA host, for graphs of
40 to 800 calls (torch ops, and FlagGems' where its src is on PYTHONPATH), this captures
each graph both ways, then times ``--trials`` rounds of ``--replays`` replays of each,
interleaved, and prints per graph: the tiled graph's per-call time over the unrolled
one's (median over rounds, and the rounds' spread of that ratio), and each way's capture
wall time.

``--sweep``: does a tile's size move a row? A graph of 160 calls unrolled and built from
tiles of 4 to 80 calls, each timed as above, for rows of one kernel and of several
(cumsum of a 1024x1024 float32: FlagGems' scan kernels); per tile size, per-call time
over the unrolled graph's. On an H100 every size read within 0.5% of the unrolled graph
(rounds' spreads 0.4-0.5% for FlagGems' cumsum): the size of the tile the graph timer
keeps per row (``graph_tiles.TileSizes``) does not move a row.

  python benchmarks/graph_tiles.py [--sweep] [--trials 30] [--replays 5] [--json OUT]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
from pathlib import Path


def cases(torch):
    dev, half = "cuda", torch.float16
    out = []
    y = torch.randn(64, 64, device=dev, dtype=half)
    out.append(("clamp 64x64, 800 calls in tiles of 100", lambda: torch.clamp(y, -0.5, 0.5), 800, 100,
                contextlib.nullcontext))
    x = torch.randn(4096, 4096, device=dev, dtype=half)
    out.append(("clamp 4096x4096, 40 calls in tiles of 10", lambda: torch.clamp(x, -0.5, 0.5), 40, 10,
                contextlib.nullcontext))
    s = torch.randn(1024, 1024, device=dev, dtype=torch.float32)
    out.append(("softmax 1024x1024, 100 calls in tiles of 25", lambda: torch.softmax(s, 1), 100, 25,
                contextlib.nullcontext))
    try:
        import flag_gems

        w = torch.randn(64, 64, device=dev, dtype=half)
        out.append(("flag_gems abs 64x64, 800 calls in tiles of 100", lambda: torch.abs(w), 800, 100,
                    flag_gems.use_gems))
        c = torch.randn(256, 256, device=dev, dtype=half)
        out.append(("flag_gems cumsum 256x256, 300 calls in tiles of 100", lambda: torch.cumsum(c, 1), 300, 100,
                    flag_gems.use_gems))
        u, v = (torch.randn(1024, 1024, device=dev, dtype=half), torch.randn(1024, 1024, device=dev, dtype=half))
        out.append(("flag_gems div 1024x1024, 150 calls in tiles of 50", lambda: torch.div(u, v), 150, 50,
                    flag_gems.use_gems))
    except Exception as e:  # noqa: BLE001 - torch cases alone
        print(f"FlagGems cases left out: {type(e).__name__}: {e}", flush=True)
    return out


SWEEP_CALLS = 160
SWEEP_TILES = (4, 5, 8, 10, 16, 20, 32, 40, 80)


def sweep_cases(torch):
    dev = "cuda"
    c = torch.randn(1024, 1024, device=dev, dtype=torch.float32)
    y = torch.randn(64, 64, device=dev, dtype=torch.float16)
    out = [("torch cumsum f32 1024x1024", lambda: torch.cumsum(c, 1), contextlib.nullcontext),
           ("torch abs f16 64x64", lambda: torch.abs(y), contextlib.nullcontext)]
    try:
        import flag_gems

        out += [("flag_gems cumsum f32 1024x1024", lambda: torch.cumsum(c, 1), flag_gems.use_gems),
                ("flag_gems abs f16 64x64", lambda: torch.abs(y), flag_gems.use_gems)]
    except Exception as e:  # noqa: BLE001 - torch cases alone
        print(f"FlagGems cases left out: {type(e).__name__}: {e}", flush=True)
    return out


def time_ways(torch, gt, graphs, calls, trials, replays, stream):
    """Per way, the median over ``trials`` interleaved rounds of its replays' median, per call."""
    per_call = {w: [] for w in graphs}
    for _ in range(trials):
        for w, g in graphs.items():
            per_call[w].append(statistics.median(gt.time_replays(torch, g, replays, stream)) / calls)
    return {w: statistics.median(v) for w, v in per_call.items()}, per_call


def sweep(torch, gt, tiling, Tiles, args) -> dict:
    stream = gt.side_stream(torch)
    result = {}
    for name, fn, ctx in sweep_cases(torch):
        with ctx():
            for _ in range(3):
                fn()
            torch.cuda.synchronize()
            graphs = {"unrolled": gt.capture(torch, fn, SWEEP_CALLS, stream, None)}
            for tile in SWEEP_TILES:
                graphs[f"tiles of {tile}"] = gt.capture(torch, fn, SWEEP_CALLS, stream, None, tiles=Tiles(tiling, tile))
            torch.cuda.synchronize()
            medians, per_call = time_ways(torch, gt, graphs, SWEEP_CALLS, args.trials, args.replays, stream)
        base = medians["unrolled"]
        row = {"unrolled_us": round(1000 * base, 4),
               "over_unrolled": {w: round(m / base, 5) for w, m in medians.items() if w != "unrolled"},
               "rounds_spread": {w: round((max(v) - min(v)) / statistics.median(v), 5) for w, v in per_call.items()}}
        result[name] = row
        print(name, json.dumps(row), flush=True)
        del graphs
    return result


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trials", type=int, default=30)
    p.add_argument("--replays", type=int, default=5)
    p.add_argument("--json", type=Path)
    p.add_argument("--sweep", action="store_true", help="per tile size, against the unrolled graph")
    args = p.parse_args()
    import torch

    from zlbench.plugins import graph_timer as gt
    from zlbench.plugins.graph_tiles import Tiles, Tiling

    if not torch.cuda.is_available():
        print("needs a CUDA device", file=sys.stderr)
        return 2
    tiling = Tiling(torch)
    if not tiling.on:
        print(f"no tiled graphs here: {tiling.why_off}", file=sys.stderr)
        return 2
    if args.sweep:
        result = sweep(torch, gt, tiling, Tiles, args)
        if args.json:
            args.json.write_text(json.dumps(result, indent=1))
        return 0
    stream = gt.side_stream(torch)
    result = {}
    for name, fn, calls, tile, ctx in cases(torch):
        with ctx():
            for _ in range(3):
                fn()
            torch.cuda.synchronize()
            graphs, capture_ms = {}, {}
            for way, tiles in (("unrolled", None), ("tiled", Tiles(tiling, tile))):
                t0 = time.perf_counter()
                graphs[way] = gt.capture(torch, fn, calls, stream, None, tiles=tiles)
                torch.cuda.synchronize()
                capture_ms[way] = round(1000 * (time.perf_counter() - t0), 2)
            if not tiling.on:
                print(f"{name}: the driver refused the tiled graph: {tiling.why_off}", file=sys.stderr)
                return 1
            ratios, per_call = [], {w: [] for w in graphs}
            for _ in range(args.trials):
                got = {w: statistics.median(gt.time_replays(torch, g, args.replays, stream)) / calls
                       for w, g in graphs.items()}
                ratios.append(got["tiled"] / got["unrolled"])
                for w, v in got.items():
                    per_call[w].append(v)
        ratios.sort()
        row = {
            "tiled_over_unrolled": round(statistics.median(ratios), 5),
            "ratio_p10_p90": [round(ratios[len(ratios) // 10], 5), round(ratios[(9 * len(ratios)) // 10], 5)],
            "per_call_us": {w: round(1000 * statistics.median(v), 4) for w, v in per_call.items()},
            "capture_ms": capture_ms,
        }
        result[name] = row
        print(name, json.dumps(row), flush=True)
        del graphs
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

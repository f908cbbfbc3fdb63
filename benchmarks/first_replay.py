"""Does the first timed replay of a graph wait for its own launch?

The graph timer times each placement's graph over a few replays. Queued on an idle device
(after a host synchronisation), a replay's start event runs at once and its kernels only
once the host has launched the graph: its time holds the launch. Queued behind an untimed
replay, the device is busy while the timed ones are launched.

On a CUDA host, for graphs of one to several hundred calls (torch ops, and FlagGems' where
its src is on PYTHONPATH), this times ``--trials`` rounds of ``--replays`` replays both
ways, interleaved, and prints per graph and way: the first replay over the median of the
others (median over trials), and the pooled CI half-width of the round (what
``timing.ReplayRule`` tests against the noise target).

  python benchmarks/first_replay.py [--trials 30] [--replays 3] [--json OUT]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
from pathlib import Path


def cases(torch):
    dev, half = "cuda", torch.float16
    out = []
    x = torch.randn(4096, 4096, device=dev, dtype=half)
    out.append(("clamp 4096x4096, 40 calls", lambda: torch.clamp(x, -0.5, 0.5), 40, contextlib.nullcontext))
    y = torch.randn(64, 64, device=dev, dtype=half)
    out.append(("clamp 64x64, 700 calls", lambda: torch.clamp(y, -0.5, 0.5), 700, contextlib.nullcontext))
    z = torch.randn(1 << 28, device=dev, dtype=half)
    out.append(("clamp 2^28, 1 call", lambda: torch.clamp(z, -0.5, 0.5), 1, contextlib.nullcontext))
    a = torch.randn(256, 256, device=dev, dtype=torch.float32)
    out.append(("linalg.qr 256x256, 4 calls", lambda: torch.linalg.qr(a), 4, contextlib.nullcontext))
    try:
        import flag_gems

        u, v = (
            torch.randn(4096, 4096, device=dev, dtype=half),
            torch.randn(4096, 4096, device=dev, dtype=half),
        )
        out.append(("flag_gems div 4096x4096, 40 calls", lambda: torch.div(u, v), 40, flag_gems.use_gems))
        w = torch.randn(64, 64, device=dev, dtype=half)
        out.append(("flag_gems cumsum 64x64, 300 calls", lambda: torch.cumsum(w, 1), 300, flag_gems.use_gems))
    except Exception as e:  # noqa: BLE001 - torch cases alone
        print(f"FlagGems cases left out: {type(e).__name__}: {e}", flush=True)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trials", type=int, default=30)
    p.add_argument("--replays", type=int, default=3)
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    import torch

    from zlbench.plugins import graph_timer as gt
    from zlbench.timing import relative_spread

    if not torch.cuda.is_available():
        print("needs a CUDA device", file=sys.stderr)
        return 2
    stream = gt.side_stream(torch)

    def synced(graph, n):  # the timer before: wait for the upload, then queue the timed ones
        with torch.cuda.stream(stream):
            graph.replay()
            stream.synchronize()
            return gt.queue_replays(torch, graph, n)()

    ways = {
        "after a sync": synced,
        "queued behind the upload": lambda g, n: gt.time_replays(torch, g, n, stream),
    }
    result = {}
    for name, fn, calls, ctx in cases(torch):
        with ctx():
            for _ in range(3):
                fn()
            torch.cuda.synchronize()
            graph = gt.capture(torch, fn, calls, stream, None)
            firsts = {w: [] for w in ways}
            spreads = {w: [] for w in ways}
            for _ in range(args.trials):
                for way, timed in ways.items():
                    t = timed(graph, args.replays)
                    firsts[way].append(t[0] / statistics.median(t[1:]))
                    spreads[way].append(relative_spread(sorted(t)) or 0.0)
        row = {
            way: {
                "first_over_rest": round(statistics.median(firsts[way]), 4),
                "round_spread_pct": round(100 * statistics.median(spreads[way]), 3),
            }
            for way in ways
        }
        result[name] = row
        print(name, json.dumps(row), flush=True)
        del graph
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

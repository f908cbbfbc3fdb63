"""Do a small row's per-process shifts come from where its inputs sit in physical memory?

In an A/A of the 24-operator sample (H100, main f2957eb, defaults), the rows compared
moved between the two batches' processes by a median 0.36% under 10 us, 0.15-0.16% from
10 us to 1 ms and 0.03% from 1 ms up (screen_throughput.py's ``by_latency``); the torch
and FlagGems rows of one shape moved together (median's rows: gems +0.65%, torch
+0.53%), and one operator's float32 rows moved while its float16 rows did not. Both sides
of a row read the same input tensors, so a shift shared by both points at the inputs'
addresses. The graph timer already times a row over 8 placements
(``zlbench.plugins.placement``), but its copies of a small input come from torch's small
pool (requests up to 1 MiB): 2 MiB segments carved in 512 B blocks, so a row's copies
share one page or a few, each copy's offset in it the only difference. The placements'
spread (a 95% half-width) was a median 0.075% over median's rows, whose process moved
0.61%.

This times a few such rows by the graph timer (``graph_bench``, 8 placements, FlagGems'
100 ms rep) in --processes fresh processes per variant, taken in turn:

  default  the timer as it is
  frames   every copy of a placement in a 2 MiB page of its own, at an offset of its own
           (``frame_clone``: a large-pool block the size of a page, the copy a view into it)

and prints per row and variant the between-process spread (the median |difference| of
two processes' medians, what an A/A's median |gain| reads) beside the within-process one
(the placements' spread). If ``frames`` brings the between-process figure of the small
rows down towards the large rows', the placements should spread their copies so.

  python benchmarks/placement_frames.py [--processes 6] [--json OUT]
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List

# A 2 MiB request goes to torch's large pool, whose 20 MiB segments it splits: each copy a
# block of a page of its own.
FRAME = 2 << 20
OFFSET_STEP = 4096 + 512  # consecutive copies start at different offsets within their pages
VARIANTS = ("default", "frames")


def frame_offset(index: int, nbytes: int, frame: int = FRAME, step: int = OFFSET_STEP) -> int:
    """Where the ``index``-th copy of ``nbytes`` starts in its own page: a multiple of 512 B
    that leaves the copy inside the page."""
    room = max(0, frame - nbytes)
    return (index * step) % (room + 1) // 512 * 512


def frame_clone(torch: Any) -> Callable[[Any], Any]:
    """``placement.native_clone``'s copy, each in a page of its own: a fresh FRAME-byte
    block (large pool) and the copy a view into it at ``frame_offset``. Inputs of a page or
    more are copied as before."""
    from zlbench.plugins.placement import native_clone

    plain = native_clone(torch)
    counter = itertools.count(1)

    def clone(t: Any) -> Any:
        nbytes = t.numel() * t.element_size()
        if nbytes == 0 or nbytes >= FRAME // 2 or not t.is_contiguous():
            return plain(t)
        page = torch.empty(FRAME, dtype=torch.uint8, device=t.device)
        start = frame_offset(next(counter), nbytes)
        out = page.narrow(0, start, nbytes).view(t.dtype).view(t.shape)
        out.copy_(t)
        return out

    return clone


def rows(torch) -> List[tuple]:
    """(name, fn) of rows like the ones that moved: microseconds each, inputs of bytes to KB."""
    dev = "cuda"
    h = torch.float16
    a = torch.randn(1024, device=dev, dtype=h)
    b = torch.randn(64, 64, device=dev, dtype=h)
    c = torch.randn(64, 64, device=dev, dtype=h)
    d = torch.randn(4, 8, 16, device=dev, dtype=torch.float32)
    e = torch.randn(256, 256, device=dev, dtype=h)
    f = torch.randn(1 << 24, device=dev, dtype=h)  # a large row for comparison (32 MiB)
    return [
        ("median [1024] f16", lambda: torch.median(a)),
        ("add [64,64] f16", lambda: torch.add(b, c)),
        ("cumsum [4,8,16] f32", lambda: torch.cumsum(d, 1)),
        ("softmax [256,256] f16", lambda: torch.softmax(e, -1)),
        ("abs [2^24] f16 (large)", lambda: torch.abs(f)),
    ]


def child(variant: str) -> Dict[str, dict]:
    import torch

    from zlbench.plugins import graph_timer, placement

    if variant == "frames":
        placement.native_clone = frame_clone  # Placements.plan asks the module for it
    out = {}
    for name, fn in rows(torch):
        try:
            m = graph_timer.graph_bench(fn, 1000.0, 100.0, None, None, "median", places=8)
        except Exception as exc:  # noqa: BLE001 - one row's failure is its own, said in the output
            out[name] = {"error": f"{type(exc).__name__}: {exc}"}
            continue
        spread = (m.cost or {}).get("placement_spread")
        out[name] = {"median_ms": m.median_ms, "placements": m.placements, "placement_spread": spread}
    return out


def between(medians: List[float]) -> float:
    """The median |difference| of two processes' medians, relative (an A/A's |gain|)."""
    pairs = [max(x, y) / min(x, y) - 1 for x, y in itertools.combinations(medians, 2)]
    return statistics.median(pairs) if pairs else 0.0


def summarise(runs: Dict[str, List[Dict[str, dict]]]) -> Dict[str, Dict[str, dict]]:
    """Per row and variant: processes timed, processes where the row failed, the
    between-process median |difference| (%), and the placements' own spread (median
    over processes, %)."""
    table: Dict[str, Dict[str, dict]] = {}
    for variant, processes in runs.items():
        for name in processes[0] if processes else []:
            medians = [p[name]["median_ms"] for p in processes if p.get(name, {}).get("median_ms")]
            spreads = [
                p[name]["placement_spread"] for p in processes if p.get(name, {}).get("placement_spread")
            ]
            table.setdefault(name, {})[variant] = {
                "processes": len(medians),
                "failed": sum(1 for p in processes if "error" in p.get(name, {})),
                "between_pct": round(100 * between(medians), 4),
                "within_pct": round(100 * statistics.median(spreads), 4) if spreads else None,
            }
    return table


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--processes", type=int, default=6, help="fresh processes per variant")
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--json", type=Path)
    p.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(child(args.child)), flush=True)
        return 0
    try:
        import torch

        available = torch.cuda.is_available()
    except ImportError:
        available = False
    if not available:
        print("placement_frames.py needs a CUDA device (torch sees none)", file=sys.stderr)
        return 2
    variants = [v for v in args.variants.split(",") if v]
    runs: Dict[str, List[Dict[str, dict]]] = {v: [] for v in variants}
    for i in range(args.processes):
        for variant in variants:  # in turn, so that a drift of the device falls on both
            proc = subprocess.run(
                [sys.executable, __file__, "--child", variant], capture_output=True, text=True
            )
            if proc.returncode != 0:
                print(proc.stdout + proc.stderr, file=sys.stderr)
                return 1
            runs[variant].append(json.loads(proc.stdout.strip().splitlines()[-1]))
            print(f"process {i + 1}/{args.processes} {variant}", flush=True)
    table = summarise(runs)
    for name, by_variant in table.items():
        cells = "  ".join(
            f"{v}: between {c['between_pct']}% within {c['within_pct']}%"
            + (f" ({c['failed']} failed)" if c["failed"] else "")
            for v, c in by_variant.items()
        )
        print(f"{name:26} {cells}")
    if args.json:
        args.json.write_text(json.dumps({"rows": table, "runs": runs}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

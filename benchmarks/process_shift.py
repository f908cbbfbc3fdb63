"""How far a kernel's time moves from process to process, and whether the SM clock
the kernels really ran at explains it.

In an A/A of the corpus' sample some operators moved as a whole between the two
batches' processes (every row of FlagGems' linalg_lstsq 0.6-0.8%, on both sides),
while NVML's clock readings around each row were the same. This script runs
``--processes`` fresh processes one after another; each times the same cases at
``--rounds`` moments by CUDA-graph replay (and torch's lstsq, which syncs with the
host, by events around eager calls), and reads the SM clock two ways around every
timing: NVML's reported clock, and the effective one, from a spin kernel of a known
number of cycles (``torch.cuda._sleep``) timed by events. It prints, per case, how far
the processes' medians lie apart and how they follow the effective clock.

    python benchmarks/process_shift.py --processes 6 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Dict, List

SPIN_CYCLES = 2_000_000  # about 1 ms at 2 GHz


def child(rounds: int, idle_s: float) -> dict:
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("process_shift.py needs a CUDA device (torch.cuda.is_available() is False)")
    dev = torch.device("cuda")
    nvml = None
    try:
        import pynvml

        pynvml.nvmlInit()
        # By the UUID torch reports: NVML numbers devices ignoring CUDA_VISIBLE_DEVICES.
        uuid = str(torch.cuda.get_device_properties(torch.cuda.current_device()).uuid)
        nvml = pynvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")
    except Exception:  # noqa: BLE001 - the effective clock does not need it
        nvml = None

    def nvml_mhz():
        if nvml is None:
            return None
        import pynvml

        return pynvml.nvmlDeviceGetClockInfo(nvml, pynvml.NVML_CLOCK_SM)

    def spin_ms(cycles: int) -> float:
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        torch.cuda._sleep(cycles)
        e.record()
        e.synchronize()
        return s.elapsed_time(e)

    def effective_mhz(n: int = 5) -> float:
        # Cycles per microsecond of a spin kernel, from the difference of two lengths
        # so that the launch's fixed cost drops out.
        out = []
        for _ in range(n):
            short, long = spin_ms(SPIN_CYCLES), spin_ms(2 * SPIN_CYCLES)
            out.append(SPIN_CYCLES / ((long - short) * 1e3))
        return statistics.median(out)

    def graph_us(fn, calls: int = 20, replays: int = 30) -> float:
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            fn()
            torch.cuda.synchronize()
            with torch.cuda.graph(g, stream=stream):
                for _ in range(calls):
                    fn()
        torch.cuda.synchronize()
        # Every timed replay is queued behind one untimed one, with no host wait between
        # them: a replay queued on an idle device after a wait times its own launch too.
        events = [
            (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            for _ in range(replays)
        ]
        g.replay()
        for s, e in events:
            s.record()
            g.replay()
            e.record()
        torch.cuda.synchronize()
        return statistics.median(s.elapsed_time(e) * 1e3 / calls for s, e in events)

    def eager_us(fn, calls: int = 20) -> float:
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        times = []
        for _ in range(calls):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            e.synchronize()
            times.append(s.elapsed_time(e) * 1e3)
        return statistics.median(times)

    cases: Dict[str, tuple] = {}
    torch.manual_seed(0)
    x = torch.randn(1 << 26, device=dev)
    y = torch.empty_like(x)
    cases["copy 256MiB (memory)"] = ("graph", lambda: y.copy_(x))
    a16 = torch.randn(4096, 4096, device=dev, dtype=torch.float16)
    cases["torch mm fp16 4096 (compute)"] = ("graph", lambda: torch.mm(a16, a16))
    s32 = torch.randn(256, 256, device=dev)
    cases["torch softmax 256x256 (small)"] = ("graph", lambda: torch.softmax(s32, -1))
    try:
        import flag_gems

        A1 = torch.randn(256, 32, device=dev)
        b1 = torch.randn(256, device=dev)
        A2 = torch.randn(1024, 1024, device=dev, dtype=torch.float64)
        b2 = torch.randn(1024, device=dev, dtype=torch.float64)
        cases["gems lstsq f32 256x32"] = ("graph", lambda: flag_gems.linalg_lstsq(A1, b1, driver="gels"))
        cases["gems lstsq f64 1024x1024"] = ("graph", lambda: flag_gems.linalg_lstsq(A2, b2, driver="gels"))
        cases["torch lstsq f32 256x32 (eager)"] = ("eager", lambda: torch.linalg.lstsq(A1, b1, driver="gels"))
    except Exception as exc:  # noqa: BLE001 - the torch cases still say something
        cases_error = f"{type(exc).__name__}: {exc}"
    else:
        cases_error = None
    result: dict = {"pid": os.getpid(), "rounds": [], "error": cases_error}
    for i in range(rounds):
        if i:
            time.sleep(idle_s)  # the device idles between rounds, as between two processes
        busy = [effective_mhz(1) for _ in range(40)]
        rnd: dict = {
            "busy_mhz": [min(busy), statistics.median(busy), max(busy)],
            "t": time.time(),
            "eff_mhz_before": effective_mhz(),
            "nvml_mhz_before": nvml_mhz(),
            "us": {},
        }
        for name, (how, fn) in cases.items():
            try:
                rnd["us"][name] = graph_us(fn) if how == "graph" else eager_us(fn)
            except Exception as exc:  # noqa: BLE001 - one case failing leaves the others
                result.setdefault("failed", {})[name] = f"{type(exc).__name__}: {exc}"[:300]
        rnd["eff_mhz_after"] = effective_mhz()
        rnd["nvml_mhz_after"] = nvml_mhz()
        result["rounds"].append(rnd)
    return result


def summarize(procs: List[dict]) -> Dict[str, dict]:
    """Per case timed in every round of every process: each process's median (us), how
    far those lie apart (``between_pct``: their range over their median), the median
    range of one process's rounds (``within_pct``), and the range between processes once
    each round's time is scaled by the effective clock it ran at
    (``clock_adjusted_between_pct``: time x MHz is cycles, which a clock-bound kernel
    keeps whatever the clock; where this is much narrower than ``between_pct``, the
    effective clock moved the processes apart)."""
    names = [n for n in procs[0]["rounds"][0]["us"] if all(n in r["us"] for p in procs for r in p["rounds"])]
    figures: Dict[str, dict] = {}
    for name in names:
        meds, within, cycles = [], [], []
        for p in procs:
            vals = [r["us"][name] for r in p["rounds"]]
            effs = [(r["eff_mhz_before"] + r["eff_mhz_after"]) / 2 for r in p["rounds"]]
            meds.append(statistics.median(vals))
            within.append((max(vals) - min(vals)) / statistics.median(vals))
            cycles.append(statistics.median(v * e for v, e in zip(vals, effs)))
        figures[name] = {
            "medians_us": meds,
            "between_pct": 100 * (max(meds) - min(meds)) / statistics.median(meds),
            "within_pct": 100 * statistics.median(within),
            "clock_adjusted_between_pct": 100 * (max(cycles) - min(cycles)) / statistics.median(cycles),
        }
    return figures


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--processes", type=int, default=6, help="fresh processes, one after another")
    ap.add_argument("--rounds", type=int, default=3, help="timings of every case per process")
    ap.add_argument("--idle", type=float, default=1.0, help="seconds the device idles between rounds")
    ap.add_argument("--json", help="write every process's readings here")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.rounds, args.idle)))
        return 0
    procs: List[dict] = []
    for i in range(args.processes):
        out = subprocess.run(
            [sys.executable, __file__, "--child", "--rounds", str(args.rounds), "--idle", str(args.idle)],
            capture_output=True,
            text=True,
        )
        if out.returncode != 0:
            print(f"process {i} failed ({out.returncode}): {out.stderr[-2000:]}", file=sys.stderr)
            if i == 0:
                return 1  # the first fails as every later one would (no device, no torch)
            continue
        procs.append(json.loads(out.stdout.strip().splitlines()[-1]))
        last = procs[-1]["rounds"][-1]
        print(
            f"process {i}: effective {last['eff_mhz_before']:.1f} MHz, NVML {last['nvml_mhz_before']}",
            flush=True,
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(procs, f, indent=1)
    if not procs:
        return 1
    print(
        f"{'case':34} {'proc medians us (by process)':>60} {'between %':>9} {'within %':>8} {'eff-adj %':>9}"
    )
    for name, fig in summarize(procs).items():
        print(
            f"{name:34} {' '.join(f'{m:9.3f}' for m in fig['medians_us']):>60} {fig['between_pct']:9.3f} "
            f"{fig['within_pct']:8.3f} {fig['clock_adjusted_between_pct']:9.3f}"
        )
    effs = [statistics.median(r["eff_mhz_before"] for r in p["rounds"]) for p in procs]
    print("effective MHz by process:", " ".join(f"{e:.1f}" for e in effs))
    print("effective MHz by round (busy trace min/median/max):")
    for i, p in enumerate(procs):
        print(f"  process {i}:", "; ".join("/".join(f"{v:.1f}" for v in r["busy_mhz"]) for r in p["rounds"]))
    print("NVML MHz by process:", " ".join(str(p["rounds"][0]["nvml_mhz_before"]) for p in procs))
    return 0


if __name__ == "__main__":
    sys.exit(main())

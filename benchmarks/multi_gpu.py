"""Multi-GPU evidence: batch makespans per device set, and the parallel-warmup sweep.

Two parts, each through the real CLI (``python -m zlbench``) against a FlagGems checkout:

``batch``: for every ``--devices`` value (say ``1`` then ``0,1``), one ``zlbench batch``
over the same operator slice, with isolated tuner caches so no run inherits another's
compiled kernels. While it runs, nvidia-smi is sampled every 0.5 s (memory used,
utilisation and compute processes per GPU), which shows the GPUs the batch really used
against those it was told to use. Reported per device set: wall time, statuses, the
per-device makespan (sum of each operator's total_s on that device, from
ops_status.csv), and the GPUs seen busy.

``warmup``: for every N in ``--gpus`` (say ``1,2``), ``zlbench run --op mm
--parallel-warmup-gpus N`` with an isolated tuner cache: sweep wall time, merged keys,
conflicts (plugins/parallel_warmup.json), and the measurement's replayed / fell back /
key_missing counts (plugins/autotune.json).

    python benchmarks/multi_gpu.py batch  --flaggems-dir $FLAGGEMS_DIR --ops abs,exp \\
        --devices 1 --devices 0,1 --out /tmp/mg
    python benchmarks/multi_gpu.py warmup --flaggems-dir $FLAGGEMS_DIR --gpus 1,2 --out /tmp/mg

Each part writes <out>/<part>.json. Exit status 0 when every run finished cleanly (and,
for batch, no GPU outside a device set was seen busy).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from zlbench.rundir import StatusFile, read_plugin_reports  # noqa: E402

ZLBENCH = [sys.executable, "-m", "zlbench"]
# A GPU counts as busy when its memory rises this much above what it held before the run.
BUSY_MEMORY_MIB = 256
SAMPLE_EVERY_S = 0.5


def _smi(query: str, what: str = "--query-gpu") -> List[List[str]]:
    try:
        out = subprocess.run(["nvidia-smi", f"{what}={query}", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [[c.strip() for c in line.split(",")] for line in out.splitlines() if line.strip()]


class GpuSampler:
    """nvidia-smi every SAMPLE_EVERY_S in a thread: per GPU, peak memory and utilisation,
    and the compute processes seen on it. Without nvidia-smi it records nothing."""

    def __init__(self):
        self.uuid_to_index = {uuid: idx for idx, uuid in _smi("index,uuid")}
        self.baseline = {idx: int(mem) for idx, mem in _smi("index,memory.used") if mem.isdigit()}
        self.peak_mem: Dict[str, int] = {}
        self.peak_util: Dict[str, int] = {}
        self.busy_samples: Dict[str, int] = {}
        self.pids: Dict[str, set] = {}
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            for idx, mem, util in _smi("index,memory.used,utilization.gpu"):
                if not (mem.isdigit() and util.isdigit()):
                    continue
                self.peak_mem[idx] = max(self.peak_mem.get(idx, 0), int(mem))
                self.peak_util[idx] = max(self.peak_util.get(idx, 0), int(util))
                if int(util) > 0:
                    self.busy_samples[idx] = self.busy_samples.get(idx, 0) + 1
            for row in _smi("gpu_uuid,pid", "--query-compute-apps"):
                if len(row) == 2 and row[0] in self.uuid_to_index:
                    self.pids.setdefault(self.uuid_to_index[row[0]], set()).add(row[1])
            self.samples += 1
            self._stop.wait(SAMPLE_EVERY_S)

    def __enter__(self) -> "GpuSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=15)

    def report(self) -> dict:
        gpus = sorted(set(self.baseline) | set(self.peak_mem), key=int)
        per_gpu = {
            g: {"baseline_mib": self.baseline.get(g), "peak_mib": self.peak_mem.get(g),
                "peak_util_pct": self.peak_util.get(g), "samples_util_above_0": self.busy_samples.get(g, 0),
                "compute_pids_seen": len(self.pids.get(g, ()))}
            for g in gpus
        }
        busy = [g for g in gpus
                if (self.peak_mem.get(g, 0) - self.baseline.get(g, 0)) >= BUSY_MEMORY_MIB
                or self.pids.get(g)]
        return {"samples": self.samples, "per_gpu": per_gpu, "busy_gpus": busy}


def run_batch(args, devices: str, out: Path) -> dict:
    tag = "gpus-" + devices.replace(",", "_")
    batch_dir = out / tag
    shutil.rmtree(batch_dir, ignore_errors=True)
    cmd = ZLBENCH + ["batch", *corpus_args(args), "--backend", args.backend, "--ops", args.ops,
                     "--devices", devices, "--level", args.level,
                     "--isolate-tuner-cache", "1", "--progress", "plain", "--out", str(batch_dir)]
    if args.dtypes:
        cmd += ["--dtypes", args.dtypes]
    print(f"\n== batch on devices {devices}: {' '.join(cmd)}", flush=True)
    started = time.monotonic()
    with GpuSampler() as sampler, (out / f"{tag}.log").open("w") as log:
        rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=REPO).returncode
    wall = time.monotonic() - started
    rows = list(StatusFile(batch_dir).read().values())
    makespan: Dict[str, float] = {}
    ops_on: Dict[str, List[str]] = {}
    statuses: Dict[str, int] = {}
    for row in rows:
        dev = row["device"]
        makespan[dev] = round(makespan.get(dev, 0.0) + float(row["total_s"] or 0), 1)
        ops_on.setdefault(dev, []).append(row["operator"])
        statuses[row["status"]] = statuses.get(row["status"], 0) + 1
    gpus = sampler.report()
    asked = [d for d in devices.split(",") if d]
    outside = [g for g in gpus["busy_gpus"] if g not in asked]
    result = {
        "devices": asked, "exit_code": rc, "wall_s": round(wall, 1), "operators": len(rows),
        "statuses": statuses, "makespan_s_per_device": makespan, "ops_per_device": ops_on,
        "gpus": gpus, "busy_outside_devices": outside,
    }
    print(json.dumps({k: v for k, v in result.items() if k != "gpus"}, indent=1), flush=True)
    print(f"GPUs seen busy: {gpus['busy_gpus']} (asked for {asked}); "
          f"outside the set: {outside or 'none'}", flush=True)
    return result


def part_batch(args) -> int:
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    results = [run_batch(args, devices, out) for devices in args.devices]
    one = next((r for r in results if len(r["devices"]) == 1), None)
    for r in results:
        if one is not None and r is not one and r["wall_s"]:
            r["speedup_vs_one_gpu"] = round(one["wall_s"] / r["wall_s"], 2)
    (out / "batch.json").write_text(json.dumps(results, indent=2) + "\n")
    print("\ndevices   ops  wall s   makespan per device        speedup")
    for r in results:
        spans = ", ".join(f"{d}: {s}" for d, s in sorted(r["makespan_s_per_device"].items()))
        print(f"{','.join(r['devices']):<9} {r['operators']:>4} {r['wall_s']:>7}   {spans:<26} "
              f"{r.get('speedup_vs_one_gpu', '-')}")
    ok = all(r["exit_code"] == 0 and not r["busy_outside_devices"] for r in results)
    return 0 if ok else 1


def part_warmup(args) -> int:
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    results = []
    for n in [int(x) for x in args.gpus.split(",") if x.strip()]:
        run_dir = out / f"warmup-{n}"
        shutil.rmtree(run_dir, ignore_errors=True)
        cmd = ZLBENCH + ["run", *corpus_args(args), "--backend", args.backend, "--op", args.op,
                         "--level", args.level, "--isolate-tuner-cache", "1",
                         "--parallel-warmup-gpus", str(n), "--run-dir", str(run_dir)]
        if args.dtypes:
            cmd += ["--dtypes", args.dtypes]
        print(f"\n== parallel warmup N={n}: {' '.join(cmd)}", flush=True)
        started = time.monotonic()
        with (out / f"warmup-{n}.log").open("w") as log:
            rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=REPO).returncode
        wall = time.monotonic() - started
        reports = read_plugin_reports(run_dir)
        pw, at = reports.get("parallel_warmup", {}), reports.get("autotune", {})
        r = {
            "n": n, "exit_code": rc, "run_wall_s": round(wall, 1),
            "sweep_wall_s": pw.get("sweep_wall_s"), "refused": pw.get("refused"),
            "shards": pw.get("shards"), "devices": pw.get("devices"),
            "shapes_per_shard": pw.get("shapes_per_shard"),
            "merged_keys": pw.get("merged_keys"), "conflicts": pw.get("conflicts"),
            "replayed": at.get("replayed"), "fell_back": at.get("fell_back"),
            "key_missing": at.get("fallback_reasons", {}).get("key_missing", 0),
        }
        results.append(r)
        print(json.dumps(r), flush=True)
    base = next((r for r in results if r["n"] == 1 and r["sweep_wall_s"]), None)
    for r in results:
        if base and r["sweep_wall_s"]:
            r["sweep_speedup_vs_1"] = round(base["sweep_wall_s"] / r["sweep_wall_s"], 2)
    (out / "warmup.json").write_text(json.dumps(results, indent=2) + "\n")
    print("\n  N  sweep s  run s  merged keys  conflicts  replayed  fell back  key_missing  speedup")
    for r in results:
        print(f"{r['n']:>3} {r['sweep_wall_s']!s:>8} {r['run_wall_s']:>6} {r['merged_keys']!s:>12} "
              f"{r['conflicts']!s:>10} {r['replayed']!s:>9} {r['fell_back']!s:>10} "
              f"{r['key_missing']!s:>12} {r.get('sweep_speedup_vs_1', '-')!s:>8}")
    ok = all(r["exit_code"] == 0 and not r["refused"] and r["key_missing"] == 0 for r in results)
    return 0 if ok else 1


def corpus_args(args) -> List[str]:
    # Without a checkout: the bundled sample corpus (a dry run of this script on CPU).
    return ["--flaggems-dir", str(args.flaggems_dir)] if args.flaggems_dir else []


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="part", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--flaggems-dir", type=Path, default=os.environ.get("FLAGGEMS_DIR"),
                        help="FlagGems checkout (parent of benchmark/); default $FLAGGEMS_DIR, "
                        "else the bundled sample corpus")
    common.add_argument("--backend", default="cuda")
    common.add_argument("--level", default="core", choices=["core", "comprehensive"])
    common.add_argument("--dtypes", default="float16", help="comma list, '' for each op's own")
    common.add_argument("--out", type=Path, default=Path("multi_gpu_runs"))
    b = sub.add_parser("batch", parents=[common], help="one batch per device set")
    b.add_argument("--ops", required=True, help="comma-separated operator slice")
    b.add_argument("--devices", action="append", required=True,
                   help="a device set, in your numbering (repeatable: 1, then 0,1)")
    w = sub.add_parser("warmup", parents=[common], help="parallel warmup sweep for N GPUs")
    w.add_argument("--op", default="mm")
    w.add_argument("--gpus", default="1,2", help="comma list of N")
    args = ap.parse_args(argv)
    return part_batch(args) if args.part == "batch" else part_warmup(args)


if __name__ == "__main__":
    sys.exit(main())

"""Check autotune record/replay and tuner-cache isolation on a GPU with real FlagGems.

Runs ``zlbench run --flaggems-dir DIR --op OP`` several times into one output dir and
prints what each run recorded, replayed and compiled, then PASS/FAIL per claim:

  record_cold     record, private FlagGems DB that starts empty (it tunes)
  record_warm     record again on that now-warm DB: LibTuner takes its cached branch
                  and writes nothing, yet every key must still be recorded
  replay          replay record_warm's records in a fresh DB: zero fallbacks, the same
                  configs, latency reproduced, and only the winners compiled
  replay_other    OTHER_OP replaying OP's records: its keys are missing (key_missing)
  isolated        record with --isolate-tuner-cache 1 while the private DB is warm:
                  tuner_cache=isolated, nothing comes from the warm DB, and its own
                  (kept) Triton cache compiles like a fresh one, not the warm few

Compile counts are the kernel variants each run left in its own TRITON_CACHE_DIR:
record_cold is what a fresh (isolated) cache compiles, record_warm what a shared warm
one compiles. A small shape file (two BLAS shapes) keeps mm tuning to minutes.

Usage:
  python benchmarks/autotune_replay_check.py --flaggems-dir $FLAGGEMS_DIR \\
      [--op mm] [--other-op addmm] [--dtypes float16] [--out DIR] [--full-shapes] \\
      [--skip-isolated] [--device N] [--analyze-only]
A step whose run dir already holds .complete is not run again, so calling the script
again with the same --out resumes after a time limit. Exit status 0 when every check
passed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import yaml

from zlbench import autotune_records as ar
from zlbench import rundir
from zlbench.rundir import read_identity, read_plugin_reports
from zlbench.runlog import parse_log
from zlbench.tuner_cache import compare_triton_caches, scan_triton_cache

SMALL_BLAS_SHAPES = [[2, 384, 384, 384], [16, 1024, 1024, 1024]]


def small_shape_file(flaggems_dir: Path, out: Path) -> Path:
    """The checkout's core_shapes.yaml with BlasBenchmark cut to two shapes."""
    data = yaml.safe_load((flaggems_dir / "benchmark" / "core_shapes.yaml").read_text())
    data.setdefault("BlasBenchmark", {})["shapes"] = SMALL_BLAS_SHAPES
    path = out / "small_shapes.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


class Step:
    def __init__(self, name: str, op: str, run_dir: Path, triton_dir: Optional[Path]):
        self.name, self.op, self.run_dir, self.triton_dir = name, op, run_dir, triton_dir
        self.rc: Optional[int] = None
        self.seconds = 0.0

    @property
    def identity(self) -> Dict[str, Any]:
        return read_identity(self.run_dir)

    @property
    def autotune(self) -> Dict[str, Any]:
        return read_plugin_reports(self.run_dir).get("autotune", {})

    @property
    def tuner_cache(self) -> str:
        return str(self.identity.get("tuner_cache"))

    def records(self) -> Dict[str, ar.KernelRecords]:
        return ar.load_records(self.run_dir / rundir.RECORDS_DIR)[0]

    def variants(self) -> Optional[int]:
        # An isolated run's private cache is where run_identity says it kept it.
        kept = self.identity.get("triton_cache_dir")
        where = self.triton_dir or (Path(kept) if kept else None)
        if where is None or not where.is_dir():
            return None
        return len(scan_triton_cache(where))

    def latencies(self) -> Dict[Tuple[str, str, str], float]:
        log = rundir.run_log_path(self.run_dir)
        if not log.is_file():
            return {}
        rows = parse_log(log.read_text(errors="replace"), str(log)).rows
        return {r.key: r.gems_ms for r in rows
                if r.status == "SUCCESS" and r.gems_ms}


def run_step(args, step: Step, env_extra: Dict[str, str], extra: List[str]) -> Step:
    cmd = [sys.executable, "-m", "zlbench", "run", "--flaggems-dir", str(args.flaggems_dir),
           "--op", step.op, "--run-dir", str(step.run_dir), "--level", args.level]
    if args.dtypes:
        cmd += ["--dtypes", args.dtypes]
    if args.shape_file:
        cmd += ["--shape-file", str(args.shape_file)]
    if args.device is not None:
        cmd += ["--device", str(args.device)]
    cmd += extra
    if args.analyze_only or rundir.is_complete(step.run_dir):
        return step  # already measured: rerunning into the same --out resumes
    env = {k: v for k, v in os.environ.items() if k not in ("FLAGGEMS_DB_URL", "REPLAY_FROM")}
    env.update(env_extra)
    print(f"--- {step.name}: {' '.join(cmd[2:])}", flush=True)
    started = time.monotonic()
    with open(args.out / f"{step.name}.console.log", "w") as console:
        step.rc = subprocess.call(cmd, env=env, stdout=console, stderr=subprocess.STDOUT)
    step.seconds = time.monotonic() - started
    print(f"    exit {step.rc} in {step.seconds:.0f} s", flush=True)
    return step


def describe(step: Step) -> str:
    a = step.autotune
    origins = a.get("recorded_origins", {})
    parts = [f"{step.name:<13} op={step.op:<6} rc={step.rc} {step.seconds:6.0f}s",
             f"tuner_cache={step.tuner_cache}",
             f"recorded={a.get('recorded_keys')} keys/{a.get('recorded_kernels')} kernels",
             "origins=" + ",".join(f"{k}:{v}" for k, v in sorted(origins.items()))]
    if a.get("mode") == "replay":
        parts.append(f"replayed={a.get('replayed')} fell_back={a.get('fell_back')} "
                     f"reasons={a.get('fallback_reasons')} unused={a.get('records_unused')}")
    parts.append(f"compiled_variants={step.variants()}")
    parts.append(f"rows={len(step.latencies())}")
    return "  ".join(parts)


def kernel_table(records: Dict[str, ar.KernelRecords]) -> List[str]:
    lines = []
    for kernel, rec in sorted(records.items()):
        hooked = sum(1 for e in rec.entries.values() if e["config"].get("has_pre_hook"))
        lines.append(f"    {rec.tuner:<9} {kernel}: {len(rec.entries)} keys, {hooked} with pre_hook")
    return lines


def configs_by_key(records: Dict[str, ar.KernelRecords]) -> Dict[Tuple[str, str], Any]:
    return {(k, kid): e["config"] for k, r in records.items() for kid, e in r.entries.items()}


def latency_drift(a: Step, b: Step) -> Tuple[int, Optional[float], Optional[float]]:
    la, lb = a.latencies(), b.latencies()
    ratios = [lb[k] / la[k] - 1 for k in la if k in lb and la[k] > 0]
    if not ratios:
        return 0, None, None
    return len(ratios), statistics.median(abs(r) for r in ratios), max(abs(r) for r in ratios)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--flaggems-dir", type=Path, default=os.environ.get("FLAGGEMS_DIR"))
    p.add_argument("--op", default="mm")
    p.add_argument("--other-op", default="addmm")
    p.add_argument("--level", default="core")
    p.add_argument("--dtypes", default="float16")
    p.add_argument("--device", default=None)
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--full-shapes", action="store_true", help="the checkout's own shapes")
    p.add_argument("--skip-isolated", action="store_true")
    p.add_argument("--analyze-only", action="store_true",
                   help="read the runs already in --out instead of running them")
    p.add_argument("--latency-tolerance", type=float, default=0.05,
                   help="median |replay/record - 1| allowed (default 0.05)")
    args = p.parse_args()
    if not args.flaggems_dir:
        p.error("--flaggems-dir (or FLAGGEMS_DIR) is required")
    args.flaggems_dir = args.flaggems_dir.resolve()
    args.out = (args.out or Path(tempfile.mkdtemp(prefix="zl-autotune-check-"))).resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    args.shape_file = None if args.full_shapes else small_shape_file(args.flaggems_dir, args.out)
    print(f"output: {args.out}")

    shared_db = args.out / "flaggems_shared"
    tri = args.out / "triton"

    def step(name, op, triton=True):
        return Step(name, op, args.out / name, tri / name if triton else None)

    cold = run_step(args, step("record_cold", args.op),
                    {"FLAGGEMS_CACHE_DIR": str(shared_db), "TRITON_CACHE_DIR": str(tri / "record_cold")},
                    ["--isolate-tuner-cache", "0"])
    warm = run_step(args, step("record_warm", args.op),
                    {"FLAGGEMS_CACHE_DIR": str(shared_db), "TRITON_CACHE_DIR": str(tri / "record_warm")},
                    ["--isolate-tuner-cache", "0"])
    replay = run_step(args, step("replay", args.op),
                      {"FLAGGEMS_CACHE_DIR": str(args.out / "flaggems_replay"),
                       "TRITON_CACHE_DIR": str(tri / "replay")},
                      ["--isolate-tuner-cache", "0", "--replay-from", str(warm.run_dir)])
    other = run_step(args, step("replay_other", args.other_op, triton=False), {},
                     ["--isolate-tuner-cache", "1", "--replay-from", str(warm.run_dir)])
    steps = [cold, warm, replay, other]
    isolated = None
    if not args.skip_isolated:
        isolated = run_step(args, step("isolated", args.op, triton=False),
                            {"FLAGGEMS_CACHE_DIR": str(shared_db), "ZL_KEEP_TRITON_CACHE": "1"},
                            ["--isolate-tuner-cache", "1"])
        steps.append(isolated)

    print("\n=== runs")
    for s in steps:
        print(describe(s))
    print(f"\n=== kernels recorded by {warm.name}")
    warm_recs = warm.records()
    print("\n".join(kernel_table(warm_recs)) or "    (none)")

    checks: List[Tuple[str, bool, str]] = []

    def check(name: str, ok: bool, detail: str) -> None:
        checks.append((name, ok, detail))

    cold_keys, warm_keys = set(configs_by_key(cold.records())), set(configs_by_key(warm_recs))
    check("record on a warm DB captures every key", bool(warm_keys) and warm_keys == cold_keys,
          f"cold {len(cold_keys)} keys, warm {len(warm_keys)}")
    lib_origins = {e["origin"] for r in warm_recs.values() if r.tuner == ar.LIBTUNER
                   for e in r.entries.values()}
    check("warm LibTuner keys came from the DB (cached)", lib_origins == {ar.ORIGIN_CACHED},
          f"origins {sorted(lib_origins)}")
    kinds = sorted({r.tuner for r in warm_recs.values()})
    check("LibTuner kernels recorded", ar.LIBTUNER in kinds, f"tuner kinds {kinds}")
    hooked = sum(1 for r in warm_recs.values() for e in r.entries.values()
                 if e["config"].get("has_pre_hook"))
    print(f"\nINFO pre_hook configs recorded: {hooked} (hopper TMA mm carries one)")

    ra = replay.autotune
    check("replay: zero fallbacks", ra.get("fell_back") == 0 and ra.get("replayed") == len(warm_keys),
          f"replayed {ra.get('replayed')} of {len(warm_keys)}, fell back {ra.get('fell_back')} "
          f"{ra.get('fallback_reasons')}")
    same = configs_by_key(replay.records())
    mismatched = [k for k, cfg in configs_by_key(warm_recs).items() if same.get(k) != cfg]
    check("replay ran the recorded configs", not mismatched, f"{len(mismatched)} keys differ")
    n, med, worst = latency_drift(warm, replay)
    n0, med0, worst0 = latency_drift(cold, warm)
    check("replay reproduces latency", med is not None and med <= args.latency_tolerance,
          f"{n} rows, median |drift| {med}, max {worst} (record vs record: median {med0}, max {worst0})")
    oa = other.autotune
    reasons = oa.get("fallback_reasons") or {}
    check(f"{args.other_op} replaying {args.op}'s records reports key_missing",
          reasons.get(ar.KEY_MISSING, 0) > 0, f"replayed {oa.get('replayed')}, reasons {reasons}")
    vc, vw, vr = cold.variants(), warm.variants(), replay.variants()
    vi = isolated.variants() if isolated is not None else None
    print(f"\nINFO compiled variants: fresh cache {vc}, shared warm cache {vw}, replay {vr}, "
          f"isolated on the warm DB {vi}")
    check("a shared warm DB compiles fewer variants than a fresh one",
          vc is not None and vw is not None and vw < vc, f"fresh {vc}, shared warm {vw}")
    live = compare_triton_caches(tri / "record_cold", tri / "replay")
    print(f"INFO liveness, same compiler on both sides: {live.summary()}")
    check("liveness check finds the same compiler's kernels identical", live.identical, live.verdict)
    if isolated is not None:
        io = isolated.autotune.get("recorded_origins", {})
        check("--isolate-tuner-cache 1 ignores the warm DB",
              isolated.tuner_cache == "isolated" and not io.get(ar.ORIGIN_CACHED)
              and isolated.autotune.get("recorded_keys", 0) > 0,
              f"tuner_cache={isolated.tuner_cache}, origins {io}")
        check("an isolated run compiles as much as a fresh cache, not the shared warm few",
              vi is not None and vw is not None and vi > vw, f"isolated {vi}, shared warm {vw}, fresh {vc}")

    print("\n=== checks")
    for name, ok, detail in checks:
        print(f"{'PASS' if ok else 'FAIL'}  {name}: {detail}")
    (args.out / "check.json").write_text(json.dumps(
        {"checks": [{"name": n, "ok": ok, "detail": d} for n, ok, d in checks],
         "runs": {s.name: {"rc": s.rc, "seconds": round(s.seconds, 1), "autotune": s.autotune,
                           "compiled_variants": s.variants(), "tuner_cache": s.tuner_cache}
                  for s in steps},
         "liveness": live.to_json()}, indent=2, default=str))
    print(f"\nfull results: {args.out / 'check.json'}")
    return 0 if all(ok for _, ok, _ in checks) else 1


if __name__ == "__main__":
    sys.exit(main())

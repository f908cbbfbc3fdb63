"""Cold caches against warm, with the parallel compile of autotune candidates on and off.

On one GPU with a FlagGems checkout (FLAGGEMS_DIR), in one call, three `zlbench batch`
passes over the same operators (default: the autotune-heavy baddbmm, bmm, addmm, mm,
softmax, layer_norm, conv2d), each one batch:

  cold-on   --compile-workers N (default 0: auto) on a fresh TRITON_CACHE_DIR and
            FlagGems tuning DB of its own (<out>/cache-cold-on): the autotuners'
            candidates compile in the pool;
  cold-off  the same with --compile-workers 1 (triton's own serial compile) on fresh
            caches of its own (<out>/cache-cold-off, removed after the pass);
  warm      cold-on's caches again: nothing left to compile or tune.

The cold passes' caches are isolated per pass: an operator sharing a kernel with one
measured before it in the same pass finds it compiled (alike with the pool on and off).
--isolate-per-operator gives every operator's run its own fresh caches instead
(--isolate-tuner-cache 1); the warm pass then needs a pass that fills shared caches
first (`fill`, added by itself), one more batch of GPU time.

It prints and writes (<out>/cold_warm.json, rewritten after every pass, and
<out>/cold_warm.txt) per operator: the cold wall with the pool on and off, the warm
wall, cold/warm for both, compile_s and tune_s of each cold pass (ops_status.csv,
from the autotune plugin's clock), and whether the autotune records of cold-on and
cold-off chose the same configs (`same`, or `N/M keys differ`: near-equal configs can
swap between any two runs; `zlbench summary --ab` of the two cold passes, saved as
ab_cold.txt, says whether the rows agree within the noise). Goal (issue 26): cold-on /
warm <= 1.5 on these operators.

Each pass is its own batch dir under --out; a pass already in cold_warm.json is not run
again (so the passes can be spread over several calls: --passes cold-on,cold-off, then
--passes warm); --redo runs them anyway. --timeout bounds each batch: at the limit
the batch is interrupted (SIGINT, its own report), and its finished operators count.

Usage (H200):
  python benchmarks/cold_warm.py --flaggems-dir $FLAGGEMS_DIR --device 0 \\
      --out /tmp/cold-warm [--ops baddbmm,bmm] [--workers 0] [--timeout 540]
On CPU (a smoke run over the bundled sample, no compile figures): --smoke.
Exit status 0 when every pass ran and every operator was measured in all of them.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # this checkout's zlbench, here and in every batch
HEAVY = ("baddbmm", "bmm", "addmm", "mm", "softmax", "layer_norm", "conv2d")
SMOKE_OPS = ("mm",)
PASSES = ("cold-on", "cold-off", "fill", "warm")  # fill: only with --isolate-per-operator
GOAL = 1.5
RESULTS = "cold_warm.json"
SIGINT_GRACE_S = 30.0  # then SIGKILL: a batch stops its attempts in seconds


def pass_command(args, name: str, out: Path) -> List[str]:
    workers = "1" if name == "cold-off" else str(args.workers)
    per_operator = args.isolate_per_operator and name.startswith("cold")
    cmd = [sys.executable, "-m", "zlbench", "batch", "--backend", args.backend, "--devices", args.device,
           "--ops", ",".join(args.ops), "--progress", "plain", "--dismiss", "none", "--retries", "0",
           "--fallback-dtypes", "none", "--timeout", str(args.op_timeout), "--out", str(out),
           "--isolate-tuner-cache", "1" if per_operator else "0",
           "--compile-workers", workers]
    if args.flaggems_dir:
        cmd += ["--flaggems-dir", args.flaggems_dir]
    if args.dtypes:
        cmd += ["--dtypes", args.dtypes]
    return cmd


def cache_of(args, name: str) -> Optional[Path]:
    """The pass's shared cache dir (None: every run isolates its own)."""
    if name.startswith("cold"):
        return None if args.isolate_per_operator else args.out / f"cache-{name}"
    if name in ("fill", "warm"):
        return args.out / ("cache-fill" if args.isolate_per_operator else "cache-cold-on")
    return None


def pass_env(args, name: str) -> Dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    cache = cache_of(args, name)
    if cache is not None:
        env["TRITON_CACHE_DIR"] = str(cache / "triton")
        env["FLAGGEMS_CACHE_DIR"] = str(cache / "flaggems")
        env.pop("FLAGGEMS_DB_URL", None)  # it would win over FLAGGEMS_CACHE_DIR
    return env


def fresh_cache(args, name: str) -> None:
    """A cold pass (and fill) starts on empty caches; warm on what its source left."""
    cache = cache_of(args, name)
    if cache is None:
        return
    if name != "warm":
        shutil.rmtree(cache, ignore_errors=True)
    (cache / "triton").mkdir(parents=True, exist_ok=True)
    (cache / "flaggems").mkdir(parents=True, exist_ok=True)


def run_pass(args, name: str) -> Dict[str, object]:
    out = args.out / name
    cmd = pass_command(args, name, out)
    print(f"== {name}: {' '.join(cmd[2:])}", flush=True)
    out.mkdir(parents=True, exist_ok=True)
    fresh_cache(args, name)
    log_path = args.out / f"{name}.log"
    started = time.monotonic()
    timed_out = False
    with open(log_path, "wb") as log:
        child = subprocess.Popen(cmd, env=pass_env(args, name), stdout=log, stderr=subprocess.STDOUT,
                                 start_new_session=True)
        try:
            rc = child.wait(timeout=args.timeout)
        except (subprocess.TimeoutExpired, KeyboardInterrupt) as stop:
            # At --timeout, and when this script is stopped (Ctrl-C, or SIGTERM from
            # `timeout`, raised here as KeyboardInterrupt): the batch runs in a session
            # of its own and would go on measuring beside whatever runs next.
            timed_out = isinstance(stop, subprocess.TimeoutExpired)
            # A second Ctrl-C or SIGTERM does not cut the clean-up short.
            held = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
            os.killpg(child.pid, signal.SIGINT)  # the batch stops its attempts and reports
            try:
                rc = child.wait(timeout=SIGINT_GRACE_S)
            except subprocess.TimeoutExpired:
                os.killpg(child.pid, signal.SIGKILL)
                rc = child.wait()
            # Whatever of the batch outlived it (attempts run in sessions of their own)
            # would share the GPU with the next pass: stop it by the batch's tag.
            from zlbench import proc

            left = proc.kill_tagged("ZL_BATCH_DIR", str(out), 5.0)
            if left:
                print(f"   stopped {len(left)} leftover process(es) of the {name} batch", flush=True)
            for sig, handler in held.items():
                signal.signal(sig, handler)
            if not timed_out:
                print(f"   {name}: stopped with its batch", flush=True)
                raise
    wall = time.monotonic() - started
    if name == "cold-off" and cache_of(args, name) is not None:
        shutil.rmtree(cache_of(args, name), ignore_errors=True)  # nothing reads it again
    tail = log_path.read_text(errors="replace").splitlines()[-6:]
    print("\n".join(tail), flush=True)
    return {"dir": str(out), "exit": rc, "timed_out": timed_out, "wall_s": round(wall, 1),
            "ops": read_rows(out)}


def _num(value) -> Optional[float]:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def read_rows(batch_dir: Path) -> Dict[str, Dict[str, object]]:
    path = batch_dir / "ops_status.csv"
    if not path.is_file():
        return {}
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    keep = ("duration_s", "first_call_s", "measure_s", "compile_s", "tune_s")
    return {r["operator"]: {"status": r.get("status"), **{k: _num(r.get(k)) for k in keep}} for r in rows}


def records_agree(on_dir: Path, off_dir: Path) -> str:
    """Whether the two cold passes' autotune records chose the same config per key."""
    from zlbench import autotune_records as ar

    on, _ = ar.load_records(on_dir / "autotune_records")
    off, _ = ar.load_records(off_dir / "autotune_records")
    keys = differ = one_side = 0
    for kernel in set(on) | set(off):
        a = on[kernel].entries if kernel in on else {}
        b = off[kernel].entries if kernel in off else {}
        for kid in set(a) | set(b):
            if kid not in a or kid not in b:
                one_side += 1
                continue
            keys += 1
            differ += ar.config_id(a[kid]["config"]) != ar.config_id(b[kid]["config"])
    if not keys and not one_side:
        return "no records"
    text = "same" if not differ else f"{differ}/{keys} keys differ"
    return text + (f", {one_side} on one side only" if one_side else "")


def ratio(a: Optional[float], b: Optional[float]) -> Optional[float]:
    return round(a / b, 2) if a is not None and b else None


def table(results: dict, args) -> List[dict]:
    passes = results["passes"]
    rows = []
    for op in args.ops:
        cell = {p: (passes.get(p) or {}).get("ops", {}).get(op) or {} for p in PASSES}
        on, off, warm = (cell[p].get("duration_s") for p in ("cold-on", "cold-off", "warm"))
        row = {
            "operator": op,
            "status": {p: cell[p].get("status") for p in PASSES if cell[p]},
            "cold_on_s": on, "cold_off_s": off, "warm_s": warm,
            "cold_on_over_warm": ratio(on, warm), "cold_off_over_warm": ratio(off, warm),
            "compile_on_s": cell["cold-on"].get("compile_s"), "compile_off_s": cell["cold-off"].get("compile_s"),
            "tune_on_s": cell["cold-on"].get("tune_s"), "tune_off_s": cell["cold-off"].get("tune_s"),
            "warm_compile_s": cell["warm"].get("compile_s"), "warm_tune_s": cell["warm"].get("tune_s"),
            "records": None,
            "rows_off_to_on": None,
        }
        if passes.get("cold-on") and passes.get("cold-off"):
            row["records"] = records_agree(args.out / "cold-on" / op, args.out / "cold-off" / op)
            row["rows_off_to_on"] = rows_verdict((results.get("ab_cold") or {}).get(op))
        rows.append(row)
    return rows


def render(rows: List[dict]) -> str:
    def f(value, width=7):
        return f"{'-' if value is None else (f'{value:.1f}' if isinstance(value, float) else value):>{width}}"

    head = (f"{'operator':<12} {'cold on':>7} {'cold off':>8} {'warm':>7} {'on/warm':>7} {'off/warm':>8} "
            f"{'compile on/off':>15} {'tune on/off':>13}  records; rows off->on")
    lines = [head, "-" * len(head)]
    for r in rows:
        ratio_on = "-" if r["cold_on_over_warm"] is None else f"{r['cold_on_over_warm']:.2f}"
        ratio_off = "-" if r["cold_off_over_warm"] is None else f"{r['cold_off_over_warm']:.2f}"
        lines.append(
            f"{r['operator']:<12} {f(r['cold_on_s'])} {f(r['cold_off_s'], 8)} {f(r['warm_s'])} {ratio_on:>7} "
            f"{ratio_off:>8} {f(r['compile_on_s'])}/{f(r['compile_off_s'])} {f(r['tune_on_s'], 6)}/"
            f"{f(r['tune_off_s'], 6)}  {r['records'] or '-'}; {r['rows_off_to_on'] or '-'}"
        )
    met = [r for r in rows if r["cold_on_over_warm"] is not None]
    if met:
        ok = [r["operator"] for r in met if r["cold_on_over_warm"] <= GOAL]
        lines.append(f"goal cold/warm <= {GOAL} with the pool on: {len(ok)} of {len(met)} operators"
                     + (f" (not: {', '.join(r['operator'] for r in met if r['operator'] not in ok)})"
                        if len(ok) < len(met) else ""))
    return "\n".join(lines)


def write(results: dict, args) -> None:
    results["table"] = table(results, args)
    path = args.out / RESULTS
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(results, indent=2))
    tmp.replace(path)


def ab_cold(args) -> Dict[str, dict]:
    """`zlbench summary --ab cold-off cold-on` (ab_cold.txt, ab_cold.json): do the rows
    agree within the noise? Returns its per-operator ranges by operator."""
    base = [sys.executable, "-m", "zlbench", "summary", "--ab", str(args.out / "cold-off"), str(args.out / "cold-on")]
    env = pass_env(args, "ab")
    text = subprocess.run(base, capture_output=True, text=True, env=env)
    (args.out / "ab_cold.txt").write_text(text.stdout + text.stderr)
    got = subprocess.run(base + ["--format", "json"], capture_output=True, text=True, env=env)
    try:
        doc = json.loads(got.stdout)
    except ValueError:
        return {}
    (args.out / "ab_cold.json").write_text(json.dumps(doc, indent=2))
    return {r.get("name"): r for r in doc.get("by_op") or [] if isinstance(r, dict)}


def rows_verdict(ranges: Optional[dict]) -> Optional[str]:
    if not ranges:
        return None
    counts = ", ".join(f"{ranges.get(k, 0)} {k}" for k in ("same", "slower", "faster", "unknown") if ranges.get(k))
    median = ranges.get("median")
    return counts + (f", median {100 * median:+.1f}%" if isinstance(median, (int, float)) else "")


def parse(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--flaggems-dir", default=os.environ.get("FLAGGEMS_DIR"))
    parser.add_argument("--backend", default="cuda")
    parser.add_argument("--device", default="0")
    parser.add_argument("--ops", default=None, help=f"comma list (default: {','.join(HEAVY)})")
    parser.add_argument("--dtypes", default=None, help="default: each operator's own")
    parser.add_argument("--workers", default="0", help="--compile-workers of the pool-on passes (0: auto)")
    parser.add_argument("--passes", default="cold-on,cold-off,warm", help=f"which of {','.join(PASSES)}")
    parser.add_argument("--isolate-per-operator", action="store_true",
                        help="cold passes: fresh caches per operator run, not per pass (adds a fill pass)")
    parser.add_argument("--timeout", type=float, default=540.0, help="seconds per batch (pass)")
    parser.add_argument("--op-timeout", type=float, default=900.0, help="the batch's --timeout per operator")
    parser.add_argument("--redo", action="store_true", help="run passes already in cold_warm.json again")
    parser.add_argument("--smoke", action="store_true",
                        help="CPU, the bundled sample corpus (default op: mm), float32")
    parser.add_argument("--out", type=Path, default=Path(f"runs/cold-warm-{time.strftime('%Y%m%d-%H%M%S')}"))
    args = parser.parse_args(argv)
    args.out = args.out.expanduser().resolve()  # as the batch names its dir (ZL_BATCH_DIR)
    if args.smoke:
        args.backend, args.flaggems_dir = "cpu", None
        args.dtypes = args.dtypes or "float32"
    default_ops = SMOKE_OPS if args.smoke else HEAVY
    args.ops = [o for o in (args.ops.split(",") if args.ops else default_ops) if o]
    args.passes = [p for p in args.passes.split(",") if p]
    bad = [p for p in args.passes if p not in PASSES]
    if bad:
        parser.error(f"--passes: unknown {', '.join(bad)}; choose from {','.join(PASSES)}")
    if "fill" in args.passes and not args.isolate_per_operator:
        parser.error("--passes fill: only with --isolate-per-operator (warm reuses cold-on's caches)")
    if (args.isolate_per_operator and "warm" in args.passes and "fill" not in args.passes
            and not (args.out / "cache-fill").is_dir()):
        args.passes.insert(args.passes.index("warm"), "fill")  # warm needs filled caches
    if not args.isolate_per_operator and "warm" in args.passes and "cold-on" not in args.passes \
            and not (args.out / "cache-cold-on" / "triton").is_dir():
        parser.error("--passes warm reuses cold-on's caches: run cold-on first (same --out)")
    if not args.smoke and args.backend != "cpu" and not args.flaggems_dir:
        parser.error("--flaggems-dir (or FLAGGEMS_DIR) is needed; --smoke runs the sample on CPU")
    return args


def main(argv=None) -> int:
    args = parse(argv)
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # stopped as by Ctrl-C: the batch too
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / RESULTS
    results = json.loads(path.read_text()) if path.is_file() else {"passes": {}}
    results["settings"] = {"ops": args.ops, "backend": args.backend, "dtypes": args.dtypes,
                           "workers": args.workers, "flaggems_dir": args.flaggems_dir}
    for name in PASSES:
        if name not in args.passes or (name in results["passes"] and not args.redo):
            continue
        results["passes"][name] = run_pass(args, name)
        write(results, args)
    if results["passes"].get("cold-on") and results["passes"].get("cold-off"):
        results["ab_cold"] = ab_cold(args)
    write(results, args)
    text = render(results["table"])
    (args.out / "cold_warm.txt").write_text(text + "\n")
    print()
    print(text)
    print(f"results: {path}")
    needed = [p for p in PASSES if p != "fill" or args.isolate_per_operator]
    done = all(results["passes"].get(p) for p in needed)
    measured = all(r["status"].get(p) == "ok" for r in results["table"] for p in needed)
    return 0 if done and measured else 1


if __name__ == "__main__":
    sys.exit(main())

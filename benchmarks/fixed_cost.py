"""Where an operator's fixed cost goes: the benchmark process profiled phase by phase.

A night's projected wall has a fixed cost per operator beside its timings: start-up,
collection, the first call, the teardown and the exit (on an H100 host about 1.4 s of
each operator's 4-7 s, 0.4-0.5 h of a 1.65 h projection). This script runs the same
operators as batches with zlbench's defaults, in passes:

  warm       unprofiled, only to fill the kernel and tuner caches (leave it out where a
             screen has just filled them)
  plain      unprofiled: the batch's own phase figures (ops_status.csv)
  profiled   with benchmarks/phase_profile_plugin.py in every benchmark process: one
             cProfile per phase (configure, collect, first_call, teardown; measure with
             --profile-measure), and each phase's wall with the profiler on

and reports, per operator, the plain pass' phases (start-up, collection, first call,
measurement, and after the session: teardown and exit); per phase, the profiled median
wall, the share of its own time by package (torch, triton, flag_gems, the corpus'
benchmark code, zlbench, pytest, yaml, the standard library, builtins) and the costliest
functions by cumulative time, all operators' profiles merged. The profiler slows Python
code more than C code: its figures say where a phase's time goes, the plain pass how long
the phase is.

Usage:
  python benchmarks/fixed_cost.py --flaggems-dir DIR --backend cuda --out /tmp/fc \\
      [--ops div_tensor,log1p,...] [--passes warm,plain,profiled,report]
  python benchmarks/fixed_cost.py --out /tmp/fc   # the bundled sample on CPU (a smoke test)
A pass whose batch dir exists is not run again; ``report`` only reads.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import pstats
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, Optional

HERE = Path(__file__).resolve().parent
PLUGIN = "phase_profile_plugin"
PASSES = ("warm", "plain", "profiled")
PHASES = ("configure", "collect", "first_call", "measure", "teardown")
# Cheap operators of FlagGems' kinds (pointwise, reduction, normalisation, BLAS, a
# host-synchronising one): their fixed cost is most of their wall.
FLAGGEMS_OPS = "div_tensor,log1p,threshold,leaky_relu,max,special_logsumexp,addr,masked_select"
SAMPLE_OPS = "abs,add,sum,softmax"


def run_pass(args, name: str) -> dict:
    """One pass as a batch: kept where its batch dir measured every operator asked for,
    resumed where it was cut short; a batch dir of other operators is refused."""
    out = args.out / name
    wanted = sorted(args.ops.split(","))
    resume = (out / "plan.json").is_file()
    if resume:
        planned = sorted(o.get("op") for o in json.loads((out / "plan.json").read_text()).get("ops", []))
        if planned != wanted:
            sys.exit(f"fixed_cost.py: {out} holds a batch of {','.join(planned)}, not of --ops "
                     f"{','.join(wanted)}: give another --out")
        status = batch_phases(out)
        if all((status.get(op) or {}).get("status") for op in wanted):
            print(f"== {name}: kept ({out})", flush=True)
            return {"ran": False}
    env = dict(os.environ)
    if name == "profiled":
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), env.get("PYTHONPATH", "")) if p)
        env["PYTEST_ADDOPTS"] = f"{env.get('PYTEST_ADDOPTS', '')} -p {PLUGIN}".strip()
        if args.profile_measure:
            env["PHASE_PROFILE_MEASURE"] = "1"
    cmd = [sys.executable, "-m", "zlbench", "batch", "--progress", "plain", "--out", str(out),
           "--timeout", str(args.timeout)]
    if resume:
        cmd += ["--resume"]  # the batch's own settings and operators, where it stopped
    else:
        cmd += ["--backend", args.backend, "--devices", args.device, "--ops", args.ops]
        if args.flaggems_dir:
            cmd += ["--flaggems-dir", args.flaggems_dir]
    print(f"== {name}: {args.ops}{' (resumed)' if resume else ''}", flush=True)
    started = time.monotonic()
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "fixed_cost.log", "a") as log:
        log.write(proc.stdout)
    print(f"   {time.monotonic() - started:.0f} s, exit {proc.returncode}", flush=True)
    return {"ran": True, "exit": proc.returncode}


def _float(value) -> Optional[float]:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def batch_phases(batch: Path) -> Dict[str, dict]:
    """Per operator of a batch: its phases from ops_status.csv, and what followed the
    pytest session (teardown and exit: the fixed cost less the start-up)."""
    path = batch / "ops_status.csv"
    if not path.is_file():
        return {}
    out = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            figures = {k: _float(row.get(k)) for k in
                       ("total_s", "startup_s", "collect_s", "first_call_s", "measure_s", "overhead_s")}
            if figures["overhead_s"] is not None and figures["startup_s"] is not None:
                figures["after_session_s"] = round(figures["overhead_s"] - figures["startup_s"], 3)
            out[row["operator"]] = {"status": row.get("status"), "run_dir": row.get("run_dir") or row["operator"],
                                    **figures}
    return out


def journal_events(batch: Path) -> Dict[str, Dict[str, dict]]:
    """Per operator, its last "attempt" and "result" events in the batch's journal."""
    from zlbench.rundir import read_journal

    out: Dict[str, Dict[str, dict]] = {}
    for event in read_journal(batch):
        if event.get("event") in ("attempt", "result") and event.get("op"):
            out.setdefault(event["op"], {})[event["event"]] = event
    return out


def launch_mode(batch: Path, attempt: Optional[dict]) -> str:
    """How the attempt's benchmark process started: "prestarted" (a spare's, its library
    imported before the run) or "plain" (forked or started at the attempt, importing it)."""
    log = batch / (attempt or {}).get("log", "-")
    if log.is_file() and re.search(r"prestarted benchmark process \d+ used", log.read_text(errors="replace")):
        return "prestarted"
    return "plain"


def spans_of(batch: Path, figures: dict) -> dict:
    path = batch / figures["run_dir"] / "phase_profile" / "spans.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def outside_pytest(batch: Path, ops: Dict[str, dict]) -> Dict[str, dict]:
    """Per operator of the profiled batch, what its pytest did not see: from the attempt's
    start (the batch's clock before it launched the attempt: the session's start less
    ``startup_s``) to pytest's loading of the conftests (``before_s``: the fork, ``zlbench
    run``'s own work, the hand-over to the benchmark process), and from pytest's
    unconfigure to the attempt's result in the journal (``after_s``: the process' exit
    and the batch's bookkeeping). Not slowed by the profiler, which runs in between."""
    events = journal_events(batch)
    out = {}
    for op, figures in ops.items():
        t = spans_of(batch, figures).get("t") or {}
        phases_json = batch / figures["run_dir"] / "plugins" / "phases.json"
        result = events.get(op, {}).get("result")
        if not ("configure" in t and "end" in t and phases_json.is_file() and result):
            continue
        session_start = (json.loads(phases_json.read_text()).get("times") or {}).get("session_start")
        if session_start is None or figures.get("startup_s") is None:
            continue
        started = session_start - figures["startup_s"]
        out[op] = {"before_s": round(t["configure"] - started, 3), "after_s": round(result["t"] - t["end"], 3)}
    return out


def package_of(filename: str, roots: Dict[str, str]) -> str:
    """The package a profiled function's file belongs to (``~``: a builtin)."""
    if filename == "~" or filename.startswith("<"):
        return "builtins"
    path = filename.replace("\\", "/")
    # The deepest root first: the bundled sample's benchmark code lies inside zlbench.
    for name, root in sorted(roots.items(), key=lambda kv: -len(kv[1] or "")):
        if root and path.startswith(root):
            return name
    for marker in ("/site-packages/", "/dist-packages/"):
        if marker in path:
            top = path.split(marker, 1)[1].split("/", 1)[0]
            top = top.split(".", 1)[0] if top.endswith(".py") else top
            return {"_pytest": "pytest", "pluggy": "pytest", "py": "pytest"}.get(top, top)
    if "/lib/python3" in path:
        return "stdlib"
    return "other"


def phase_profiles(batch: Path, ops: Dict[str, dict], roots: Dict[str, str], top: int) -> Dict[str, dict]:
    """Per phase: the profiled wall's median over operators, its own time by package and
    the costliest functions by cumulative time, every operator's profile merged. An
    operator without a row on the library's side (its first_call ran to the session's
    end, over all its timings) counts in neither first_call nor measure."""
    result = {}
    for phase in PHASES:
        spans, files = [], []
        for op, figures in ops.items():
            pdir = batch / figures["run_dir"] / "phase_profile"
            own = spans_of(batch, figures).get("spans") or {}
            if phase in ("first_call", "measure") and "measure" not in own:
                continue
            if own.get(phase) is not None:
                spans.append(own[phase])
            if (pdir / f"{phase}.pstats").is_file():
                files.append(str(pdir / f"{phase}.pstats"))
        if not spans and not files:
            continue
        entry: dict = {"operators": len(spans), "median_wall_s": round(statistics.median(spans), 4) if spans else None}
        if files:
            stats = pstats.Stats(files[0])
            for f in files[1:]:
                stats.add(f)
            by_package: Dict[str, float] = {}
            functions = []
            for (filename, line, name), (_, _, tottime, cumtime, _) in stats.stats.items():
                package = package_of(filename, roots)
                by_package[package] = by_package.get(package, 0.0) + tottime
                functions.append((cumtime, tottime, f"{package}: {Path(filename).name}:{line}({name})"))
            total = sum(by_package.values()) or 1.0
            entry["own_time_s"] = round(total, 4)
            entry["by_package"] = {k: round(v / total, 3) for k, v in
                                   sorted(by_package.items(), key=lambda kv: -kv[1])}
            entry["top_cumulative"] = [
                {"function": label, "cum_s": round(cum / len(files), 4), "own_s": round(own / len(files), 4)}
                for cum, own, label in sorted(functions, reverse=True)[:top]
            ]
            entry["per_operator"] = "cum_s and own_s are per operator (the merged profile over their count)"
        result[phase] = entry
    return result


def report(args) -> dict:
    import zlbench

    roots = {"zlbench": str(Path(zlbench.__file__).resolve().parent) + "/"}
    if args.flaggems_dir:
        fg = Path(args.flaggems_dir).resolve()
        roots.update({"flag_gems": f"{fg / 'src'}/", "benchmark (corpus)": f"{fg / 'benchmark'}/"})
    else:
        roots["benchmark (corpus)"] = str(Path(zlbench.__file__).resolve().parent / "sample_corpus") + "/"
    plain = batch_phases(args.out / "plain")
    profiled = batch_phases(args.out / "profiled")
    phase_keys = ("startup_s", "collect_s", "first_call_s", "measure_s", "after_session_s")
    medians = {}
    for name, figures in (("plain", plain), ("profiled", profiled)):
        ok = [f for f in figures.values() if f.get("status") == "ok"]
        medians[name] = {k: round(statistics.median(f[k] for f in ok if f.get(k) is not None), 3)
                         for k in phase_keys if any(f.get(k) is not None for f in ok)}
    # The profiles stand for a night's usual operator: measured, its benchmark process a
    # prestarted one (a worker's first operator, or one no spare could serve, imports the
    # library inside its configure phase). Where none was prestarted, every measured one.
    batch = args.out / "profiled"
    events = journal_events(batch)
    modes = {op: launch_mode(batch, events.get(op, {}).get("attempt")) for op in profiled}
    ok_ops = {op: f for op, f in profiled.items() if f.get("status") == "ok"}
    chosen = {op: f for op, f in ok_ops.items() if modes[op] == "prestarted"} or ok_ops
    left_out = {op: (f"status {f.get('status') or 'none'}" if op not in ok_ops else f"{modes[op]} start")
                for op, f in profiled.items() if op not in chosen}
    outside = outside_pytest(batch, chosen)
    result = {
        "ops": args.ops.split(","),
        "plain": plain,
        "plain_median_s": medians["plain"],
        "profiled_median_s": medians["profiled"],
        "launch": modes,
        "profiles_leave_out": left_out,
        "outside_pytest": outside,
        "outside_pytest_median_s": {k: round(statistics.median(o[k] for o in outside.values()), 3)
                                    for k in ("before_s", "after_s")} if outside else {},
        "phases": phase_profiles(batch, chosen, roots, args.top),
    }
    print(f"\n{'operator':28s} {'status':>7} {'start':>6} {'collect':>7} {'first':>6} {'measure':>7} {'after':>6}")
    for op, f in plain.items():
        cells = " ".join(f"{f.get(k) if f.get(k) is not None else '-':>{w}}"
                         for k, w in zip(phase_keys, (6, 7, 6, 7, 6)))
        print(f"{op:28s} {f.get('status') or '-':>7} {cells}")
    print(f"median (plain):    {medians['plain']}")
    print(f"median (profiled): {medians['profiled']}")
    if left_out:
        print(f"left out of the profiles below: {left_out}")
    if ok_ops and not any(modes[op] == "prestarted" for op in ok_ops):
        print("no operator had a prestarted benchmark process: every configure phase below "
              "includes the library's import")
    print(f"outside pytest (profiled pass, median): {result['outside_pytest_median_s']}: before = the attempt's "
          f"start to pytest's conftests, after = pytest's unconfigure to the attempt's result")
    for phase, entry in result["phases"].items():
        print(f"\n== {phase}: median wall {entry['median_wall_s']} s over {entry['operators']} operators "
              f"(profiled); own time by package: {entry.get('by_package')}")
        for f in entry.get("top_cumulative", [])[: args.top]:
            print(f"   {f['cum_s']:8.4f} {f['own_s']:8.4f}  {f['function']}")
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--flaggems-dir", help="FlagGems checkout (else the bundled sample)")
    parser.add_argument("--backend", help="default: cuda with --flaggems-dir, else cpu")
    parser.add_argument("--device", default="0")
    parser.add_argument("--ops", help=f"comma list (default: {FLAGGEMS_OPS} for FlagGems, "
                                      f"{SAMPLE_OPS} for the sample)")
    parser.add_argument("--passes", default="plain,profiled,report",
                        help="warm, plain, profiled, report (default: plain,profiled,report)")
    parser.add_argument("--profile-measure", action="store_true",
                        help="profile the measure phase too (slows the timers' loops)")
    parser.add_argument("--top", type=int, default=25, help="functions listed per phase")
    parser.add_argument("--timeout", type=float, default=600, help="per operator and pass")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--json", type=Path, help="result (default: <out>/fixed_cost.json)")
    args = parser.parse_args()
    args.backend = args.backend or ("cuda" if args.flaggems_dir else "cpu")
    args.ops = args.ops or (FLAGGEMS_OPS if args.flaggems_dir else SAMPLE_OPS)
    passes = [p.strip() for p in args.passes.split(",") if p.strip()]
    unknown = [p for p in passes if p not in PASSES + ("report",)]
    if unknown:
        parser.error(f"--passes: unknown {', '.join(unknown)} (warm, plain, profiled, report)")
    args.out.mkdir(parents=True, exist_ok=True)
    failed = False
    for name in PASSES:
        if name in passes:
            failed |= run_pass(args, name).get("exit") not in (None, 0)
    if "report" in passes:
        result = report(args)
        path = args.json or args.out / "fixed_cost.json"
        path.write_text(json.dumps(result, indent=1))
        print(f"\nresult: {path}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

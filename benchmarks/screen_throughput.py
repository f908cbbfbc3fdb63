"""Where a night at real settings goes: a stratified sample of the corpus, measured as a
nightly screen measures it, projected onto the whole corpus.

The sample: the KINDS largest kinds of FlagGems' conf/operators.yaml (an operator's
first kind), and in each the PER_KIND operators of the corpus with the smallest SHA-1 of
their name: the same list every time, heavy families included. Each operator runs with
its own dtypes and the corpus' core shapes, zlbench's defaults otherwise (--timeout
bounds an operator's wall; one that reaches it makes the projection a lower bound, and
the report says so). FlagGems' kernel mode is timed per operator as a user runs it, its
pytest start-up and collection included; zlbench's wall includes its own.

Passes (``--passes``, in this order, each a batch dir under --out):
  warm     a batch that fills the kernel and tuner caches; on a fresh machine's empty
           caches its walls are the cold ones (the cold projection)
  a, b     two batches of the same build: the measured figures, and their A/A
  repeat   --repeats more fresh batches of the same build (r1, r2, ...): each operator's
           process in every batch against its process in a (``process_shifts``): how
           far whole processes move, and how much of it the same process's torch
           rows account for
  recheck  the re-check `zlbench ab` makes: the operators of a/b's SLOWER and FASTER
           rows once more in two fresh batches (a-recheck, b-recheck); the A/A then
           judges those verdicts by them, its verdicts before kept beside
  kernel   FlagGems' own kernel mode, plain ``pytest -m OP --level core --mode kernel``
           per operator, for --kernel-ops operators of the sample, one of each kind
           first (``kernel_operators``)
  report   the figures from whatever passes exist under --out

Figures: per operator its wall, phases (ops_status.csv), timings, replay budget (timings
x the caller's rep, FlagGems' --iter, also for a host-time timing that spends less) and
measure efficiency (the measure phase over the budget of the timings inside it; the
timer's own steps from row_stats.jsonl's cost_ms, the benchmark's work between timings
from gap_ms); the projected wall of the whole corpus on one device
(per kind: the kind's mean x its operators; kinds outside the sample at the sample's
mean; a session's first operator at the others' start-up, the library import it paid
alone counted once, ``once_per_session``; the mean of passes a and b, each pass's too);
the A/A of a and b (median |gain|, rows SAME, the others and their markers, before and
after a re-check; ``by_latency``: the rows' median |gain| by their latency class;
``operator_shifts``: how much of it moves whole operators, that is whole
processes; ``graph_lengths``: the rows built to another graph length in B); the ratio of FlagGems' kernel-mode wall to zlbench's per operator, zlbench's
with the library's import once a session as a night pays it (the raw walls' ratio beside);
and the host (CPU model, cores, ``host_speed``), since about half of a night's wall is
host time and two hosts of one GPU project differently.

Usage (H200, FlagGems checkout in FLAGGEMS_DIR):
  python benchmarks/screen_throughput.py --out /tmp/st --passes warm,kernel
  python benchmarks/screen_throughput.py --out /tmp/st --passes a,b,report --json st.json
On CPU (the bundled sample corpus, a smoke run): --backend cpu --ops abs,add --passes a,b,report

With --pass-limit S a batch pass is interrupted after S seconds as Ctrl-C would stop it,
the later passes are not run (exit 3), and the same command with the same --out resumes
it: a pass dir with a plan is resumed, the kernel pass skips what it timed. --time-limit S
is the same for all the passes together (a pass gets what the earlier ones left), so a
run fits a machine lent for a fixed time.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

KINDS = 6
PER_KIND = 4
REP_MS = 100.0  # FlagGems' DEFAULT_ITER_TIME, the caller's rep for each timing
# A timing's own steps in row_stats.jsonl's cost_ms, per timer (milliseconds).
# They partition the timing (the direct timer's parse is inside its timed step).
TIMER_STEPS = {"graph": ("warmup", "capture", "replay", "move", "cap window"),
               "direct": ("first_call", "warmup", "timed")}
# An operator's wall, split as ops_status.csv splits it (<phase>_s), and its teardown:
# overhead_s (the wall outside the pytest session) less startup_s.
PHASES = ("startup", "collect", "first_call", "measure")
GOALS = {"efficiency": 1.2, "pointwise_wall_s": 6.0, "corpus_h": 1.5, "vs_kernel": 4.0, "vs_kernel_ops": 6,
         "aa_median_pct": 0.05, "aa_same_share": 0.98}


def corpus_operators(args) -> List[str]:
    from zlbench import knobs, providers

    flags = {"backend": args.backend}
    if args.flaggems_dir:
        flags["flaggems_dir"] = args.flaggems_dir
    settings = knobs.resolve(flags, {}, names=knobs.MEASURE_KNOBS)
    return providers.make_provider(settings).operators()


def operator_kinds(flaggems_dir: Optional[str]) -> Dict[str, dict]:
    """{op: {"kind", "pointwise"}} from conf/operators.yaml (zlbench.corpus.operators), or
    {} without a checkout that has one."""
    from zlbench.corpus.operators import has_operator_list, load_operators

    if not flaggems_dir or not has_operator_list(Path(flaggems_dir)):
        return {}
    return {op: {"kind": e.kind, "pointwise": "pointwise" in e.labels}
            for op, e in load_operators(Path(flaggems_dir)).items() if e.kind}


def stable_hash(name: str) -> str:
    return hashlib.sha1(name.encode()).hexdigest()


def sample(corpus: List[str], kinds: Dict[str, dict], n_kinds: int, per_kind: int) -> List[str]:
    by_kind: Dict[str, List[str]] = {}
    for op in corpus:
        if op in kinds:
            by_kind.setdefault(kinds[op]["kind"], []).append(op)
    largest = sorted(by_kind, key=lambda k: (-len(by_kind[k]), k))[:n_kinds]
    return [op for k in largest for op in sorted(by_kind[k], key=stable_hash)[:per_kind]]


def kernel_operators(ops: List[str], kinds: Dict[str, dict], n: int) -> List[str]:
    """The ``n`` sample operators FlagGems' kernel mode runs: the first of each kind in the
    sample's order, then the second of each, and so on, so that the ratio spans the kinds
    (the sample's first six are four of one kind and two of another); the first ``n`` without kinds."""
    by_kind: Dict[str, List[str]] = {}
    for op in ops:
        by_kind.setdefault(kinds.get(op, {}).get("kind") or "", []).append(op)
    rounds = max((len(v) for v in by_kind.values()), default=0)
    picked = [group[i] for i in range(rounds) for group in by_kind.values() if i < len(group)]
    return picked[:n]


def pass_seconds(args) -> Optional[float]:
    """The seconds the next pass may take: --pass-limit, and what --time-limit has left."""
    left = None if args.deadline is None else max(0.0, args.deadline - time.monotonic())
    limits = [x for x in (args.pass_limit, left) if x is not None]
    return min(limits) if limits else None


def limit_reached(args) -> str:
    if args.deadline is not None and time.monotonic() >= args.deadline - 1:
        return f"--time-limit {args.time_limit:.0f} s reached"
    return f"--pass-limit {args.pass_limit:.0f} s reached"


def run_batch(args, ops: List[str], out: Path, timeout: float) -> bool:
    """One pass as a batch. A pass dir that has a plan is resumed (a pass cut short by
    --pass-limit goes on where it stopped); --pass-limit interrupts the batch as Ctrl-C
    would, so it stops cleanly between operators' records and can be resumed."""
    # The batch's defaults (retries, dtype fallback, the dismiss list), as a night runs;
    # --timeout alone bounds the device time an operator may take.
    base = [sys.executable, "-m", "zlbench", "batch", "--progress", "plain", "--out", str(out),
            "--timeout", str(timeout)]
    resuming = (out / "plan.json").exists()
    if resuming:
        cmd = base + ["--resume"]
    else:
        cmd = base + ["--backend", args.backend, "--devices", args.device, "--ops", ",".join(ops)]
        if args.flaggems_dir:
            cmd += ["--flaggems-dir", args.flaggems_dir]
    print(f"== {out.name}: {len(ops)} operators{' (resumed)' if resuming else ''}", flush=True)
    started = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    finished = True
    stopped = None
    try:
        text, _ = proc.communicate(timeout=pass_seconds(args))
    except (subprocess.TimeoutExpired, KeyboardInterrupt) as stop:
        # At --pass-limit, and when this script is stopped (Ctrl-C, or SIGTERM from
        # `timeout`, raised here as KeyboardInterrupt): the batch runs in a session of
        # its own and would go on measuring beside whatever runs next.
        finished = False
        stopped = None if isinstance(stop, subprocess.TimeoutExpired) else stop
        # A second Ctrl-C or SIGTERM does not cut the clean-up short.
        held = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
        proc.send_signal(signal.SIGINT)  # the batch stops its attempts and records what it has
        try:
            text, _ = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            text, _ = proc.communicate()
        for sig, handler in held.items():
            signal.signal(sig, handler)
        why = "stopped" if stopped else limit_reached(args)
        text += f"\n(screen_throughput: {why}, batch interrupted)\n"
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "screen_throughput.log", "a") as log:
        log.write(text)
    # The host this pass (or this part of it) ran on, for the report, which may run elsewhere.
    with open(out / HOST_FILE, "a") as f:
        f.write(json.dumps(host_figures()) + "\n")
    print(f"   {time.monotonic() - started:.0f} s, exit {proc.returncode}", flush=True)
    if stopped is not None:
        raise stopped
    return finished


RECHECK_PASSES = ("a-recheck", "b-recheck")
REPEAT_PREFIX = "r"  # the repeat pass's batches: r1, r2, ...


def run_repeats(args, ops: List[str]) -> bool:
    """--repeats fresh batches r1..rN after a and b (each resumed or passed over as a and b are)."""
    return all(run_batch(args, ops, args.out / f"{REPEAT_PREFIX}{i}", args.timeout)
               for i in range(1, args.repeats + 1))


def repeat_batches(out: Path) -> List[Path]:
    """a, b and the repeat pass's batches that exist under ``out``, in the order they ran."""
    found = [out / "a", out / "b"] + sorted(
        (p for p in out.glob(f"{REPEAT_PREFIX}*") if p.name[len(REPEAT_PREFIX):].isdigit()),
        key=lambda p: int(p.name[len(REPEAT_PREFIX):]))
    return [p for p in found if p.is_dir()]


def run_recheck(args) -> bool:
    """The re-check `zlbench ab` makes: the operators of a/b's SLOWER and FASTER rows
    once more in each of two fresh batches (a-recheck, b-recheck); ``aa`` judges those
    verdicts by them (``summary.ab.apply_recheck``). Nothing to run when none is real."""
    from zlbench.summary.ab import pair_runs, recheck_ops

    if not all((args.out / name).is_dir() for name in ("a", "b")):
        print(f"recheck: passes a and b first (none under {args.out})", file=sys.stderr)
        raise SystemExit(2)
    ops = recheck_ops(pair_runs(args.out / "a", args.out / "b"))
    print(f"== recheck: {len(ops)} operators with SLOWER/FASTER rows: {', '.join(ops) or '-'}", flush=True)
    return all(run_batch(args, ops, args.out / name, args.timeout) for name in RECHECK_PASSES) if ops else True


def run_kernel_mode(args, ops: List[str], out: Path) -> bool:
    """FlagGems' own kernel mode, one plain pytest per operator, wall per operator."""
    out.mkdir(parents=True, exist_ok=True)
    from zlbench.corpus.resolve import resolve_node

    done = out / "kernel_mode.json"
    walls = json.loads(done.read_text()) if done.is_file() else {}  # a pass cut short goes on
    seconds = pass_seconds(args)
    ends = None if seconds is None else time.monotonic() + seconds
    for op in ops:
        if op in walls:
            continue
        if ends is not None and time.monotonic() > ends:
            print(f"   kernel mode: {limit_reached(args)}", flush=True)
            return False
        target = resolve_node(Path(args.flaggems_dir), op, None, None)
        started = time.monotonic()
        # As a user runs one operator: its benchmark file, its mark, FlagGems' defaults.
        cmd = [sys.executable, "-m", "pytest", *target.pytest_args, "--level", "core", "--mode", "kernel",
               "-s", "-q", "-p", "no:cacheprovider"]
        try:
            proc = subprocess.run(cmd, cwd=target.root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True, timeout=args.timeout)
            code, text = proc.returncode, proc.stdout
        except subprocess.TimeoutExpired as e:
            code, text = "timeout", (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else ""
        walls[op] = {"wall_s": round(time.monotonic() - started, 2), "exit": code,
                     "rows": sum(1 for ln in text.splitlines() if ln.strip().startswith("SUCCESS"))}
        (out / f"{op}.log").write_text(text)
        print(f"   kernel mode {op}: {walls[op]}", flush=True)
        (out / "kernel_mode.json").write_text(json.dumps(walls, indent=1) + "\n")
    return True


def not_clean_ops(batch: Path) -> set:
    """Operators with an attempt in the batch that was interrupted (a --pass-limit) or
    did not end ok: their last wall ran on caches an earlier attempt half filled."""
    from zlbench.rundir import read_journal

    return {event.get("op") for event in read_journal(batch)
            if event.get("event") == "result" and (event.get("interrupted") or event.get("status") != "ok")}


def session_openers(batch: Path) -> List[str]:
    """The operators whose attempt opened a session of the batch (the first attempt after
    each ``session`` event of attempts.jsonl): theirs found no spare ready, and its
    benchmark process imported the library itself."""
    from zlbench.rundir import read_journal

    out: List[str] = []
    opening = False
    for event in read_journal(batch):
        if event.get("event") == "session":
            opening = True
        elif event.get("event") == "attempt" and opening:
            out.append(event.get("op"))
            opening = False
    return out


def once_per_session(figures: Dict[str, dict], openers: List[str]) -> Tuple[Dict[str, dict], float]:
    """(the figures with each session opener's start-up cut to the other operators'
    median, the seconds cut). A session's first operator pays the library's import in
    its own process (no spare was ready: 4.4 and 5.6 s on an H200 host), once a night,
    not once per operator: weighted as the other operators are (about 44 corpus
    operators each), the two openers of a 24-operator pass (one made by a resume) were
    0.19 h of its 2.24 h projection. The seconds cut are added to the projection once, as
    a phase of their own ("session start")."""
    others = [f["startup_s"] for op, f in figures.items() if op not in openers and f.get("startup_s") is not None]
    if not others:
        return figures, 0.0
    typical = statistics.median(others)
    out = dict(figures)
    cut = 0.0
    for op in openers:
        f = figures.get(op) or {}
        excess = (f.get("startup_s") or 0.0) - typical
        if excess > 0 and f.get("wall_s"):
            out[op] = dict(f, startup_s=typical, wall_s=f["wall_s"] - excess,
                           overhead_s=(f.get("overhead_s") or 0.0) - excess)
            cut += excess
    return out, cut


def op_figures(batch: Path) -> Dict[str, dict]:
    """Per operator of a batch dir: status, wall, phases, timings, budget, efficiency."""
    from zlbench import rowstats

    path = batch / "ops_status.csv"
    if not path.is_file():
        return {}
    with open(path, newline="") as f:
        status = {r["operator"]: r for r in csv.DictReader(f)}
    out = {}
    for op, row in status.items():
        records, _ = rowstats.read(batch / (row.get("run_dir") or op))
        first_key = None
        inside = []
        for rec in records:
            key = (rec.get("dtype"), rec.get("shape"))
            first_key = first_key or key
            if key != first_key:
                inside.append(rec)  # the first row's timings count in first_call_s
        # Every timing's own steps (the first row's too), by timer: where the timers spend.
        steps: Dict[str, float] = {}
        for rec in records:
            cost = rec.get("cost_ms") or {}
            for step in TIMER_STEPS.get(rec.get("timer"), ()):
                if isinstance(cost.get(step), (int, float)):
                    name = f"{rec.get('timer')} {step}"
                    steps[name] = steps.get(name, 0.0) + cost[step] / 1e3
            steps["gap"] = steps.get("gap", 0.0) + float(rec.get("gap_ms") or 0) / 1e3
        # The caller's budget (FlagGems' --iter), also for host-time timings that spent less.
        rep = [float(cost.get("caller_rep_ms") or cost.get("rep_ms") or REP_MS)
               for cost in ((r.get("cost_ms") or {}) for r in inside)]
        budget_s = sum(rep) / 1e3
        timer_s = sum(float((r.get("cost_ms") or {}).get("total") or 0) for r in inside) / 1e3
        gap_s = sum(float(r.get("gap_ms") or 0) for r in inside) / 1e3

        def num(column):
            try:
                return float(row.get(column) or "")
            except ValueError:
                return None

        measure = num("measure_s")
        out[op] = {"status": row.get("status"), "wall_s": num("duration_s"), "startup_s": num("startup_s"),
                   "collect_s": num("collect_s"), "first_call_s": num("first_call_s"), "measure_s": measure,
                   "overhead_s": num("overhead_s"), "timings": len(records), "budget_s": round(budget_s, 2),
                   "timer_s": round(timer_s, 2), "gap_s": round(gap_s, 2),
                   # Timings taken again over a power-cap window (timing.CAP_WINDOW_MS).
                   "cap_windows": sum(1 for r in records if r.get("stop") == "power_cap"),
                   "steps_s": {k: round(v, 3) for k, v in sorted(steps.items())},
                   "efficiency": round(measure / budget_s, 2) if measure and budget_s else None}
    return out


def gems_costs(run_dir: str, cache: Dict[str, dict]) -> dict:
    """{(op, dtype, shape): cost_ms} of a run dir's gems timings (the first record of a
    key that has one), read once per run dir."""
    from zlbench import rowstats

    if run_dir not in cache:
        records, _ = rowstats.read(Path(run_dir))
        found: dict = {}
        for rec in records:
            if rec.get("side") == "gems" and isinstance(rec.get("cost_ms"), dict):
                found.setdefault((rec.get("op"), rec.get("dtype"), rec.get("shape")), rec["cost_ms"])
        cache[run_dir] = found
    return cache[run_dir]


def timer_class(p, cache: Dict[str, dict]) -> str:
    """How a pair's gems rows were timed: "host" (no device work on either side: host
    time, never compared), "direct" (the direct timer's device time), "graph
    interleaved" (placements interleaved in shared graphs on both sides:
    graph_timer.INTERLEAVED_GRAPHS of them) or "graph" (a graph per placement, or the
    two sides timed apart)."""
    from zlbench.summary.ab import NO_DEVICE_WORK_EITHER

    if p.verdict.why == NO_DEVICE_WORK_EITHER:
        return "host"
    if p.fallback:
        return "direct"
    sides = [gems_costs(side.run_dir, cache).get(p.a.key, {}) for side in (p.a, p.b)]
    return "graph interleaved" if all(c.get("interleaved") for c in sides) else "graph"


def layout(pairs, cache: Dict[str, dict]) -> dict:
    """How much of the A/A the inputs' placements account for. Each row's figure over k
    placements (timing.over_placements) is one draw of the placements a process gets; its
    95% half-width over placements (timing.placement_spread) gives a standard deviation
    of about s / 1.96, and A - B one of hypot(s_A, s_B) / 1.96, whose median |value| is
    0.6745 of that (batches recorded before the trimmed mean hold a median's spread).
    Over the rows both sides timed so (separate graphs at two placements or more, or two
    interleaved graphs), the observed median |gain| beside that prediction,
    and the rows whose printed latencies are equal (the table's 6 decimals in ms: a row
    of 2 us reads to 0.05%)."""
    observed, predicted = [], []
    for p in pairs:
        sa, sb = (gems_costs(side.run_dir, cache).get(p.a.key, {}).get("placement_spread") for side in (p.a, p.b))
        if p.gain is None or not isinstance(sa, (int, float)) or not isinstance(sb, (int, float)):
            continue
        observed.append(abs(p.gain))
        predicted.append(0.6745 * (sa * sa + sb * sb) ** 0.5 / 1.96)
    gains = [abs(p.gain) for p in pairs if p.gain is not None]
    return {"rows": len(observed),
            "median_abs_gain_pct": round(100 * statistics.median(observed), 4) if observed else None,
            "predicted_median_abs_gain_pct": round(100 * statistics.median(predicted), 4) if predicted else None,
            "rows_equal_as_printed": sum(1 for g in gains if g == 0.0)}


def graph_lengths(pairs, cache: Dict[str, dict]) -> dict:
    """Over the rows compared on device time whose gems figure both sides took from
    graphs: how many were built to another length in B than in A (cost_ms.calls_per_graph;
    a replay's launch cost is a share of every call that falls as the graph grows, which
    the kept length, TileSizes.calls, takes out), and the median |gain| of those built
    alike and of those not."""
    alike, other = [], []
    for p in pairs:
        if p.gain is None or p.verdict.threshold is None or p.fallback:
            continue
        calls = [gems_costs(side.run_dir, cache).get(p.a.key, {}).get("calls_per_graph") for side in (p.a, p.b)]
        if not all(isinstance(c, int) for c in calls):
            continue
        (alike if calls[0] == calls[1] else other).append(abs(p.gain))

    def med(values: List[float]) -> Optional[float]:
        return round(100 * statistics.median(values), 4) if values else None

    return {"rows": len(alike) + len(other), "built_to_another_length": len(other),
            "median_abs_gain_pct_alike": med(alike), "median_abs_gain_pct_another_length": med(other)}


def median_ci(by_op: Dict[str, List[float]], resamples: int = 2000, seed: int = 0) -> Optional[List[float]]:
    """A 95% interval of the median of |values| over all operators' rows, resampling
    whole operators (each runs in its own process per batch, so its rows move together
    and are not independent): where a goal lies inside it, one A/A cannot tell the
    figure from the goal. None with fewer than two operators."""
    groups = [[abs(v) for v in values] for values in by_op.values() if values]
    if len(groups) < 2:
        return None
    rng = random.Random(seed)
    medians = sorted(
        statistics.median([v for g in rng.choices(groups, k=len(groups)) for v in g]) for _ in range(resamples))
    return [medians[int(0.025 * resamples)], medians[int(0.975 * resamples) - 1]]


def compared_by_operator(pairs) -> Dict[str, List[float]]:
    """The gains of the rows compared on device time (a threshold: not UNKNOWN, not
    host time on both sides), by operator."""
    by_op: Dict[str, List[float]] = {}
    for p in pairs:
        if p.gain is not None and p.verdict.threshold is not None:
            by_op.setdefault(str(p.key[0]), []).append(p.gain)
    return by_op


# Row latency classes (A's gems latency, upper bounds in ms) for ``by_latency``.
LATENCY_CLASSES = ((0.01, "<10us"), (0.1, "10-100us"), (1.0, "0.1-1ms"), (float("inf"), ">=1ms"))


def by_latency(pairs) -> Dict[str, dict]:
    """The rows compared on device time by their latency: rows and median |gain| (%) per
    class. Rows of a few microseconds move most between processes (an H100 A/A: under
    10 us 0.36%, 10 us-1 ms 0.15-0.16%, 1 ms and more 0.03%; benchmarks/placement_frames.py
    asks why)."""
    groups: Dict[str, List[float]] = {name: [] for _, name in LATENCY_CLASSES}
    for p in pairs:
        if p.gain is None or p.verdict.threshold is None or not p.a.gems_ms:
            continue
        name = next(n for bound, n in LATENCY_CLASSES if p.a.gems_ms < bound)
        groups[name].append(abs(p.gain))
    return {name: {"rows": len(g), "median_abs_gain_pct": round(100 * statistics.median(g), 4) if g else None}
            for name, g in groups.items()}


def operator_shifts(pairs, top: int = 5) -> dict:
    """How much of the A/A moves whole operators. Each operator runs in its own process
    per batch, so a shift every row of it shares (its rows' median signed gain) lies
    between processes; the rows' median |gain| once their operator's shift is taken out
    is what the timer itself leaves. Rows compared on device time only, operators of 3
    rows or more; ``largest``: the operators of the largest shifts."""
    by_op = {op: g for op, g in compared_by_operator(pairs).items() if len(g) >= 3}
    shift = {op: statistics.median(g) for op, g in by_op.items()}
    within = [abs(x - shift[op]) for op, g in by_op.items() for x in g]
    largest = sorted(shift, key=lambda op: -abs(shift[op]))[:top]
    return {"operators": len(shift),
            "median_abs_shift_pct": round(100 * statistics.median(abs(v) for v in shift.values()), 4)
            if shift else None,
            "median_abs_gain_pct_within": round(100 * statistics.median(within), 4) if within else None,
            "largest": [{"op": op, "shift_pct": round(100 * shift[op], 3), "rows": len(by_op[op])}
                        for op in largest],
            "by_operator": {op: round(100 * shift[op], 3) for op in sorted(shift)}}


def window_clocks(batch: Path, op: str) -> Optional[dict]:
    """The SM clock NVML's samples read while the operator's gems rows ran in this
    batch (row_stats' ``device.after.sm_mhz_window``, ``backends.nvml``): the median of
    the rows' medians and the lowest sample, or None where no row has a window."""
    from zlbench import rowstats

    records, _ = rowstats.read(batch / op)
    windows = [((r.get("device") or {}).get("after") or {}).get("sm_mhz_window") for r in records
               if r.get("side") == "gems"]
    windows = [w for w in windows if w and w.get("n")]
    if not windows:
        return None
    return {"median": statistics.median(w["median"] for w in windows), "min": min(w["min"] for w in windows),
            "samples": sum(w["n"] for w in windows)}


def process_shifts(batches: List[Path], min_rows: int = 3) -> dict:
    """Each operator's process in each later batch against its process in the first:
    the median change of latency (later / first - 1: positive is slower; the A/A's
    ``gain`` has the other sign) of its gems rows (``gems_pct``) and of its torch rows
    (``torch_pct``), over the rows the A/B of the two batches compares on device time (a
    threshold; host-time rows move with the host, not the device), and the change of the
    speedup over torch (``after_torch_pct``: torch's rows are the same code in both
    batches, timed in the same process, so what moves both is the process's, not the
    code's; ``summary.ab.torch_gain``, the torch rows' reading summary --ab notes).
    Operators with fewer than ``min_rows`` such rows are left out. Each point also
    carries the SM clock NVML's samples read in both processes (``window_clocks``),
    where they were recorded: whether a process that moved ran at another clock."""
    from zlbench.summary.ab import pair_runs, torch_gain

    def med(values: List[float]) -> Optional[float]:
        return statistics.median(values) if values else None

    clocks: Dict[Tuple[Path, str], Optional[dict]] = {}

    def clock(batch: Path, op: str) -> Optional[dict]:  # the first batch's are read once
        if (batch, op) not in clocks:
            clocks[(batch, op)] = window_clocks(batch, op)
        return clocks[(batch, op)]

    points = []
    for batch in batches[1:]:
        by_op: Dict[str, Dict[str, List[float]]] = {}
        for p in pair_runs(batches[0], batch).pairs:
            if p.gain is None or p.verdict.threshold is None:
                continue
            seen = by_op.setdefault(str(p.key[0]), {"gems": [], "torch": []})
            seen["gems"].append(p.b.gems_ms / p.a.gems_ms - 1)
            gain = torch_gain(p)  # A/B - 1: as a latency change, B/A - 1
            if gain is not None:
                seen["torch"].append(1 / (1 + gain) - 1)
        for op, seen in sorted(by_op.items()):
            if len(seen["gems"]) < min_rows:
                continue
            gems, torch = med(seen["gems"]), med(seen["torch"])
            points.append({
                "op": op, "batch": batch.name, "rows": len(seen["gems"]),
                "gems_pct": round(100 * gems, 3),
                "torch_pct": None if torch is None else round(100 * torch, 3),
                "after_torch_pct": None if torch is None else round(100 * ((1 + gems) / (1 + torch) - 1), 3),
                "sm_mhz": [clock(batches[0], op), clock(batch, op)]})

    def median_abs(field: str) -> Optional[float]:
        values = [abs(p[field]) for p in points if p[field] is not None]
        return round(statistics.median(values), 4) if values else None

    return {"batches": [b.name for b in batches], "points": points,
            # Over the operator-batch points: how far whole processes move, and how far
            # once the torch rows are taken out.
            "median_abs_pct": {} if len(batches) < 2 else
            {f: median_abs(f) for f in ("gems_pct", "after_torch_pct")}}


def aa(a: Path, b: Path, recheck: Optional[Tuple[Path, Path]] = None) -> dict:
    """The A/A of passes a and b; with ``recheck`` (a-recheck, b-recheck), its
    SLOWER and FASTER verdicts judged again by that pair (``apply_recheck``), the
    verdicts before it under ``recheck.verdicts_before``."""
    from zlbench.summary.ab import (
        NO_DEVICE_WORK_EITHER,
        apply_recheck,
        autotune_changes,
        pair_runs,
        recheck_counts,
        shared_placement_level,
        untraced_sides,
    )

    result = pair_runs(a, b)
    before: Dict[str, int] = {}
    for p in result.pairs:
        before[p.verdict.status] = before.get(p.verdict.status, 0) + 1
    if recheck:
        apply_recheck(result, pair_runs(*recheck))
    gains = sorted(abs(p.gain) for p in result.pairs if p.gain is not None)
    verdicts: Dict[str, int] = {}
    others = []
    unexplained_pairs: set = set()
    for p in result.pairs:
        verdict = p.verdict.status
        verdicts[verdict] = verdicts.get(verdict, 0) + 1
        if verdict != "SAME" or p.recheck:
            # The issue's rule: a row that is not SAME must carry what explains it: the
            # device throttled, two clocks, host time without device work, the
            # autotuner's other pick, or a placement level both sides read. An UNKNOWN
            # for want of a latency or a spread is a row not measured, and a
            # direct-timer fallback says how a row was timed, not why it moved: neither
            # explains anything.
            clocks = bool(p.a.gems_clock and p.b.gems_clock and p.a.gems_clock != p.b.gems_clock)
            # A verdict a re-check in fresh processes did not reproduce is SAME now: its
            # change lay between processes, which the re-check's own reading shows.
            explained = bool(p.verdict.throttled or clocks or untraced_sides(p) or autotune_changes(p)
                             or shared_placement_level(p) or verdict == "SAME")
            if not explained:
                unexplained_pairs.add(id(p))
            others.append({"row": " ".join(map(str, p.key)), "verdict": verdict, "explained": explained,
                           "gain_pct": None if p.gain is None else round(100 * p.gain, 3),
                           "why": p.verdict.why, "fallback": p.fallback, "autotune": autotune_changes(p),
                           "placement_level": shared_placement_level(p),
                           "recheck": p.recheck,
                           "markers": sorted({m.name for m in p.a.markers + p.b.markers if m.name != "RUN_PHASE"})})
    unexplained = [o for o in others if not o["explained"]]
    n = len(result.pairs)
    # Per way the gems rows were timed (timer_class): how far each moved, and how many
    # moved unexplained.
    cache: Dict[str, dict] = {}
    classes = {id(p): timer_class(p, cache) for p in result.pairs}
    by_timer = {}
    for name in ("graph", "graph interleaved", "direct", "host"):
        pairs = [p for p in result.pairs if classes[id(p)] == name]
        moved = sorted(abs(p.gain) for p in pairs if p.gain is not None)
        same = sum(p.verdict.status == "SAME" for p in pairs)
        by_timer[name] = {"pairs": len(pairs),
                          "same_share": round(same / len(pairs), 4) if pairs else None,
                          "median_abs_gain_pct": round(100 * statistics.median(moved), 4) if moved else None,
                          "unexplained": sum(id(p) in unexplained_pairs for p in pairs)}
    # The rows whose device times were compared: not those without device work in A or
    # B (their numbers are host time), nor the UNKNOWN ones.
    compared_by_op = compared_by_operator(result.pairs)
    compared = sorted(abs(g) for gains_of_op in compared_by_op.values() for g in gains_of_op)
    ci = median_ci(compared_by_op)
    host_only = sum(1 for p in result.pairs if p.verdict.why == NO_DEVICE_WORK_EITHER)
    return {"pairs": n, "verdicts": verdicts,
            "median_abs_gain_pct": round(100 * statistics.median(gains), 4) if gains else None,
            "compared": len(compared),
            "median_abs_gain_pct_compared": round(100 * statistics.median(compared), 4) if compared else None,
            # Its 95% interval, operators resampled (median_ci).
            "median_abs_gain_pct_compared_ci95": None if ci is None else [round(100 * v, 4) for v in ci],
            "same_share": round(verdicts.get("SAME", 0) / n, 4) if n else None,
            # Of the rows compared on device time (the SAME ones without device work left
            # out of both counts), the share SAME.
            "same_share_compared": round(
                sum(p.verdict.status == "SAME" and p.verdict.threshold is not None for p in result.pairs)
                / (n - host_only), 4) if n > host_only else None,
            "no_device_work_either_side": host_only,
            "unexplained": len(unexplained),
            "same_or_explained_share": round(1 - len(unexplained) / n, 4) if n else None,
            "by_timer": by_timer,
            "recheck": None if recheck is None else {
                "verdicts_before": before,
                "same_share_before": round(before.get("SAME", 0) / n, 4) if n else None,
                "rechecked": sum(1 for p in result.pairs if p.recheck),
                "outcomes": recheck_counts(result)},
            "layout": layout(result.pairs, cache),
            "graph_lengths": graph_lengths(result.pairs, cache),
            "operator_shifts": operator_shifts(result.pairs),
            "by_latency": by_latency(result.pairs),
            "not_same": others}


def projection(walls: Dict[str, float], counts: Dict[str, int],
               kinds: Dict[str, dict]) -> Tuple[Optional[float], Dict[str, float]]:
    """(hours for the whole corpus, each kind's mean wall): a kind's mean wall over the
    sample's operators of it times its operators (``counts``); a kind the sample has no
    wall for at the sample's mean. (None, {}) without a wall."""
    if not walls:
        return None, {}
    sample_mean = statistics.mean(walls.values())
    means = {}
    for kind in counts:
        ws = [w for op, w in walls.items() if kinds.get(op, {}).get("kind") == kind]
        means[kind] = statistics.mean(ws) if ws else sample_mean
    return sum(means[k] * n for k, n in counts.items()) / 3600, means


def weights(ops: List[str], counts: Dict[str, int], kinds: Dict[str, dict]) -> Dict[str, float]:
    """How many corpus operators each sampled operator stands for in ``projection``: its
    kind's operators over the sample's of that kind, plus its share of the kinds the
    sample lacks (those count at the sample's mean). Any per-operator figure x these
    weights, summed, is that figure's part of the projected wall."""
    if not ops:
        return {}
    kind_of = {op: kinds.get(op, {}).get("kind") for op in ops}
    in_sample: Dict[str, int] = {}
    for kind in kind_of.values():
        if kind in counts:
            in_sample[kind] = in_sample.get(kind, 0) + 1
    others = sum(n for k, n in counts.items() if k not in in_sample)
    return {op: (counts[k] / in_sample[k] if k in in_sample else 0.0) + others / len(ops)
            for op, k in kind_of.items()}


def projected_parts(figures: Dict[str, dict], weight: Dict[str, float]) -> Tuple[Dict[str, float], Dict[str, float]]:
    """(hours per phase of the wall, hours per timer step and the gaps between timings)
    of the projected corpus, from one pass's ``op_figures``."""
    phases: Dict[str, float] = {}
    steps: Dict[str, float] = {}
    for op, w in weight.items():
        f = figures.get(op) or {}
        split = {p: f.get(f"{p}_s") or 0.0 for p in PHASES}
        split["teardown"] = max(0.0, (f.get("overhead_s") or 0.0) - split["startup"])
        for p, v in split.items():
            phases[p] = phases.get(p, 0.0) + w * v / 3600
        for k, v in (f.get("steps_s") or {}).items():
            steps[k] = steps.get(k, 0.0) + w * v / 3600
    return ({k: round(v, 4) for k, v in phases.items()},
            {k: round(v, 4) for k, v in sorted(steps.items(), key=lambda kv: -kv[1])})


def mean_parts(passes: List[Dict[str, float]]) -> Dict[str, float]:
    """The passes' ``projected_parts`` hours, key by key (0 where a pass has none), the
    largest first."""
    keys = {k for p in passes for k in p}
    mean = {k: round(sum(p.get(k, 0.0) for p in passes) / len(passes), 4) for k in keys} if passes else {}
    return dict(sorted(mean.items(), key=lambda kv: -kv[1]))


HOST_FILE = "host.jsonl"  # in each pass dir: host_figures() after each run of the pass


def host_figures(readings: int = 9) -> dict:
    """This host, as a pass records it (``HOST_FILE``): about half of a night's
    wall is its time (start-up, collection, first calls, graph capture, the benchmark's
    work between timings), so two machines of one GPU project differently (an H100 whose
    host ran those phases 18-38% slower projected 1.59 h against another's 1.34 h, its
    graph replays the same). ``host_speed`` is zlbench's fixed interpreter loop
    (iterations per microsecond), the median of ``readings``."""
    from zlbench.backends.cpu import host_speed

    model = None
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        model = next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("model name")), None)
    except OSError:
        pass
    speed = statistics.median(host_speed() for _ in range(readings))
    return {"cpu_model": model, "cpus": os.cpu_count(), "host_speed": round(speed, 3)}


def pass_host(batch: Path) -> Optional[dict]:
    try:
        lines = (batch / HOST_FILE).read_text().splitlines()
        return json.loads(lines[-1]) if lines else None
    except (OSError, ValueError):
        return None


def report(args, ops: List[str], corpus: List[str], kinds: Dict[str, dict]) -> dict:
    runs = {name: op_figures(args.out / name) for name in ("a", "b") if (args.out / name).is_dir()}
    if not runs:
        print("no measured pass (a or b) under --out", file=sys.stderr)
        return {}
    main_pass = runs.get("a") or runs["b"]
    ok = [op for op in ops if all(r.get(op, {}).get("status") == "ok" for r in runs.values())]
    walls = {op: statistics.mean(r[op]["wall_s"] for r in runs.values()) for op in ok}
    effs = [main_pass[op]["efficiency"] for op in ok if main_pass[op]["efficiency"]]
    pointwise = [walls[op] for op in ok if kinds.get(op, {}).get("pointwise")]
    # Projection, per pass: per kind, the kind's mean wall x its operators; an operator
    # that did not finish counts at its wall so far (its timeout at most), never as zero.
    # The figure is the mean of the passes': each is a warm night of the same build, and
    # on an H200 two of them projected 1.54 and 1.45 h (walls of one operator up to 1.3 s apart).
    counts: Dict[str, int] = {}
    for op in corpus:
        kind = kinds.get(op, {}).get("kind", "(no kind)")
        counts[kind] = counts.get(kind, 0) + 1
    by_pass: Dict[str, Tuple[float, Dict[str, float]]] = {}
    parts = []
    session_s: Dict[str, float] = {}
    night: Dict[str, List[float]] = {}  # per operator, its wall per pass with the import once a session
    for name, measured in runs.items():
        # The session openers at the start-up of the others; what that cuts counts once.
        r, session_s[name] = once_per_session(measured, session_openers(args.out / name))
        for op in ok:
            night.setdefault(op, []).append(r[op]["wall_s"])
        pass_walls = {op: (r.get(op) or {}).get("wall_s") for op in ops}
        pass_walls = {op: w for op, w in pass_walls.items() if w}
        hours, means = projection(pass_walls, counts, kinds)
        if hours is not None:
            once_h = session_s[name] / 3600
            by_pass[name] = (hours + once_h, means)
            phases, steps = projected_parts(r, weights(list(pass_walls), counts, kinds))
            parts.append(({**phases, "session start": round(once_h, 4)}, steps))
    projected_h = statistics.mean(h for h, _ in by_pass.values()) if by_pass else None
    kind_means = {k: statistics.mean(m[k] for _, m in by_pass.values()) for k in counts} if by_pass else {}
    by_phase, by_step = mean_parts([p for p, _ in parts]), mean_parts([s for _, s in parts])
    # The warm pass started on a fresh machine's empty kernel and tuner caches: its walls
    # are the cold ones, projected by the same rule (an operator it did not finish, or
    # resumed after an interrupt on half-filled caches, is left out).
    cold = op_figures(args.out / "warm") if (args.out / "warm").is_dir() else {}
    resumed = not_clean_ops(args.out / "warm")
    cold_walls = {op: cold[op]["wall_s"] for op in ops
                  if (cold.get(op) or {}).get("status") == "ok" and op not in resumed}
    cut, cold_once_s = once_per_session(cold, session_openers(args.out / "warm"))
    cold_h, _ = projection({op: cut[op]["wall_s"] for op in cold_walls}, counts, kinds)
    cold_h = None if cold_h is None else cold_h + cold_once_s / 3600
    kernel = {}
    kpath = args.out / "kernel" / "kernel_mode.json"
    if kpath.is_file():
        kernel = json.loads(kpath.read_text())
    # Kernel mode pays FlagGems' import in every operator's pytest; a night of zlbench pays
    # it once a session, so each operator is set against its wall with the import once a
    # session (as the projection counts it); the raw walls' ratios beside them.
    night_walls = {op: statistics.mean(w) for op, w in night.items()}
    ratios = {op: round(kernel[op]["wall_s"] / night_walls[op], 2) for op in kernel if op in night_walls}
    raw_ratios = {op: round(kernel[op]["wall_s"] / walls[op], 2) for op in kernel if op in walls}
    figures = {
        "sample": ops, "ok_in_every_pass": len(ok), "corpus_operators": len(corpus),
        "per_operator": {op: {name: r.get(op) for name, r in runs.items()} for op in ops},
        "measure_efficiency_median": statistics.median(effs) if effs else None,
        "measure_efficiency_max": max(effs) if effs else None,
        "measure_efficiency_median_by_pass": {
            name: statistics.median(e) if e else None
            for name, e in ((name, [r[op]["efficiency"] for op in ok if r[op]["efficiency"]])
                            for name, r in runs.items())},
        "pointwise_wall_median_s": statistics.median(pointwise) if pointwise else None,
        "wall_median_s": statistics.median(walls.values()) if walls else None,
        "projected_corpus_h": None if projected_h is None else round(projected_h, 2),
        "projected_corpus_h_by_pass": {name: round(h, 3) for name, (h, _) in by_pass.items()},
        # Per pass, the seconds of its sessions' first operators' start-up beyond the
        # others' (``once_per_session``): in the projection once, not per operator.
        "session_start_s_by_pass": {name: round(v, 2) for name, v in session_s.items()},
        # Operators that did not finish count at their wall so far: then the projection
        # is a lower bound.
        "unfinished": sorted(op for op in ops if any((r.get(op) or {}).get("status") not in ("ok", None)
                                                     for r in runs.values())),
        "projected_corpus_s": None if projected_h is None else round(projected_h * 3600, 1),
        "projected_by_kind_h": {k: round(kind_means[k] * n / 3600, 3) for k, n in sorted(counts.items())
                                if k in kind_means},
        # The same hours by where an operator's wall goes (they sum to projected_corpus_h
        # when every operator finished: one cut short has no measure or overhead phase),
        # and by the timers' own steps over every timing (the first row's too).
        "projected_by_phase_h": by_phase,
        "projected_by_step_h": by_step,
        "cold_wall_s": cold_walls,
        "cold_over_warm": {op: round(w / walls[op], 2) for op, w in cold_walls.items() if op in walls},
        "projected_cold_corpus_h": None if cold_h is None else round(cold_h, 2),
        # Left out of the cold figures: not finished, or finished after an interrupt.
        "cold_left_out": sorted(op for op in ops if op not in cold_walls) if cold else [],
        "kernel_mode": kernel, "kernel_over_zlbench": ratios, "kernel_over_zlbench_raw": raw_ratios,
        "kernel_over_zlbench_median": statistics.median(ratios.values()) if ratios else None,
        # How many operators kernel mode takes at least GOALS["vs_kernel"] times as long for.
        "kernel_at_goal_ops": sum(v >= GOALS["vs_kernel"] for v in ratios.values()) if ratios else None,
        # Per pass, the host its last run recorded (None for a pass dir without one).
        "host": {name: pass_host(args.out / name) for name in runs},
    }
    if "a" in runs and "b" in runs:
        rechecked = tuple(args.out / name for name in RECHECK_PASSES)
        figures["aa"] = aa(args.out / "a", args.out / "b",
                           rechecked if all(d.is_dir() for d in rechecked) else None)
        figures["process_shifts"] = process_shifts(repeat_batches(args.out))
    print(f"\n{'operator':<28} {'kind':<14} {'st':<7} {'wall':>6} {'first':>6} {'meas':>6} {'budget':>6} "
          f"{'eff':>5} {'timer':>6} {'gap':>5}")
    for op in ops:
        f = main_pass.get(op) or {}
        print(f"{op:<28} {kinds.get(op, {}).get('kind', '-'):<14} {str(f.get('status')):<7} "
              + " ".join(f"{(f.get(k) if f.get(k) is not None else float('nan')):>{w}.{p}f}" for k, w, p in (
                  ("wall_s", 6, 1), ("first_call_s", 6, 1), ("measure_s", 6, 1), ("budget_s", 6, 1),
                  ("efficiency", 5, 2), ("timer_s", 6, 1), ("gap_s", 5, 1))))
    for key in ("measure_efficiency_median", "measure_efficiency_median_by_pass", "measure_efficiency_max",
                "pointwise_wall_median_s", "wall_median_s",
                "projected_corpus_h", "projected_corpus_h_by_pass", "projected_by_phase_h", "projected_by_step_h",
                "projected_cold_corpus_h", "kernel_over_zlbench_median", "kernel_at_goal_ops", "host"):
        print(f"{key:<32} {figures[key]}")
    print(f"kernel mode / zlbench per operator: {ratios} (raw walls, the import in the opener's: {raw_ratios})")
    if figures["unfinished"]:
        print(f"projected_corpus_h is a lower bound: {', '.join(figures['unfinished'])} did not finish "
              "(counted at their wall so far)")
    aa_fig = figures.get("aa") or {}
    checks = [
        ("measure efficiency median", figures["measure_efficiency_median"], GOALS["efficiency"], "<="),
        ("pointwise wall median (s)", figures["pointwise_wall_median_s"], GOALS["pointwise_wall_s"], "<="),
        ("projected corpus (h)", figures["projected_corpus_h"], GOALS["corpus_h"], "<="),
        (f"operators kernel mode takes >= {GOALS['vs_kernel']:g}x as long for", figures["kernel_at_goal_ops"],
         GOALS["vs_kernel_ops"], ">="),
        ("A/A median |gain| (%)", aa_fig.get("median_abs_gain_pct"), GOALS["aa_median_pct"], "<="),
        ("A/A median |gain| of the rows compared on device time (%)", aa_fig.get("median_abs_gain_pct_compared"),
         GOALS["aa_median_pct"], "<="),
        ("A/A share SAME", aa_fig.get("same_share"), GOALS["aa_same_share"], ">="),
        ("A/A share SAME of the rows compared on device time", aa_fig.get("same_share_compared"),
         GOALS["aa_same_share"], ">="),
        ("A/A share SAME or explained (throttled, two clocks, host time, other autotune pick, "
         "a placement level both read, not reproduced)",
         aa_fig.get("same_or_explained_share"),
         GOALS["aa_same_share"], ">="),
    ]
    for name, value, goal, op in checks:
        met = value is not None and (value <= goal if op == "<=" else value >= goal)
        print(f"goal: {name} {op} {goal}: " + ("not measured" if value is None else
                                              f"{'MET' if met else 'NOT MET'} ({value})"))
    ci = aa_fig.get("median_abs_gain_pct_compared_ci95")
    if ci:
        print(f"   the A/A median |gain| of the rows compared: 95% interval {ci[0]}-{ci[1]}%, operators resampled")
    if "aa" in figures:
        print(f"A/A: {json.dumps({k: v for k, v in figures['aa'].items() if k != 'not_same'})}")
        for row in figures["aa"]["not_same"]:
            print(f"   not SAME: {row}")
        shifts = figures["process_shifts"]
        print(f"whole processes against pass a ({', '.join(shifts['batches'][1:])}): median |%| "
              f"{json.dumps(shifts['median_abs_pct'])}")
        for point in shifts["points"]:
            print(f"   {point}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1, default=str) + "\n")
    return figures


def main() -> int:
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # stopped as by Ctrl-C: the batch too
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--flaggems-dir", default=os.environ.get("FLAGGEMS_DIR"))
    parser.add_argument("--backend", default="cuda")
    parser.add_argument("--device", default="0")
    parser.add_argument("--ops", default=None, help="comma list instead of the stratified sample")
    parser.add_argument("--kinds", type=int, default=KINDS)
    parser.add_argument("--per-kind", type=int, default=PER_KIND)
    parser.add_argument("--passes", default="warm,a,b,recheck,kernel,report")
    parser.add_argument("--repeats", type=int, default=4, help="fresh batches the repeat pass runs after a and b")
    parser.add_argument("--kernel-ops", type=int, default=6, help="operators FlagGems' kernel mode runs")
    parser.add_argument("--timeout", type=float, default=120.0, help="per operator and pass")
    parser.add_argument("--pass-limit", type=float, default=None,
                        help="seconds for one batch pass; then it is interrupted, and the next run resumes it")
    parser.add_argument("--time-limit", type=float, default=None,
                        help="seconds for all the passes of this run together; as --pass-limit at the end")
    parser.add_argument("--out", type=Path, default=Path(f"runs/screen-throughput-{time.strftime('%Y%m%d-%H%M%S')}"))
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    args.deadline = None if args.time_limit is None else time.monotonic() + args.time_limit

    corpus = corpus_operators(args)
    kinds = operator_kinds(args.flaggems_dir)
    ops = [o for o in args.ops.split(",") if o] if args.ops else sample(corpus, kinds, args.kinds, args.per_kind)
    missing = [o for o in ops if o not in corpus]
    if missing or not ops:
        print(f"not in the corpus: {', '.join(missing)}" if missing else "empty sample (no operators.yaml?)",
              file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"{len(ops)} operators: {', '.join(ops)}; corpus has {len(corpus)}", flush=True)
    passes = [p for p in args.passes.split(",") if p]
    for name in passes:
        if name != "report" and args.deadline is not None and pass_seconds(args) < 1:
            print(f"pass {name} not started: {limit_reached(args)}; run again with --out {args.out}", flush=True)
            return 3
        if name in ("warm", "a", "b"):
            if not run_batch(args, ops, args.out / name, args.timeout):
                # A later pass on a half-warm cache, or a report on half a pass, would mislead.
                print(f"pass {name} not finished: run again with --out {args.out} to resume it", flush=True)
                return 3
        elif name == "repeat":
            if not run_repeats(args, ops):
                print(f"repeat pass not finished: run again with --out {args.out} to resume it", flush=True)
                return 3
        elif name == "recheck":
            if not run_recheck(args):
                print(f"recheck pass not finished: run again with --out {args.out} to resume it", flush=True)
                return 3
        elif name == "kernel":
            if not run_kernel_mode(args, kernel_operators(ops, kinds, args.kernel_ops), args.out / "kernel"):
                print(f"kernel pass not finished: run again with --out {args.out} to resume it", flush=True)
                return 3
    figures = report(args, ops, corpus, kinds) if "report" in passes else {}
    return 0 if figures or "report" not in passes else 1


if __name__ == "__main__":
    sys.exit(main())

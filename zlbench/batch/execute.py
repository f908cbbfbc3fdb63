"""Running one operator: attempts, retries, dtype fallback; and one device's queue.

Per operator, the dtype ladder is: level 0 the batch's dtypes (or the operator's own),
then each fallback list. At each level an attempt that fails in a way that looks
transient (timeout, killed by a signal, a CUDA launch failure) is retried, up to
``retries`` times, unless it fails exactly as the attempt before it (same status, exit
code and last error line): then it is deterministic and retrying stops at once. A
deterministic benchmark failure (exit 1) moves to the next dtype level; timeouts,
crashes and preflight failures (exit 3: the environment, not the operator) do not.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from .. import benchenv, knobs, proc, rundir
from ..safe_read import read_text_capped
from . import classify, storage
from .activity import Activity, phase_times, split_phases, tuning_times
from .classify import Outcome
from .launch import launcher_for
from .plan import OpPlan
from .state import tail_lines
from .workers import WorkerSlot

# Inherited by every process of a batch, so a later driver finds what a killed one left.
BATCH_TAG = "ZL_BATCH_DIR"
# Inherited by every process of one attempt: what is still alive after the attempt, in
# any process group or session, was started by it and is stopped.
ATTEMPT_TAG = proc.ATTEMPT_TAG


def knob_args(settings: knobs.Settings, skip: Sequence[str] = ()) -> List[str]:
    """The measure knobs as ``zlbench run`` flags, every value spelled out so that the
    child measures exactly what the batch planned, whatever its environment says."""
    args: List[str] = []
    for name in knobs.MEASURE_KNOBS:
        if name in skip or name not in settings.values:
            continue
        if knobs.flag_text(settings.values[name]) is not None:
            args += knobs.BY_NAME[name].args(settings.values[name])  # a switch as --x / --no-x
    return args


def child_environ(base: Mapping[str, str], batch_dir: Path, extra: Mapping[str, str]) -> Dict[str, str]:
    # The batch gives each `zlbench run` its settings as flags: no variable may add to them.
    env = benchenv.without_settings(base)
    env[BATCH_TAG] = str(batch_dir)
    env.update(extra)
    return env


@dataclass
class Stopper:
    """Tells running attempts to stop: an event for loops, a pipe for poll()."""

    event: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self):
        self.read_fd, self.write_fd = os.pipe()

    def stop(self) -> None:
        if not self.event.is_set():
            self.event.set()
            os.write(self.write_fd, b"x")  # never read: stays readable for every waiter

    @property
    def stopped(self) -> bool:
        return self.event.is_set()

    def close(self) -> None:
        os.close(self.read_fd)
        os.close(self.write_fd)


@dataclass
class ExecContext:
    batch_dir: Path
    run_command: Sequence[str]
    backend: str
    settings: knobs.Settings
    env: Mapping[str, str]
    retries: int
    ladder: List[Tuple[int, Optional[Tuple[str, ...]]]]  # (level, dtypes or None)
    kill_grace_s: float
    planned_timer: str
    journal: rundir.Journal
    stopper: Stopper
    log: Callable[..., None]  # (line, show=False)
    # Warm workers by device (worker mode); a device without one runs fresh processes.
    slots: Mapping[str, WorkerSlot] = field(default_factory=dict)  # device -> its warm worker
    stall_s: Optional[float] = None  # the no-progress timeout; None: off
    # Where per-attempt cgroups go (proc.cgroup_base); None: the tag scan alone.
    cgroup_base: Optional[Path] = None


def dtype_ladder(
    dtypes: Optional[Sequence[str]], fallbacks: Sequence[Sequence[str]]
) -> List[Tuple[int, Optional[Tuple[str, ...]]]]:
    """[(0, dtypes), (1, first fallback), ...], leaving out a list already tried."""
    ladder = [(0, tuple(dtypes) if dtypes else None)]
    seen = {ladder[0][1]}
    for level, fallback in enumerate(fallbacks, 1):
        key = tuple(fallback)
        if key and key not in seen:
            ladder.append((level, key))
            seen.add(key)
    return ladder


def attempt_command(ctx: ExecContext, item: OpPlan, dtypes: Optional[Tuple[str, ...]]) -> List[str]:
    # --no-echo: the benchmark's output goes to run.log only, not also to the attempt log.
    cmd = [
        *ctx.run_command,
        "--run-dir",
        str(ctx.batch_dir / item.op),
        "--op",
        item.op,
        "--backend",
        ctx.backend,
        "--device",
        item.device,
        "--no-echo",
    ]
    cmd += knob_args(ctx.settings, skip=("backend", "dtypes", "replay_from"))
    if dtypes:
        cmd += ["--dtypes", ",".join(dtypes)]
    if item.replay_from:
        cmd += ["--replay-from", item.replay_from]
    return cmd


@dataclass
class AttemptResult:
    outcome: Outcome
    duration_s: float
    leftovers: int
    interrupted: bool
    mode: str = "fresh"  # "worker": forked by a warm worker
    phases: Dict[str, Optional[float]] = field(default_factory=dict)
    # Processes that left the attempt's process group (setsid, double fork) and were
    # still alive after it ended.
    escaped: int = 0


def run_attempt(
    ctx: ExecContext, item: OpPlan, number: int, level: int, dtypes: Optional[Tuple[str, ...]]
) -> AttemptResult:
    log_path = rundir.attempt_log_path(ctx.batch_dir, item.op, ctx.journal.session, number, level)
    cmd = attempt_command(ctx, item, dtypes)
    launcher = launcher_for(ctx.slots, item.device, ctx.run_command)
    launcher.prepare()
    # Every process of the attempt inherits this tag, whatever it does with sessions and
    # groups; where the machine allows, it also lives in the attempt's own cgroup.
    attempt_id = f"{ctx.journal.session}/{item.op}/a{number}"
    env = {**ctx.env, ATTEMPT_TAG: attempt_id}
    cgroup = (
        proc.Cgroup.create(ctx.cgroup_base, f"zlbench-{os.getpid()}-{item.op}-a{number}")
        if ctx.cgroup_base is not None
        else None
    )
    started = time.monotonic()
    started_at = time.time()
    launched = launcher.launch(cmd, env, log_path)
    child, mode = launched.child, launched.mode
    if cgroup is not None and not cgroup.add(child.pid):
        cgroup.remove()
        cgroup = None
    if cgroup is not None:
        # A worker's attempt may already have children (its prestarted benchmark process).
        for pid in proc.live_group_members(child.pid):
            cgroup.add(pid)
    ctx.journal.record(
        "attempt",
        op=item.op,
        attempt=number,
        level=level,
        dtypes=list(dtypes) if dtypes else None,
        device=item.device,
        pid=child.pid,
        log=str(log_path.relative_to(ctx.batch_dir)),
        mode=mode,
    )
    activity = Activity(log_path, ctx.batch_dir / item.op, ctx.env, ctx.stall_s)
    try:
        done = proc.wait_group(child, item.timeout_s, ctx.kill_grace_s, ctx.stopper.read_fd, activity)
    finally:
        # Whatever left the group and still lives belongs to this attempt: stopped
        # before the attempt counts as over, so nothing outlives the batch's report.
        escaped = proc.kill_tagged(ATTEMPT_TAG, attempt_id, ctx.kill_grace_s, cgroup)
        if cgroup is not None:
            cgroup.remove()
    if escaped:
        ctx.log(
            f"{item.op}: attempt {number}: stopped {len(escaped)} process(es) that left "
            f"its process group (pids {', '.join(map(str, escaped))})"
        )
    duration = time.monotonic() - started
    stopped_at = activity.stop_time(item.timeout_s, done.stalled) if done.timed_out else None
    kind = activity.kind(done.stalled, stopped_at) if done.timed_out else None
    # The benchmark's output is in run.log (--no-echo); zlbench run's own lines (its
    # preflight marker, NO_MEASUREMENT) end the attempt log.
    run_log = rundir.run_log_path(ctx.batch_dir / item.op)
    tail = tail_lines(run_log) + tail_lines(log_path)
    outcome = classify.classify(
        done.returncode,
        done.timed_out,
        tail,
        ctx.stall_s if done.stalled else item.timeout_s,
        kind,
        activity.describe(stopped_at) if done.timed_out else "",
    )
    phases = split_phases(phase_times(_lines(log_path) + _lines(run_log)), started_at, started_at + duration)
    phases.update(tuning_times(ctx.batch_dir / item.op))
    ctx.journal.record(
        "result",
        op=item.op,
        attempt=number,
        status=outcome.status,
        exit_code=done.returncode,
        interrupted=done.interrupted,
        duration_s=round(duration, 3),
        leftovers=done.leftovers_killed,
        timeout_kind=kind,
        mode=mode,
        escaped=escaped,
        **phases,
        # What resume checks the run dir against: every process of the attempt is
        # stopped by now, so these are the files the batch accepted.
        **({"proof": rundir.run_proof(ctx.batch_dir / item.op)} if outcome.status == classify.OK else {}),
    )
    launcher.finished(launched, _trouble(outcome, done, len(escaped)))
    return AttemptResult(
        outcome, duration, done.leftovers_killed, done.interrupted, mode, phases, len(escaped)
    )


def _trouble(outcome: Outcome, done: proc.Finished, escaped: int = 0) -> str:
    """Why a worker should not fork again after this attempt ("" when all was well).
    An ordinary benchmark failure (a Python error in the forked child) leaves the
    worker as it was; a crash, a timeout, a device-looking error, leftovers or a lost
    exit status are trouble."""
    if done.interrupted:
        return "the batch is stopping"
    if done.leftovers_killed:
        return f"{done.leftovers_killed} leftover process(es) killed"
    if escaped:
        return f"{escaped} process(es) escaped its process group"
    if done.returncode is None and not done.timed_out:
        return "exit status lost"
    if outcome.status in (classify.CRASHED, classify.TIMEOUT) or outcome.looks_transient:
        return f"an attempt ended {outcome.status}" + (
            f" ({outcome.error_line[:80]})" if outcome.error_line else ""
        )
    return ""


def _lines(path: Path) -> List[str]:
    """The lines of a log; [] for anything but a regular file (never blocks)."""
    try:
        return read_text_capped(path)[0].splitlines()
    except OSError:
        return []


def run_operator(
    ctx: ExecContext, item: OpPlan, on_attempt: Callable[[str, int, int], None] = lambda op, n, level: None
) -> Optional[Dict[str, object]]:
    """All attempts of one operator; its ops_status row, or None when interrupted."""
    notes: List[str] = [item.replay_note] if item.replay_note else []
    if item.replay_note:
        ctx.log(item.replay_note)
    number = 0
    total = 0.0
    last: Optional[AttemptResult] = None
    last_level, last_dtypes = 0, None
    for level, dtypes in ctx.ladder:
        previous: Optional[Outcome] = None
        deterministic = False
        for _ in range(ctx.retries + 1):
            if ctx.stopper.stopped:
                return None
            number += 1
            if number == 1 and (ctx.batch_dir / item.op).exists():
                # Nothing of this batch made it (resume set earlier runs aside): another
                # operator's process did. It is kept, never trusted.
                moved = rundir.set_aside(ctx.batch_dir, item.op, "found-before-attempt1")
                if moved:
                    ctx.log(
                        f"{item.op}: a run dir no attempt of it made was set aside in "
                        f"{moved.relative_to(ctx.batch_dir)}",
                        show=True,
                    )
                    notes.append("a run dir planted before its first attempt was set aside")
            if number > 1:
                prior = last.outcome.status if last else "partial"
                moved = rundir.set_aside(ctx.batch_dir, item.op, f"attempt{number - 1}-l{last_level}-{prior}")
                if moved:
                    ctx.log(
                        f"{item.op}: attempt {number - 1} set aside in {moved.relative_to(ctx.batch_dir)}"
                    )
            on_attempt(item.op, number, level)
            run_dir = ctx.batch_dir / item.op
            # Made here, so that a run dir removed under the attempt can be told from
            # one the operator never wrote (zlbench run takes an existing empty dir).
            try:
                run_dir.mkdir(exist_ok=True)
            except OSError as e:
                raise storage.EnvironmentFailure(
                    e.errno, f"cannot make the run dir: {e.strerror or e}", str(run_dir)
                ) from None
            before = storage.dir_id(run_dir)
            last = run_attempt(ctx, item, number, level, dtypes)
            if not last.interrupted:
                storage.after_attempt(
                    ctx.batch_dir, run_dir, before, last.outcome.status not in (classify.OK, classify.SKIPPED)
                )
            last_level, last_dtypes = level, dtypes
            total += last.duration_s
            if last.leftovers:
                notes.append(f"killed {last.leftovers} leftover process(es) after attempt {number}")
            if last.escaped:
                notes.append(
                    f"stopped {last.escaped} process(es) that escaped its process "
                    f"group after attempt {number}"
                )
            if last.interrupted:
                return None
            outcome = last.outcome
            ctx.log(
                f"{item.op}: attempt {number} level {level} -> {outcome.status}"
                + (f" ({outcome.reason})" if outcome.reason else "")
            )
            if outcome.status in (classify.OK, classify.SKIPPED) or outcome.preflight:
                return _row(ctx, item, last, number, level, dtypes, total, notes)
            if not outcome.looks_transient or (
                previous is not None and previous.signature == outcome.signature
            ):
                deterministic = True
                break
            previous = outcome
        # Only a deterministic benchmark failure may be a dtype problem.
        if not (
            deterministic
            and last is not None
            and last.outcome.status == classify.FAILED
            and not last.outcome.measured_nothing
        ):
            break
    assert last is not None
    return _row(ctx, item, last, number, last_level, last_dtypes, total, notes)


def _row(
    ctx: ExecContext,
    item: OpPlan,
    last: AttemptResult,
    attempts: int,
    level: int,
    dtypes: Optional[Tuple[str, ...]],
    total: float,
    notes: List[str],
) -> Dict[str, object]:
    run_dir = ctx.batch_dir / item.op
    identity = rundir.read_identity(run_dir)
    outcome = last.outcome
    if outcome.status == classify.OK and not rundir.is_complete(run_dir):
        # Exit 0 without .complete: the run did not finish its own bookkeeping.
        outcome = classify.Outcome(
            classify.FAILED, outcome.exit_code, None, "exit 0 but the run dir has no .complete"
        )
    return rundir.status_row(
        item.op,
        outcome.status,
        attempts=attempts,
        dtype_level=level,
        dtypes=dtypes,
        backend=identity.get("backend", ctx.backend),
        device=item.device,
        timer=identity.get("timer", ctx.planned_timer),
        duration_s=round(last.duration_s, 2),
        total_s=round(total, 2),
        exit_code="" if outcome.exit_code is None else outcome.exit_code,
        reason=outcome.reason,
        notes="; ".join(notes),
        run_dir=item.op if run_dir.exists() else "",
        run_mode=last.mode,
        timeout_kind=f"timeout_{outcome.timeout_kind}" if outcome.timeout_kind else "",
        **last.phases,
    )

"""``run_batch``: plan, resume, run every device's queue in parallel, record.

One thread per device runs its operators one after another, each in its own
``zlbench run`` subprocess and process group; the main thread only waits, so Ctrl-C
(or SIGTERM) lands there, stops every running group and leaves a resumable dir.
"""

from __future__ import annotations

import errno
import os
import signal
import socket
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Mapping, Optional, Sequence

from .. import backends, benchenv, knobs, proc, providers, rundir, tuner_cache
from ..backends import DeviceError
from ..corpus.fingerprint import changes as corpus_changes
from ..corpus.fingerprint import describe as describe_corpus_changes
from ..corpus.fingerprint import fingerprint
from ..corpus.operators import OperatorListError, load_operators, ops_in_stages
from ..markers import WORKER_FORK_REFUSED, format_marker
from ..safe_read import describe_error, resolve_path
from ..suggest import unknown_operator_hint
from .config import NO_LIMIT_AT_ZERO, PLAN_KEYS, RUN_MODES, BatchConfig, BatchResult, default_run_command
from .execute import ATTEMPT_TAG, BATCH_TAG, ExecContext, Stopper, child_environ, dtype_ladder, run_operator
from .flaggems_summary import write_summary as write_flaggems_summary
from .oplist import check_op_name, check_seconds, dedupe, load_dismiss, op_name_problem, read_op_list
from .plan import OpPlan, Plan, make_plan
from .progress import Progress
from .state import BatchError, DriverLock, last_attempts, read_durations
from .storage import EnvironmentFailure
from .workers import WorkerSlot


class _Log:
    """batch.log: the driver's event lines; the notable ones also go to the screen."""

    def __init__(self, path: Path):
        self.path = path
        self.lock = threading.Lock()
        self.screen: Optional[Callable[[str], None]] = None

    def __call__(self, line: str, show: bool = False) -> None:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        with self.lock, open(self.path, "a", encoding="utf-8") as f:
            f.write(f"{stamp} {line}\n")
        if show and self.screen is not None:
            self.screen(line)


def run_batch(config: BatchConfig) -> BatchResult:
    """Run (or, with ``config.resume``, continue) one batch. Raises BatchError when
    it cannot start; returns once every operator has a row or the batch was stopped."""
    started = time.monotonic()
    environ = dict(os.environ if config.environ is None else config.environ)
    try:
        batch_dir = resolve_path(config.out)
    except OSError as e:
        raise BatchError(f"--out {config.out}: {describe_error(e)}; give a directory") from None
    _check_batch_dir(batch_dir, config.resume)
    # A misspelt backend or operator is refused before the batch dir exists.
    _backend(_absolute(config.settings))
    early: List[tuple] = []
    selection = _operators(
        config, _absolute(config.settings), lambda line, show=False: early.append((line, show))
    )
    try:
        batch_dir.mkdir(parents=True, exist_ok=True)
        lock = DriverLock(batch_dir)
        lock.acquire()
    except OSError as e:
        raise BatchError(
            f"--out {batch_dir}: cannot use it as a batch dir ({describe_error(e)}); "
            "give a writable directory"
        ) from None
    try:
        return _run_locked(config, batch_dir, environ, started, selection, early)
    except OSError as e:
        if e.errno not in STORAGE_ERRNOS:
            raise
        raise BatchError(storage_message(e, batch_dir)) from None
    finally:
        lock.release()


# The batch's own storage failed: nothing an operator did, and nothing to retry.
STORAGE_ERRNOS = {
    errno.ENOSPC,
    errno.EDQUOT,
    errno.EROFS,
    errno.EIO,
    errno.EACCES,
    errno.EPERM,
    errno.ENOTDIR,
    errno.EFBIG,
}


def _storage_failure(e: OSError) -> bool:
    """The batch's own storage failed (its files, or what an attempt found after it):
    the batch stops; no operator is blamed."""
    return isinstance(e, EnvironmentFailure) or e.errno in STORAGE_ERRNOS


def storage_message(e: OSError, batch_dir: Path) -> str:
    where = f"{e.filename}: " if e.filename else ""
    return (
        f"{where}{describe_error(e)}: the batch stopped; what finished is kept; fix the "
        f"storage, then continue with --resume --out {batch_dir}"
    )


def _check_batch_dir(batch_dir: Path, resume: bool) -> None:
    if batch_dir.exists() and not batch_dir.is_dir():
        raise BatchError(f"--out {batch_dir} is a file; give a directory")
    for parent in batch_dir.parents:
        if parent.exists():
            if not parent.is_dir():
                raise BatchError(
                    f"--out {batch_dir}: {parent} is a file, not a directory; give a directory path"
                )
            break
    if not resume and batch_dir.is_dir() and any(batch_dir.iterdir()):
        what = f"a batch ({rundir.PLAN_FILE})" if rundir.plan_path(batch_dir).exists() else "files"
        raise BatchError(
            f"--out {batch_dir} already holds {what}; continue it with --resume, or choose a new --out"
        )


def _absolute(settings):
    """Paths the children and a later --resume must find from any cwd."""
    try:
        return rundir.absolute_settings(settings)
    except ValueError as e:
        raise BatchError(str(e)) from None


def _backend(settings):
    try:
        return backends.get_backend(settings.backend) if settings.backend else backends.detect_backend()
    except backends.UnknownBackend as e:
        raise BatchError(f"{settings.origin('backend')}: {e}") from None


def _operators(config: BatchConfig, settings, log) -> tuple:
    """(ops, per-op timeouts from the op list file, the corpus root, the rows that
    cannot run: a corpus name refused as an operator name, or a benchmark file that does
    not parse (named by its path) -> the reason its failed row gives)."""
    try:
        provider = providers.make_provider(settings)
        listing = provider.listing()
    except providers.ResolveError as e:
        raise BatchError(str(e)) from None
    root = getattr(provider, "root", None)
    corpus = listing.ops
    if listing.unparsed:
        log(
            f"{len(listing.unparsed)} benchmark file(s) do not parse; the operators they hold "
            f"are unknown: {'; '.join(f'{rel}: {why}' for rel, why in listing.unparsed.items())}",
            show=True,
        )
    explicit = [check_op_name(op, "--ops") for op in (config.ops or [])]
    file_timeouts: Dict[str, float] = {}
    if config.op_list:
        listed, file_timeouts = read_op_list(Path(config.op_list))
        explicit += listed
    if explicit or config.ops is not None or config.op_list:
        ops = dedupe(explicit)
        unknown = [op for op in ops if corpus and op not in corpus]
        if unknown and list(config.run_command) == default_run_command():
            # Caught here, before any device is touched, not as one failed preflight
            # per operator after the batch has started.
            where = "--op-list " + str(config.op_list) if config.op_list and not config.ops else "--ops"
            raise BatchError(
                f"{where}: not an operator of the corpus under {root or '?'}: "
                + "; ".join(unknown_operator_hint(op, corpus) for op in unknown)
            )
        if unknown:
            log(
                f"not in the corpus' operator list (they will fail preflight): {', '.join(unknown)}",
                show=True,
            )
    elif config.stages:
        ops = _ops_in_stages(config.stages, root, corpus, log)
    else:
        ops = list(corpus)
        if not ops:
            raise BatchError(
                f"the {settings.provider} provider lists no operators under "
                f"{getattr(provider, 'root', '?')}; give --ops or --op-list"
            )
    # Names from a corpus (marks) are someone else's text: one such as ../../x would
    # put a run dir outside --out. They are refused, each with a failed row.
    names = {op: why for op in ops if (why := op_name_problem(op))}
    if names:
        ops = [op for op in ops if op not in names]
        log(
            f"corpus names refused as operator names (not run): {', '.join(repr(op) for op in names)}",
            show=True,
        )
    refused = {op: f"not a valid operator name ({why}); not run" for op, why in names.items()}
    full = not (explicit or config.ops is not None or config.op_list or config.stages)
    if full:
        # A full-corpus batch: a file that does not parse is a failed row of its own, so
        # that the night it broke shows (pytest would fail to collect it).
        refused.update(
            (rel, f"collection error: {why}; its operators are unknown, not run")
            for rel, why in listing.unparsed.items()
        )
    if not ops and not refused:
        raise BatchError("no operators to run: --ops / --op-list are empty")
    corpus_doc = (
        fingerprint(Path(root), [*listing.ops, *listing.unparsed], settings.values.get("shape_file"))
        if root
        else None
    )
    return ops, file_timeouts, str(root) if root else None, refused, corpus_doc, full


def _ops_in_stages(stages: Sequence[str], root, corpus: Sequence[str], log) -> List[str]:
    """The corpus' operators whose stage in conf/operators.yaml is one of ``stages``."""
    if root is None:
        raise BatchError("--stages needs a FlagGems checkout (--flaggems-dir) with conf/operators.yaml")
    try:
        staged = ops_in_stages(load_operators(Path(root)), stages)
    except OperatorListError as e:
        raise BatchError(f"--stages: {e}") from None
    present = set(corpus)
    ops = [op for op in staged if op in present]
    missing = [op for op in staged if op not in present]
    if missing:
        log(
            f"--stages {','.join(stages)}: {len(missing)} operators of conf/operators.yaml have no "
            f"benchmark in the corpus (not run): {', '.join(missing)}",
            show=True,
        )
    if not ops:
        raise BatchError(
            f"--stages {','.join(stages)}: none of the {len(staged)} operators of those stages has a "
            f"benchmark under {root}"
        )
    return ops


def _check_extra_env(extra_env: Mapping[str, str]) -> None:
    """A knob's variable in extra_env would lose to the flag the batch passes: refuse it."""
    clash = sorted(k for k in extra_env if k in knobs.BY_ENV)
    if clash:
        flags = ", ".join(f"{k} ({knobs.BY_ENV[k].flag})" for k in clash)
        raise BatchError(
            f"extra_env sets {flags}: these are knobs; set them in the batch's "
            "settings instead, or every run would silently measure without them"
        )


def _replay_root(settings) -> Optional[Path]:
    value = settings.values.get("replay_from")
    if not value:
        return None
    root = Path(value)
    if not root.is_dir():
        raise BatchError(
            f"--replay-from {value}: not a directory; give an earlier batch dir "
            "(each operator replays <dir>/<op>/autotune_records)"
        )
    return root


def _settings_doc(settings) -> Dict[str, object]:
    return rundir.plan_settings(settings.values)


def plan_document(
    config: BatchConfig, plan: Plan, settings, backend_name: str, timer: str, op_timeouts: Mapping[str, float]
) -> dict:
    return {
        "backend": backend_name,
        "timer": timer,
        "devices": plan.devices,
        "shard": [config.shard.index, config.shard.count] if config.shard.count > 1 else None,
        "settings": _settings_doc(settings),
        "extra_env": dict(sorted(config.extra_env.items())),
        **{
            key: (getattr(config, key) or None) if name in NO_LIMIT_AT_ZERO else getattr(config, key)
            for name, key in PLAN_KEYS.items()
        },
        "op_timeouts": dict(sorted(op_timeouts.items())),
        "fallback_dtypes": [list(f) for f in config.fallback_dtypes],
        "dismiss_file": str(Path(config.dismiss).resolve()) if config.dismiss else None,
        "balance_from": str(Path(config.balance_from).resolve()) if config.balance_from else None,
        "run_command": list(config.run_command),
        "ops": [
            {"op": p.op, "device": p.device, "timeout_s": p.timeout_s, "replay_from": p.replay_from}
            for p in plan.ops
        ],
        "dismissed": dict(plan.dismissed),
        "stages": list(config.stages) if config.stages else None,
    }


def load_plan(batch_dir: Path) -> Optional[dict]:
    """The saved plan; None when there is none. Raises BatchError for a plan.json that
    is not one (wrong JSON type, binary, a FIFO, a newer format)."""
    try:
        return rundir.read_plan(Path(batch_dir))
    except rundir.DocumentError as e:
        raise BatchError(f"{e}; restore it or start a new --out") from None


def resume_changes(saved: dict, doc: dict) -> Dict[str, list]:
    """The batch-scope settings a resume changed: name -> [the plan's, now]."""
    old_s, new_s = saved.get("settings") or {}, doc.get("settings") or {}
    pairs = [(key, saved.get(key), doc.get(key)) for key in PLAN_KEYS.values() if key in saved]
    pairs += [
        (name, old_s.get(name), new_s.get(name))
        for name in sorted(set(old_s) | set(new_s))
        if name in knobs.BY_NAME
        and not knobs.BY_NAME[name].fixed_on_resume
        # A knob the plan predates, at its default now, is no change anybody made.
        and not (name not in old_s and new_s.get(name) == knobs.BY_NAME[name].default)
    ]
    return {key: [old, new] for key, old, new in pairs if old != new}


def _check_resume(saved: dict, doc: dict, batch_dir: Path) -> List[str]:
    """Refuse a resume that would measure differently; return warnings."""
    diffs = rundir.caliber_diffs(saved, doc, knobs.fixed_on_resume)
    if diffs:
        raise BatchError(
            f"--resume {batch_dir}: the batch was started with other settings "
            f"({'; '.join(diffs)}); resume with the same flags and environment, "
            "or start a new --out"
        )
    if saved.get("devices") != doc.get("devices"):
        return [
            f"devices changed from {','.join(saved.get('devices') or [])} to "
            f"{','.join(doc['devices'])}: operators not yet run may land on other cards"
        ]
    return []


def _check_corpus(saved: dict, doc: dict, batch_dir: Path, replan: bool, log) -> Dict[str, List[str]]:
    """Refuse a resume over a corpus that changed since the batch started, unless
    ``replan``; return what changed (empty when nothing did)."""
    old, new = saved.get("corpus"), doc.get("corpus")
    if not isinstance(old, dict) or not isinstance(new, dict):
        if new is not None and old is None:
            log(
                "resume: plan.json holds no corpus fingerprint (an older zlbench wrote it): "
                "changes to the corpus since the batch started cannot be checked",
                show=True,
            )
        return {}
    diff = corpus_changes(old, new)
    if not saved.get("full_corpus"):
        # A batch of named operators: only its own operators leaving the corpus matter.
        planned = {item.get("op") for item in saved.get("ops", [])}
        diff.pop("added", None)
        gone = [op for op in diff.pop("removed", []) if op in planned]
        if gone:
            diff["removed"] = gone
    if not diff:
        return {}
    if not replan:
        raise BatchError(
            f"--resume {batch_dir}: the corpus changed since the batch started "
            f"({describe_corpus_changes(diff)}); the rest would be measured against "
            "another corpus than what is kept. Resume with --replan to plan again over "
            "the corpus as it is now (operators added run, removed ones leave the plan; "
            "changed shapes or sources run every operator again), or start a new --out"
        )
    log(f"--replan: the corpus changed since the batch started: {describe_corpus_changes(diff)}", show=True)
    return diff


def _reconstructed_row(
    op: str, item: OpPlan, batch_dir: Path, attempts: List[dict], backend: str, timer: str
) -> Dict[str, object]:
    """An op whose run completed after its driver was killed: the row it never wrote."""
    identity = rundir.read_identity(batch_dir / op)
    last = attempts[-1] if attempts else {}
    return rundir.status_row(
        op,
        "ok",
        attempts=len(attempts) or 1,
        dtype_level=last.get("level", 0),
        dtypes=last.get("dtypes"),
        backend=identity.get("backend", backend),
        device=last.get("device", item.device),
        timer=identity.get("timer", timer),
        duration_s=identity.get("duration_s", ""),
        total_s=identity.get("duration_s", ""),
        exit_code=0,
        reason="",
        notes="completed after an earlier driver stopped",
        run_dir=op,
    )


def _prepare_resume(
    plan: Plan,
    batch_dir: Path,
    status: rundir.StatusFile,
    session: str,
    grace_s: float,
    backend: str,
    timer: str,
    log,
    keep_failed: bool = False,
) -> List[OpPlan]:
    """Stop what a killed driver left running, keep complete runs, set partial ones aside.
    ``keep_failed``: also keep operators whose row says failed/timeout/crashed (a shard
    picking up where it stopped measures only operators without a status)."""
    left = proc.kill_tagged(BATCH_TAG, str(batch_dir), grace_s)
    if left:
        log(
            f"stopped {len(left)} process(es) an earlier driver left running "
            f"(pids {', '.join(map(str, left))})",
            show=True,
        )
    rows = status.read()
    # A .complete is the batch's only where its journal accepted that attempt and the
    # run dir still holds the files it accepted (rundir.accepted_runs, proof_mismatch):
    # what the batch dir proves, on whichever host or container resumes it.
    events = list(rundir.read_journal(batch_dir))
    accepted = rundir.accepted_runs(events)
    attempts = last_attempts(events)
    todo, restored = [], []
    failed_kept = 0
    for item in plan.ops:
        run_dir = batch_dir / item.op
        unproven = (
            rundir.proof_mismatch(run_dir, accepted.get(item.op)) if rundir.is_complete(run_dir) else None
        )
        if unproven:
            moved = rundir.set_aside(batch_dir, item.op, f"resume-{session}-unverified")
            log(
                f"{item.op}: its .complete is not trusted ({unproven}); set aside in "
                f"{moved.relative_to(batch_dir)}, to run again",
                show=True,
            )
            todo.append(item)
            continue
        if rundir.is_complete(run_dir):
            if rows.get(item.op, {}).get("status") != "ok":
                restored.append(
                    _reconstructed_row(item.op, item, batch_dir, attempts.get(item.op, []), backend, timer)
                )
            continue
        if keep_failed and rows.get(item.op, {}).get("status") in rundir.BAD:
            failed_kept += 1
            continue
        if run_dir.exists():
            prior = rows.get(item.op, {}).get("status") or "partial"
            moved = rundir.set_aside(batch_dir, item.op, f"resume-{session}-{prior}")
            log(f"{item.op}: earlier {prior} run dir set aside in {moved.relative_to(batch_dir)}")
        todo.append(item)
    status.update(restored)
    done = len(plan.ops) - len(todo) - failed_kept
    kept = f", {failed_kept} failed and kept" if keep_failed else ""
    log(f"resume: {done} operator(s) complete and kept{kept}, {len(todo)} to run", show=True)
    return todo


class _Interrupt:
    """SIGTERM/SIGHUP stop the batch like Ctrl-C (only the main thread may set handlers)."""

    def __init__(self, stopper: Stopper):
        self.stopper = stopper
        self.previous: Dict[int, object] = {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGHUP):
                self.previous[sig] = signal.signal(sig, lambda *_: self.stopper.stop())
        return self

    def __exit__(self, *exc):
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)


@dataclass
class _Prepared:
    settings: knobs.Settings
    backend_name: str
    timer: str
    ops: List[str]
    plan: Plan
    doc: dict
    corpus_root: Optional[str] = None
    refused: Dict[str, str] = field(default_factory=dict)


def _prepare(
    config: BatchConfig, batch_dir: Path, environ: Mapping[str, str], log, selection: Optional[tuple] = None
) -> _Prepared:
    """Everything decided before any operator runs; raises BatchError. ``selection``:
    what ``_operators`` already returned for this config."""
    settings = _absolute(config.settings)
    backend = _backend(settings)
    if config.run_mode not in RUN_MODES:
        raise BatchError(f"--run-mode {config.run_mode!r}: choose one of {', '.join(RUN_MODES)}")
    if config.run_mode == "worker" and list(config.run_command) != default_run_command():
        raise BatchError(
            "--run-mode worker runs zlbench run's own code in forked children; a "
            "custom run command needs --run-mode fresh"
        )
    try:
        found = backend.devices(environ, list(config.devices) if config.devices else None)
    except DeviceError as e:
        raise BatchError(f"--devices: {e}") from None
    if not found:
        raise BatchError(
            f"no {backend.name} device found; pass --devices, or --backend cpu to run on this machine's CPU"
        )
    _check_extra_env(config.extra_env)
    _check_timeouts(config)
    _check_shape_file(settings)
    if list(config.run_command) == default_run_command():
        _check_children_import_us(child_environ(environ, batch_dir, config.extra_env))
    ops, file_timeouts, corpus_root, refused, corpus_doc, full = selection or _operators(
        config, settings, log
    )
    ops = [op for op in ops if config.shard.holds(op)]
    refused = {op: why for op, why in refused.items() if config.shard.holds(op)}
    dismissed = load_dismiss(Path(config.dismiss)) if config.dismiss else {}
    timer = backends.choose_timer(backend, settings.values.get("enable_cudagraph", True))
    replay_root = _replay_root(settings)
    op_timeouts = {**file_timeouts, **config.op_timeouts}
    durations = read_durations(Path(config.balance_from)) if config.balance_from else None
    plan = make_plan(
        ops,
        [d.index for d in found],
        dismissed,
        config.timeout_s,
        op_timeouts,
        replay_root,
        {op: Path(p) for op, p in config.replay_dirs.items()},
        config.shard,
        durations,
    )
    if replay_root and plan.ops and all(p.replay_note for p in plan.ops):
        log(
            f"--replay-from {replay_root} has no <op>/autotune_records for any operator; is it "
            "an earlier batch dir? Every operator runs without replay.",
            show=True,
        )
    doc = plan_document(config, plan, settings, backend.name, timer, op_timeouts)
    doc["not_run"] = dict(sorted(refused.items()))
    # What the batch measures against; --resume compares it (see _check_corpus).
    doc["corpus"] = corpus_doc
    doc["full_corpus"] = full
    return _Prepared(settings, backend.name, timer, ops, plan, doc, corpus_root, refused)


@dataclass
class DryRun:
    """What ``zlbench batch --dry-run`` shows: the batch as it would start."""

    out: Path
    resume: bool
    config: BatchConfig
    prepared: _Prepared
    notes: List[str] = field(default_factory=list)


def dry_run_plan(config: BatchConfig) -> DryRun:
    """Plan the batch as ``run_batch`` would, without creating, locking or running
    anything; raises BatchError where the batch would not start."""
    environ = dict(os.environ if config.environ is None else config.environ)
    batch_dir = Path(config.out).expanduser().resolve()
    _check_batch_dir(batch_dir, config.resume)
    notes: List[str] = []
    saved = load_plan(batch_dir) if config.resume else None
    if config.resume and saved is None:
        raise BatchError(f"--resume {batch_dir}: no plan.json there, so nothing to continue")
    prepared = _prepare(config, batch_dir, environ, lambda line, show=False: notes.append(line))
    if saved:
        # As the real resume: a changed caliber setting is refused, a device change noted,
        # a changed corpus refused without --replan (with it, what changed is shown).
        notes.extend(_check_resume(saved, prepared.doc, batch_dir))
        _check_corpus(
            saved, prepared.doc, batch_dir, config.replan, lambda line, show=False: notes.append(line)
        )
    return DryRun(batch_dir, config.resume, config, prepared, notes)


def _check_children_import_us(env: Mapping[str, str]) -> None:
    """The operators' processes must import this zlbench, from this cwd and with their
    environment (a PYTHONPATH, a folder named zlbench/): else every attempt fails alike,
    and that is a broken environment, not a batch of broken operators."""
    import subprocess
    import sys

    import zlbench

    probe = "import zlbench, sys; sys.stdout.write(zlbench.__file__ or '')"
    cmd = (
        [sys.executable, "-P", "-c", probe]
        if sys.version_info >= (3, 11)
        else [sys.executable, "-c", "import sys; del sys.path[0]; " + probe]
    )
    try:
        out = subprocess.run(cmd, env=dict(env), capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as e:
        raise BatchError(f"cannot start {sys.executable} for the operators ({e})") from None
    ours = Path(zlbench.__file__).resolve().parent
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["no output"])[-1]
        raise BatchError(
            f"the operators' processes cannot import zlbench ({last}); check "
            f"PYTHONPATH and the cwd ({os.getcwd()})"
        )
    theirs = Path(out.stdout.strip()).resolve().parent if out.stdout.strip() else None
    if theirs != ours:
        raise BatchError(
            f"the operators' processes would import zlbench from {theirs}, not "
            f"this one ({ours}); check PYTHONPATH"
        )


def _check_shape_file(settings) -> None:
    """Once, before any operator: a shape file every attempt would choke on."""
    from ..run.preflight import PreflightFailed, check_shape_file

    try:
        check_shape_file(settings.values.get("shape_mode") or "upstream", settings.values.get("shape_file"))
    except PreflightFailed as e:
        raise BatchError(f"--shape-file: {e}") from None


def _check_timeouts(config: BatchConfig) -> None:
    """inf / nan / 1e400 would overflow the wait after the child started: refuse now."""
    try:
        check_seconds(float(config.timeout_s or 0), "--timeout")
        check_seconds(float(config.kill_grace_s), "--kill-grace")
        for op, limit in config.op_timeouts.items():
            check_seconds(float(limit or 0), f"--op-timeout {op}")
    except (TypeError, ValueError, OverflowError):
        raise BatchError("--timeout / --kill-grace / --op-timeout: not a number of seconds") from None


def _run_locked(
    config: BatchConfig,
    batch_dir: Path,
    environ: Dict[str, str],
    started: float,
    selection: Optional[tuple] = None,
    early: Sequence[tuple] = (),
) -> BatchResult:
    log = _Log(rundir.batch_log_path(batch_dir))
    quiet = config.progress == "off"
    log.screen = None if quiet else _print_line
    for line, show in early:
        log(line, show=show)
    saved = load_plan(batch_dir) if config.resume else None
    if config.resume and saved is None:
        # A driver killed before it wrote its plan: what it was asked to run is unknown,
        # and the default corpus is not it.
        raise BatchError(
            f"--resume {batch_dir}: no plan.json there, so nothing to continue "
            "(the batch never started, or its driver was stopped before writing "
            "its plan); start it without --resume and a new --out"
        )
    prep = _prepare(config, batch_dir, environ, log, selection)
    plan = prep.plan
    warnings = _check_resume(saved, prep.doc, batch_dir) if saved else []
    changed = _check_corpus(saved, prep.doc, batch_dir, config.replan, log) if saved else {}
    settings_changed = resume_changes(saved, prep.doc) if saved else {}
    for name, (old, new) in settings_changed.items():
        log(f"resume: {name} {old!r} -> {new!r} (a batch setting; plan.json records it)", show=True)
    session = f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    prep.doc["sessions"] = [
        *(saved or {}).get("sessions", []),
        {
            "session": session,
            "pid": os.getpid(),
            "resume": bool(saved),
            "host": socket.gethostname(),
            **_scheduler_job(environ),
            **({"replanned": changed} if changed else {}),
            **({"changed": settings_changed} if settings_changed else {}),
        },
    ]
    if saved:
        # A batch started over the whole corpus stays one (a resume names its ops).
        prep.doc["full_corpus"] = bool(saved.get("full_corpus"))
        _keep_unasked(prep.doc, saved)
        if changed.get("removed"):
            gone = set(changed["removed"])
            prep.doc["ops"] = [item for item in prep.doc["ops"] if item["op"] not in gone]
    rundir.write_plan(batch_dir, prep.doc)
    if changed.get("shape_files") or changed.get("sources"):
        # Re-planned over changed shapes or benchmark code: nothing measured before
        # belongs with what is measured now, so every operator runs again (the earlier
        # run dirs are kept under set-aside/).
        for item in plan.ops:
            if (batch_dir / item.op).exists():
                rundir.set_aside(batch_dir, item.op, f"replan-{session}")
        log(f"--replan: {len(plan.ops)} operator(s) run again against the changed corpus", show=True)

    journal = rundir.Journal(batch_dir, session)
    journal.record("session", pid=os.getpid(), resume=bool(saved))
    status = rundir.StatusFile(batch_dir)
    status.update(
        rundir.status_row(op, "dismissed", reason=reason, backend=prep.backend_name)
        for op, reason in plan.dismissed.items()
    )
    status.update(
        rundir.status_row(
            op,
            "failed",
            attempts=0,
            backend=prep.backend_name,
            reason=why,
        )
        for op, why in prep.refused.items()
    )
    for line in warnings:
        log(line, show=True)
    todo = (
        _prepare_resume(
            plan,
            batch_dir,
            status,
            session,
            config.kill_grace_s,
            prep.backend_name,
            prep.timer,
            log,
            config.keep_failed,
        )
        if saved
        else list(plan.ops)
    )

    cgroups, reaping = proc.cgroup_base()
    log(
        f"stray processes: {reaping}; every attempt's processes carry {ATTEMPT_TAG} and are found by it"
        if cgroups
        else f"stray processes: found by the {ATTEMPT_TAG} / {BATCH_TAG} environment tags "
        f"(no per-attempt cgroup: {reaping})"
    )
    stopper = Stopper()
    todo_names = {p.op for p in todo}
    queues = {d: [p for p in items if p.op in todo_names] for d, items in plan.queues().items()}
    env = child_environ(environ, batch_dir, config.extra_env)
    # Benchmark processes at once on this host, one per device with work: the compile
    # pools' share of the CPUs.
    env[benchenv.HOST_RUNS] = str(max(1, sum(1 for q in queues.values() if q)))
    if config.shard.count > 1:
        # A screen's hosts may share a home dir: FlagGems' tuning DB stays per host.
        per_host = tuner_cache.per_host_flaggems_cache(env, socket.gethostname())
        env.update(per_host)
        if per_host:
            log(
                f"FlagGems tuning DB per host: FLAGGEMS_CACHE_DIR={per_host['FLAGGEMS_CACHE_DIR']} "
                "(set FLAGGEMS_CACHE_DIR or FLAGGEMS_DB_URL to choose another)"
            )
    slots: Dict[str, WorkerSlot] = {}
    ctx = ExecContext(
        batch_dir=batch_dir,
        run_command=list(config.run_command),
        backend=prep.backend_name,
        settings=prep.settings,
        env=env,
        slots=slots,
        stall_s=config.stall_timeout_s or None,
        retries=max(0, int(config.retries)),
        ladder=dtype_ladder(prep.settings.values.get("dtypes"), config.fallback_dtypes),
        kill_grace_s=config.kill_grace_s,
        planned_timer=prep.timer,
        journal=journal,
        stopper=stopper,
        log=log,
        cgroup_base=cgroups,
    )
    log(
        f"session {session}: {len(todo)} operator(s) on {prep.backend_name} devices "
        f"{','.join(plan.devices)}; {len(plan.dismissed)} dismissed"
    )
    progress = Progress(
        {d: len(q) for d, q in queues.items()},
        mode=config.progress,
        expected={d: [plan.expected.get(p.op) for p in q] for d, q in queues.items()},
    )
    broken: List[OSError] = []
    try:
        slots.update(
            _worker_slots(config, prep, [d for d, q in queues.items() if q], env, batch_dir, stopper, log)
        )
        with progress, _Interrupt(stopper):
            log.screen = None if quiet else progress.message
            threads = [
                _device_thread(f"device-{d}", ctx, d, q, status, progress, broken)
                for d, q in queues.items()
                if q
            ]
            for t in threads:
                t.start()
            interrupted = _wait_for(threads, stopper, log) or stopper.stopped
    finally:
        log.screen = None if quiet else _print_line
        for slot in slots.values():
            slot.close()
        stopper.close()
    # Before the report: nothing this batch started may outlive it (escaped processes
    # of any attempt, any worker a plugin started), whatever each attempt's sweep missed.
    left = proc.kill_tagged(BATCH_TAG, str(batch_dir), config.kill_grace_s)
    if left:
        log(
            f"stopped {len(left)} process(es) of this batch still running after its operators "
            f"(pids {', '.join(map(str, left))})",
            show=True,
        )
    if broken:
        raise BatchError(storage_message(broken[0], batch_dir))
    _check_kept(batch_dir, status, log)
    if status.rewrite():
        log(
            f"{rundir.STATUS_FILE} was changed by another process during the batch; written "
            "again from the driver's own rows",
            show=True,
        )
    final_rows = status.read()
    try:
        write_flaggems_summary(batch_dir, final_rows, plan.devices, time.monotonic() - started)
    except (OSError, ValueError) as e:
        why = describe_error(e) if isinstance(e, OSError) else str(e)
        log(f"could not write FlagGems' {rundir.FG_SUMMARY} ({why}); the batch is unaffected", show=True)
    journal.record("session_end", interrupted=interrupted)
    return BatchResult(
        batch_dir,
        final_rows,
        sorted([*prep.ops, *prep.refused]),
        interrupted,
        time.monotonic() - started,
        list(plan.devices),
    )


def _check_kept(batch_dir: Path, status: rundir.StatusFile, log) -> None:
    """Operators that finished ok but whose run dir is gone by the batch's end (removed
    by something outside it): their row says so, and --resume measures them again."""
    gone = []
    for op, row in status.read().items():
        if (
            row.get("status") == "ok"
            and row.get("run_dir")
            and not rundir.is_complete(batch_dir / row["run_dir"])
        ):
            note = "; ".join(t for t in (row.get("notes"), "its run dir was removed after it finished") if t)
            gone.append({**row, "notes": note})
    if gone:
        status.update(gone)
        log(
            f"{len(gone)} operator(s) finished ok but their run dirs are gone (removed outside the "
            f"batch): {', '.join(r['operator'] for r in gone)}; --resume measures them again",
            show=True,
        )


def _keep_unasked(doc: dict, saved: dict) -> None:
    """``--resume --ops a`` runs a, but the batch stays the whole batch: operators the
    saved plan holds and this resume did not ask for stay in plan.json, so a later
    plain ``--resume`` still covers them."""
    asked = {item["op"] for item in doc["ops"]} | set(doc["dismissed"])
    doc["ops"] = sorted(
        [*doc["ops"], *(item for item in saved.get("ops", []) if item.get("op") not in asked)],
        key=lambda item: item["op"],
    )
    doc["dismissed"] = dict(
        sorted(
            {
                **{op: why for op, why in saved.get("dismissed", {}).items() if op not in asked},
                **doc["dismissed"],
            }.items()
        )
    )


def _scheduler_job(environ: Mapping[str, str]) -> Dict[str, str]:
    """The Slurm array task or Kubernetes pod this driver runs in, for `slurm status`."""
    if environ.get("SLURM_ARRAY_JOB_ID"):
        return {"slurm_job": f"{environ['SLURM_ARRAY_JOB_ID']}_{environ.get('SLURM_ARRAY_TASK_ID', '')}"}
    if environ.get("SLURM_JOB_ID"):
        return {"slurm_job": environ["SLURM_JOB_ID"]}
    if environ.get("JOB_COMPLETION_INDEX"):
        return {"pod": environ.get("HOSTNAME", ""), "completion_index": environ["JOB_COMPLETION_INDEX"]}
    return {}


def _worker_slots(
    config: BatchConfig,
    prep: _Prepared,
    devices: Sequence[str],
    env: Mapping[str, str],
    batch_dir: Path,
    stopper: Stopper,
    log,
) -> Dict[str, WorkerSlot]:
    """Worker mode: one warm worker per device slot. Fresh mode: none."""
    if config.run_mode != "worker":
        return {}
    if not sys.platform.startswith("linux"):
        # Waiting on a worker's child needs pidfds or /proc: Linux only.
        log(
            format_marker(WORKER_FORK_REFUSED, reason="not_linux", detail=sys.platform)
            + " (fresh processes for every operator)",
            show=True,
        )
        return {}
    slots = {
        d: WorkerSlot(
            d,
            env,
            rundir.worker_log_dir(batch_dir),
            log,
            prep.corpus_root,
            config.worker_max_ops,
            config.kill_grace_s,
            stopper.read_fd,
            config.worker_prestart,
            prep.backend_name,
        )
        for d in devices
    }
    for slot in slots.values():
        slot.spawn()
    return slots


def _print_line(line: str) -> None:
    print(line, flush=True)


def _wait_for(threads: Sequence[threading.Thread], stopper: Stopper, log) -> bool:
    """Wait for the device threads; Ctrl-C here stops them (their groups are killed) and
    waits. Each thread sets its own ``done`` event: a Thread.join() that Ctrl-C
    interrupts can leave is_alive() False while the thread still runs (CPython), and the
    driver would exit under a running attempt."""
    interrupted = False
    while not all(t.done.is_set() for t in threads):  # type: ignore[attr-defined]
        try:
            for t in threads:
                t.done.wait(timeout=0.5)  # type: ignore[attr-defined]
        except KeyboardInterrupt:
            if not interrupted:
                log(
                    "interrupted: stopping the running operators (their groups get SIGTERM, then SIGKILL)",
                    show=True,
                )
            interrupted = True
            stopper.stop()
    for t in threads:
        t.join()
    return interrupted


def _device_thread(name: str, *args) -> threading.Thread:
    done = threading.Event()

    def body():
        try:
            _device_worker(*args)
        finally:
            slot = args[0].slots.get(args[1])
            if slot is not None:  # its queue is done: its worker has nothing left to fork
                slot.close()
            done.set()

    thread = threading.Thread(target=body, name=name, daemon=True)
    thread.done = done  # type: ignore[attr-defined]
    return thread


def _device_worker(
    ctx: ExecContext,
    device: str,
    queue: Sequence[OpPlan],
    status: rundir.StatusFile,
    progress: Progress,
    broken: List[OSError],
) -> None:
    try:
        _run_queue(ctx, device, queue, status, progress)
    except OSError as e:
        if not _storage_failure(e):
            raise
        # The batch's own files cannot be written (disk full, read-only): no operator is
        # to blame, and none can be recorded. Stop the batch; the driver says why.
        broken.append(e)
        ctx.stopper.stop()


def _spawn_failed(ctx: ExecContext, item: OpPlan, device: str, e: Exception) -> Dict[str, object]:
    ctx.log(f"{item.op}: batch error: {e!r}", show=True)
    ctx.log(traceback.format_exc())
    return rundir.status_row(
        item.op, "failed", attempts=0, device=device, backend=ctx.backend, reason=f"batch error: {e!r}"
    )


def _run_queue(
    ctx: ExecContext, device: str, queue: Sequence[OpPlan], status: rundir.StatusFile, progress: Progress
) -> None:
    for item in queue:
        if ctx.stopper.stopped:
            return
        progress.started(device, item.op)
        try:
            row = run_operator(ctx, item, lambda op, n, level: progress.attempt(device, op, n, level))
        except OSError as e:
            if _storage_failure(e):
                raise
            row = _spawn_failed(ctx, item, device, e)
        except Exception as e:  # a broken spawn must not take the other operators down
            row = _spawn_failed(ctx, item, device, e)
        if row is None:
            ctx.log(f"{item.op}: interrupted; it runs again on --resume")
            return
        status.update([row])
        progress.finished(device, item.op, row)

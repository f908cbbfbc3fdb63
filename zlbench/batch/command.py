"""``zlbench batch``: the click front of ``run_batch``."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import click
from click.core import ParameterSource

from .. import knobs
from ..clihelp import GroupedCommand
from ..corpus.operators import parse_stages
from ..rundir import plan_path, shard_dir_name
from .config import (
    DEFAULT_FALLBACK_DTYPES,
    DEFAULT_KILL_GRACE_S,
    DEFAULT_RETRIES,
    DEFAULT_TIMEOUT_S,
    DEFAULT_WORKER_MAX_OPS,
    FINITE_SECONDS,
    RUN_MODES,
    BatchConfig,
    default_out_dir,
    parse_devices_flag,
    resolve_shard,
)
from .driver import dry_run_plan, load_plan, run_batch
from .dryrun import render_dry_run
from .oplist import default_dismiss_path, parse_op_timeouts, parse_ops_flag
from .plan import HostShard
from .report import render_report
from .state import BatchError


def parse_fallback_dtypes(values: Sequence[str]) -> Tuple[Tuple[str, ...], ...]:
    """``--fallback-dtypes float32 --fallback-dtypes float16,bfloat16``; ``none`` disables."""
    if any(v.strip().lower() == "none" for v in values):
        return ()
    levels = []
    for value in values:
        names, bad = knobs.split_dtypes(value)
        if bad or not names:
            raise click.BadParameter(
                f"{value!r}: unknown dtype {', '.join(bad) or '(empty)'}; use a comma list of "
                f"{', '.join(knobs.KNOWN_DTYPES)}, or 'none'",
                param_hint="--fallback-dtypes",
            )
        levels.append(names)
    return tuple(levels)


def _given(ctx: click.Context, name: str) -> bool:
    return ctx.get_parameter_source(name) == ParameterSource.COMMANDLINE


_CORPUS_KNOBS = ["provider", "flaggems_dir", "backend"]
_WORKER_KNOBS = ["parallel_warmup_gpus", "compile_workers", "pytest_plugins", "output_cap_mb"]
OPTION_GROUPS = [
    (
        "Common options",
        ["out", "resume", "replan", "devices", "ops", "op_list", "stages", "timeout", "dry_run"],
    ),
    ("Corpus and operators", [*_CORPUS_KNOBS, "dismiss", "op_timeout"]),
    (
        "Measurement caliber (recorded in run_identity.json; see docs/cli.md)",
        [n for n in knobs.MEASURE_KNOBS if knobs.BY_NAME[n].caliber and n not in _CORPUS_KNOBS],
    ),
    ("Failures and retries", ["retries", "fallback_dtypes", "kill_grace", "stall_timeout"]),
    ("Workers", ["run_mode", "worker_max_ops", "worker_prestart", *_WORKER_KNOBS]),
    ("Scheduler (several hosts; docs/schedulers.md)", ["shard", "shards", "balance_from"]),
    ("Output", ["progress"]),
]


@click.command(
    "batch",
    cls=GroupedCommand,
    option_groups=OPTION_GROUPS,
    short_help="Measure many operators across devices, surviving hangs, crashes and restarts.",
)
@knobs.knob_options(knobs.MEASURE_KNOBS)
@click.option(
    "--out",
    "out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="The batch dir. [default: $ZL_OUT/batch-<timestamp>, ZL_OUT defaulting to ./runs]",
)
@click.option(
    "--resume",
    is_flag=True,
    help="Continue the batch in --out with its plan.json's settings: complete operators kept, the rest run.",
)
@click.option(
    "--replan",
    is_flag=True,
    help="With --resume: plan again over a corpus that changed since the batch started "
    "(see docs/cli.md); without it such a resume is refused.",
)
@click.option(
    "--devices",
    "--gpus",
    "devices",
    default=None,
    metavar="0,1,...",
    help="Devices in your numbering (within any visibility variable set); cpu: worker slots. "
    "[default: every device found; cpu: one slot]",
)
@click.option("--ops", "ops", default=None, metavar="a,b,c", help="Only these operators.")
@click.option(
    "--stages",
    "stages",
    default=None,
    metavar="stable[,beta,alpha]",
    help="Only operators of these stages in FlagGems' conf/operators.yaml ('all': the three). "
    "[default: the whole corpus; FlagGems' run_tests.py: stable]",
)
@click.option(
    "--dry-run",
    "dry_run",
    is_flag=True,
    help="Print the plan (operators per device, timeouts, dismissed, settings); run and write nothing.",
)
@click.option(
    "--op-list",
    "op_list",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="File of operators, one a line, optionally with a timeout ('mm 1800'); '#' comments.",
)
@click.option(
    "--dismiss",
    "dismiss",
    default=None,
    metavar="FILE",
    help="Dismiss list: its operators are not run, shown as 'dismissed'. 'none': no list. "
    "[default: ops/dismiss.yaml if present]",
)
@click.option(
    "--timeout",
    "timeout",
    type=FINITE_SECONDS,
    default=None,
    metavar="SECONDS",
    help=f"Per operator and attempt (its process group is stopped); 0: none. [default: {DEFAULT_TIMEOUT_S:g}]",
)
@click.option(
    "--op-timeout",
    "op_timeout",
    multiple=True,
    metavar="OP=SECONDS",
    help="Timeout for one operator (repeatable): --op-timeout mm=3600.",
)
@click.option(
    "--retries",
    "retries",
    type=click.IntRange(min=0),
    default=None,
    help=f"Extra attempts for failures that look transient (timeout, signal). [default: {DEFAULT_RETRIES}]",
)
@click.option(
    "--fallback-dtypes",
    "fallback_dtypes",
    multiple=True,
    metavar="DTYPES",
    help="Dtype lists tried after a deterministic failure (repeatable; 'none'). [default: float32, then float16]",
)
@click.option(
    "--kill-grace",
    "kill_grace",
    type=FINITE_SECONDS,
    default=None,
    metavar="SECONDS",
    help=f"Between SIGTERM and SIGKILL when a group is stopped. [default: {DEFAULT_KILL_GRACE_S:g}]",
)
@click.option(
    "--shard",
    "shard",
    default=None,
    metavar="K/N|auto",
    help="Host shard K of N of a screen, into <out>/shard-K-of-N/; auto: from the Slurm array "
    "task or Kubernetes index. Needs --out.",
)
@click.option(
    "--shards",
    "shards",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="With --shard auto: the screen's shard count (Kubernetes needs it; wins over Slurm's).",
)
@click.option(
    "--stall-timeout",
    "stall_timeout",
    type=click.FloatRange(min=0),
    default=None,
    metavar="SECONDS",
    envvar="ZL_STALL_TIMEOUT",
    help="Stop an attempt after this long without output, rows or cache growth; 0: off. "
    "Env: ZL_STALL_TIMEOUT. [default: 0]",
)
@click.option(
    "--run-mode",
    "run_mode",
    type=click.Choice(RUN_MODES),
    default=None,
    envvar="ZL_RUN_MODE",
    help="worker: a warm worker per device forks each attempt; fresh: a new `zlbench run` "
    "each. Env: ZL_RUN_MODE. [default: worker]",
)
@click.option(
    "--worker-max-ops",
    "worker_max_ops",
    type=click.IntRange(min=1),
    default=None,
    envvar="ZL_WORKER_MAX_OPS",
    help=f"Replace a worker after this many attempts. Env: ZL_WORKER_MAX_OPS. [default: {DEFAULT_WORKER_MAX_OPS}]",
)
@click.option(
    "--worker-prestart/--no-worker-prestart",
    "worker_prestart",
    default=None,
    envvar="ZL_WORKER_PRESTART",
    help="Ready the next operator's process, library imported, while one runs. "
    "Env: ZL_WORKER_PRESTART. [default: on]",
)
@click.option(
    "--balance-from",
    "balance_from",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    metavar="DIR",
    help="Plan devices longest-first from an earlier batch's durations. [default: stable hash]",
)
@click.option(
    "--progress",
    "progress",
    type=click.Choice(["auto", "live", "plain", "off"]),
    default="auto",
    show_default=True,
    help="Live table on a terminal, plain lines otherwise.",
)
@click.pass_context
def batch_command(
    ctx,
    out,
    resume,
    devices,
    ops,
    op_list,
    dismiss,
    timeout,
    op_timeout,
    retries,
    fallback_dtypes,
    kill_grace,
    shard,
    shards,
    stall_timeout,
    run_mode,
    worker_max_ops,
    worker_prestart,
    balance_from,
    progress,
    stages,
    dry_run,
    replan,
    **flags,
):
    """Measure many operators across devices: every operator of the corpus (or --ops,
    --op-list, --stages), one `zlbench run` each, sharded over --devices.

    \b
    Writes <out>/<op>/ run dirs, ops_status.csv, plan.json and summary.json (FlagGems'
    run_tests.py format). Exit: 0 all ok, skipped or dismissed; 1 some failed, timed
    out or crashed; 2 usage error, could not start, or its storage failed (disk full,
    a dir removed); 130 interrupted (--resume).
    Every option, and the caliber knobs in full: docs/cli.md.
    """
    try:
        config = build_config(
            ctx,
            out,
            resume,
            devices,
            ops,
            op_list,
            dismiss,
            timeout,
            op_timeout,
            retries,
            fallback_dtypes,
            kill_grace,
            progress,
            flags,
            shard=shard,
            shards=shards,
            stall_timeout=stall_timeout,
            run_mode=run_mode,
            worker_max_ops=worker_max_ops,
            worker_prestart=worker_prestart,
            balance_from=balance_from,
            stages=stages,
            replan=replan,
        )
        if dry_run:
            click.echo(render_dry_run(dry_run_plan(config)))
            sys.exit(0)
        if config.shard.count > 1:
            how = (
                " (continuing: operators without a status)"
                if config.keep_failed
                else " (resuming)"
                if config.resume
                else ""
            )
            click.echo(f"zlbench batch: shard {config.shard} into {config.out}{how}", err=True)
        result = run_batch(config)
    except BatchError as e:
        raise BatchStartError(str(e)) from None
    except KeyboardInterrupt:
        # Before the operators started (or after they stopped): nothing half-written.
        click.echo(
            f"zlbench batch: interrupted; continue with --resume --out {out or '<batch dir>'}", err=True
        )
        sys.exit(130)
    click.echo(
        render_report(
            result.out, result.rows, result.planned, result.wall_s, result.interrupted, devices=result.devices
        )
    )
    sys.exit(result.exit_code)


class BatchStartError(click.ClickException):
    """A batch that cannot start: exit 2, like click's usage errors (1 means failures)."""

    exit_code = 2


def _dismiss_path(flag: Optional[str], saved: Optional[dict]) -> Optional[Path]:
    """--dismiss FILE / none; on resume the plan's list; else ops/dismiss.yaml if present."""
    if flag is None:
        if saved is not None:
            return Path(saved["dismiss_file"]) if saved.get("dismiss_file") else None
        return default_dismiss_path()
    if flag.strip().lower() in ("none", ""):
        return None
    if not Path(flag).is_file():
        raise BatchError(f"--dismiss {flag}: no such file; give a dismiss YAML or 'none'")
    return Path(flag)


def _stages(text: Optional[str], ops: Optional[str], op_list) -> Optional[Tuple[str, ...]]:
    """--stages stable,beta; None when not given. It selects operators, as --ops and
    --op-list do: one of the three (FlagGems' run_tests.py: --ops wins silently)."""
    if text is None:
        return None
    if ops or op_list:
        raise click.UsageError("--stages selects operators, as --ops and --op-list do: give one of them")
    try:
        return parse_stages(text)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--stages") from None


def _first_set(*values):
    """The first value that is not None (flag, then the resumed batch's, then default)."""
    return next((v for v in values if v is not None), None)


def _balance_from(flag: Optional[Path], saved: Optional[dict]) -> Optional[Path]:
    if flag is not None:
        if not flag.is_dir():
            raise BatchError(
                f"--balance-from {flag}: not a directory; give an earlier batch dir (it holds ops_status.csv)"
            )
        return flag
    value = (saved or {}).get("balance_from")
    return Path(value) if value else None


def build_config(
    ctx,
    out,
    resume,
    devices,
    ops,
    op_list,
    dismiss,
    timeout,
    op_timeout,
    retries,
    fallback_dtypes,
    kill_grace,
    progress,
    flags,
    shard=None,
    shards=None,
    environ=None,
    stall_timeout=None,
    run_mode=None,
    worker_max_ops=None,
    worker_prestart=None,
    balance_from=None,
    stages=None,
    replan=False,
) -> BatchConfig:
    """The BatchConfig of batch's flags; ``environ`` (default os.environ) feeds --shard auto."""
    keep_failed = False
    host = resolve_shard(shard, shards, os.environ if environ is None else environ)
    if host.count > 1:
        if out is None:
            raise BatchError(
                f"--shard {shard} needs --out DIR: every shard of the screen "
                "writes DIR/shard-K-of-N/ on a file system all hosts share"
            )
        out = Path(out) / shard_dir_name(host.index, host.count)
        # A shard runs again where it stopped (the command line is the same every time):
        # only operators without a status run; --resume also measures failed ones again.
        keep_failed = not resume and plan_path(out).is_file()
        resume = resume or keep_failed
    saved = None
    if resume:
        if out is None:
            raise BatchError("--resume needs --out DIR: the batch to continue")
        saved = load_plan(out)
        if saved and host.count == 1 and saved.get("shard"):
            host = HostShard(*saved["shard"])
    environ = None
    if saved:
        # The plan's settings, unless a flag is given now (a mismatch is refused later).
        for name, value in saved.get("settings", {}).items():
            if name in flags and not _given(ctx, name):
                flags[name] = knobs.flag_text(value)
        environ = {}
    settings = knobs.resolve(flags, environ, names=knobs.MEASURE_KNOBS)
    plan_ops = [p["op"] for p in (saved or {}).get("ops", [])] + list((saved or {}).get("dismissed", {}))

    if out is None:
        out = default_out_dir("batch")
    op_names: Optional[List[str]] = parse_ops_flag(ops) if ops else None
    stage_names = _stages(stages, ops, op_list) or tuple((saved or {}).get("stages") or ()) or None
    if replan and not resume:
        raise BatchError("--replan needs --resume: it plans a batch again over a changed corpus")
    if op_names is None and op_list is None and saved and not (replan and saved.get("full_corpus")):
        # A re-planned whole-corpus batch takes the corpus as it is now.
        op_names = plan_ops
    if devices is None and saved:
        device_list = saved.get("devices")
    else:
        device_list = parse_devices_flag(devices)
    dismiss_path = _dismiss_path(dismiss, saved)
    op_timeouts: Dict[str, float] = dict((saved or {}).get("op_timeouts", {}))
    op_timeouts.update(parse_op_timeouts(op_timeout))
    if timeout is None:
        timeout = (saved.get("timeout_s") or 0) if saved else DEFAULT_TIMEOUT_S
    if fallback_dtypes:
        fallback = parse_fallback_dtypes(fallback_dtypes)
    elif saved:
        fallback = tuple(tuple(f) for f in saved.get("fallback_dtypes", []))
    else:
        fallback = DEFAULT_FALLBACK_DTYPES
    return BatchConfig(
        out=Path(out),
        settings=settings,
        ops=op_names,
        op_list=op_list,
        devices=device_list,
        dismiss=dismiss_path,
        timeout_s=timeout or None,
        op_timeouts=op_timeouts,
        retries=retries if retries is not None else (saved or {}).get("retries", DEFAULT_RETRIES),
        fallback_dtypes=fallback,
        resume=resume,
        extra_env=dict((saved or {}).get("extra_env", {})),
        kill_grace_s=kill_grace if kill_grace is not None else DEFAULT_KILL_GRACE_S,
        progress=progress,
        shard=host,
        keep_failed=keep_failed,
        stall_timeout_s=(stall_timeout if stall_timeout is not None else (saved or {}).get("stall_timeout_s"))
        or None,
        run_mode=run_mode or (saved or {}).get("run_mode") or "worker",
        worker_max_ops=worker_max_ops or (saved or {}).get("worker_max_ops") or DEFAULT_WORKER_MAX_OPS,
        worker_prestart=_first_set(worker_prestart, (saved or {}).get("worker_prestart"), True),
        balance_from=_balance_from(balance_from, saved),
        stages=stage_names,
        replan=replan,
    )


_NAMED = (
    "out",
    "resume",
    "devices",
    "ops",
    "op_list",
    "dismiss",
    "timeout",
    "op_timeout",
    "retries",
    "fallback_dtypes",
    "kill_grace",
    "progress",
)


def config_from_args(args: Sequence[str]) -> BatchConfig:
    """The BatchConfig that `zlbench batch ARGS` would run, without running it (`zlbench
    slurm submit` checks its batch options so). Raises click's errors and BatchError."""
    ctx = batch_command.make_context("zlbench batch", list(args))
    params = dict(ctx.params)
    named = {name: params.pop(name) for name in _NAMED}
    extra = {
        name: params.pop(name)
        for name in (
            "shard",
            "shards",
            "stall_timeout",
            "run_mode",
            "worker_max_ops",
            "worker_prestart",
            "balance_from",
            "stages",
            "replan",
        )
    }
    params.pop("dry_run", None)
    return build_config(ctx, flags=params, **named, **extra)

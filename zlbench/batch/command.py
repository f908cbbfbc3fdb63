"""``zlbench batch``: the click front of ``run_batch``."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import click

from .. import knobs
from ..clihelp import GroupedCommand
from ..corpus.operators import parse_stages
from ..rundir import absolute_settings, plan_path, plan_settings, shard_dir_name
from .config import (
    DEFAULT_FALLBACK_DTYPES,
    NO_LIMIT_AT_ZERO,
    PLAN_KEYS,
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


_CORPUS_KNOBS = ["provider", "flaggems_dir", "backend"]
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
    ("Workers", ["run_mode", "worker_max_ops", "worker_prestart", *knobs.BENCHMARK_PROCESS_KNOBS]),
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
@knobs.knob_options(knobs.BATCH_OPTIONS)
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
    "--op-timeout",
    "op_timeout",
    multiple=True,
    metavar="OP=SECONDS",
    help="Timeout for one operator (repeatable): --op-timeout mm=3600.",
)
@click.option(
    "--fallback-dtypes",
    "fallback_dtypes",
    multiple=True,
    metavar="DTYPE[,DTYPE]",
    help="Dtype lists tried after a deterministic failure (repeatable; 'none'). [default: float32, then float16]",
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
def batch_command(**params):
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
        config = build_config(params)
        if params["dry_run"]:
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
            f"zlbench batch: interrupted; continue with --resume --out {params['out'] or '<batch dir>'}",
            err=True,
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


def _balance_from(flag: Optional[Path], saved: Optional[dict]) -> Optional[Path]:
    if flag is not None:
        if not flag.is_dir():
            raise BatchError(
                f"--balance-from {flag}: not a directory; give an earlier batch dir (it holds ops_status.csv)"
            )
        return flag
    value = (saved or {}).get("balance_from")
    return Path(value) if value else None


def build_config(params: Mapping[str, Any], environ: Optional[Mapping[str, str]] = None) -> BatchConfig:
    """The BatchConfig of batch's options (click's ``params``, by option name);
    ``environ`` (default os.environ) gives the knobs' variables and feeds --shard auto."""
    environ = os.environ if environ is None else environ
    out, resume, replan = params.get("out"), bool(params.get("resume")), bool(params.get("replan"))
    ops, op_list, shard = params.get("ops"), params.get("op_list"), params.get("shard")
    keep_failed = False
    host = resolve_shard(shard, params.get("shards"), environ)
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
    flags = {name: params.get(name) for name in knobs.MEASURE_KNOBS}
    settings = knobs.resolve(flags, environ, names=knobs.MEASURE_KNOBS)
    batch = knobs.resolve({n: params.get(n) for n in knobs.BATCH_OPTIONS}, environ, names=knobs.BATCH_OPTIONS)
    if saved:
        settings = resume_settings(settings, flags, saved, Path(out), environ)
        batch = resume_batch_settings(batch, saved)
    plan_ops = [p["op"] for p in (saved or {}).get("ops", [])] + list((saved or {}).get("dismissed", {}))

    if out is None:
        out = default_out_dir("batch")
    op_names: Optional[List[str]] = parse_ops_flag(ops) if ops else None
    stage_names = (
        _stages(params.get("stages"), ops, op_list) or tuple((saved or {}).get("stages") or ()) or None
    )
    if replan and not resume:
        raise BatchError("--replan needs --resume: it plans a batch again over a changed corpus")
    if op_names is None and op_list is None and saved and not (replan and saved.get("full_corpus")):
        # A re-planned whole-corpus batch takes the corpus as it is now.
        op_names = plan_ops
    devices = params.get("devices")
    if devices is None and saved:
        device_list = saved.get("devices")
    else:
        device_list = parse_devices_flag(devices)
    dismiss_path = _dismiss_path(params.get("dismiss"), saved)
    op_timeouts: Dict[str, float] = dict((saved or {}).get("op_timeouts", {}))
    op_timeouts.update(parse_op_timeouts(params.get("op_timeout") or ()))
    fallback_flags = params.get("fallback_dtypes") or ()
    if fallback_flags:
        fallback = parse_fallback_dtypes(fallback_flags)
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
        timeout_s=batch.timeout or None,
        op_timeouts=op_timeouts,
        retries=batch.retries,
        fallback_dtypes=fallback,
        resume=resume,
        extra_env=dict((saved or {}).get("extra_env", {})),
        kill_grace_s=batch.kill_grace,
        progress=params.get("progress") or "auto",
        shard=host,
        keep_failed=keep_failed,
        stall_timeout_s=batch.stall_timeout or None,
        run_mode=batch.run_mode,
        worker_max_ops=batch.worker_max_ops,
        worker_prestart=batch.worker_prestart,
        balance_from=_balance_from(params.get("balance_from"), saved),
        stages=stage_names,
        replan=replan,
        batch_settings=batch,
    )


def resume_refusal(
    knob: knobs.Knob, settings: knobs.Settings, planned: Any, given: Any, batch_dir: Path
) -> str:
    """One line: the knob, the plan's value, the given value, the fix."""
    shown_plan, shown_given = knobs.flag_text(planned), knobs.flag_text(given)
    if settings.sources.get(knob.name) == "env":
        where, fix = f"{knob.env}={shown_given} (from the environment)", f"unset {knob.env}"
    else:
        where, fix = f"{knob.flag} {shown_given}", f"drop {knob.flag}"
    return (
        f"--resume {batch_dir}: {where} differs from the batch's plan.json, which has "
        f"{knob.flag} {shown_plan} ({knob.scope} setting, fixed for the batch); {fix} to "
        "continue with the plan's, or start a new --out"
    )


def resume_settings(
    settings: knobs.Settings,
    flags: Mapping[str, Any],
    saved: Mapping[str, Any],
    batch_dir: Path,
    environ: Mapping[str, str],
) -> knobs.Settings:
    """On --resume the plan's caliber (and corpus) wins: a flag or variable that gives
    another value is refused; batch-scope knobs given now replace the plan's."""
    planned = saved.get("settings") or {}
    given = [n for n in knobs.MEASURE_KNOBS if settings.sources.get(n) in ("flag", "env")]
    if given:
        try:
            now = plan_settings(absolute_settings(settings).values)
        except ValueError as e:
            raise BatchError(str(e)) from None
        for name in given:
            knob = knobs.BY_NAME[name]
            if knob.fixed_on_resume and name in planned and now.get(name) != planned[name]:
                raise BatchError(resume_refusal(knob, settings, planned[name], now.get(name), batch_dir))
    from_plan = {n: knobs.flag_text(v) for n, v in planned.items() if n in flags and n not in given}
    return knobs.resolve({**flags, **from_plan}, environ, names=knobs.MEASURE_KNOBS)


# Where plan.json keeps a batch-scope knob (its name, unless listed).
def resume_batch_settings(batch: knobs.Settings, saved: Mapping[str, Any]) -> knobs.Settings:
    """Batch-scope knobs on --resume: a flag or variable given now, else the plan's."""
    taken = {}
    for name in knobs.BATCH_OPTIONS:
        key = PLAN_KEYS[name]
        if batch.sources.get(name) == "default" and key in saved:
            value = saved[key]
            # The plan writes "no limit" as null.
            taken[name] = (0.0 if value is None else value) if name in NO_LIMIT_AT_ZERO else value
    values = {**batch.values, **{n: v for n, v in taken.items() if v is not None}}
    sources = {**batch.sources, **{n: "plan" for n, v in taken.items() if v is not None}}
    return knobs.Settings(values, sources)


def config_from_args(args: Sequence[str]) -> BatchConfig:
    """The BatchConfig that `zlbench batch ARGS` would run, without running it (`zlbench
    slurm submit` checks its batch options so). Raises click's errors and BatchError."""
    ctx = batch_command.make_context("zlbench batch", list(args))
    return build_config(ctx.params)

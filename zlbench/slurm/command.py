"""``zlbench slurm submit`` and ``zlbench slurm status``: a sharded screen as a Slurm
job array, using the scheduler the cluster already has."""

from __future__ import annotations

import json
import re
import shlex
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import click

from zlbench import knobs
from zlbench.atomic import write_atomic
from zlbench.batch.state import BatchError
from zlbench.rundir import (
    SLURM_DIR,
    SLURM_SCREEN,
    SLURM_SCRIPT,
    SLURM_SUBMISSIONS,
    SLURM_TASK_LOG,
    DocumentError,
    absolute_settings,
    caliber_diffs,
    plan_settings,
    read_plan,
)
from zlbench.safe_read import describe_error, resolve_path
from zlbench.slurm import scheduler
from zlbench.slurm.script import array_spec, render_script
from zlbench.slurm.status import (
    EXIT_FINISHED,
    EXIT_RUNNING,
    RESUBMIT,
    exit_code,
    latest_tasks,
    read_submissions,
    render,
    shard_lines,
)
from zlbench.summary.screen import read_screen, shard_dirs

# Batch options that `slurm submit` sets itself.
_OWN = {
    "--shard": "each array task takes its shard from SLURM_ARRAY_TASK_ID",
    "--shards": "give it to `slurm submit` itself",
    "--resume": "submitting again to the same --out resumes",
    "--out": "give it to `slurm submit` itself",
}
# sbatch options the script sets; the user's would break the screen's layout.
_SBATCH_OWN = {
    "--array": "it comes from --shards (finished shards left out); cap running tasks with --max-parallel",
    "-a": "it comes from --shards; cap running tasks with --max-parallel",
    "--output": "task logs go to DIR/slurm/",
    "-o": "task logs go to DIR/slurm/",
    "--error": "task logs go to DIR/slurm/",
    "-e": "task logs go to DIR/slurm/",
    "--parsable": "zlbench passes it",
    "--wrap": "the script is zlbench's",
}


class SubmitError(click.ClickException):
    """Nothing was submitted: exit 2, like a usage error."""

    exit_code = 2


def _screen_dir(value, flag: str) -> Path:
    """The screen dir, absolute; a symlink loop is one line, not a traceback."""
    try:
        return resolve_path(value)
    except OSError as e:
        raise SubmitError(f"{flag} {value}: {describe_error(e)}") from None


@click.group("slurm", short_help="Run a screen as a Slurm job array, one task per host shard; its status.")
def slurm_group():
    """Run a screen over several hosts as a Slurm job array (one array task per host
    shard), and follow it. See docs/schedulers.md for a walk-through."""


SUBMIT_HELP = """Submit a screen as a Slurm job array: one array task per host shard.

\b
  zlbench slurm submit --shards 8 --out /shared/runs/nightly \\
      --sbatch-arg=--partition=gpu --sbatch-arg=--gres=gpu:8 \\
      --sbatch-arg=--time=08:00:00 \\
      --flaggems-dir /shared/FlagGems --backend cuda --devices 0,1,2,3,4,5,6,7

Every option that is not submit's own is a `zlbench batch` option (--flaggems-dir,
--backend, --devices, --ops, --op-list, --level, --dtypes, --timeout, --retries, ...;
see `zlbench batch --help`); they are checked here, before anything is submitted.

\b
What it does:
  1. writes DIR/slurm/array.sbatch, a plain job script: #SBATCH --array=0-(N-1),
     --output=DIR/slurm/shard-%a-job-%A.out, your --sbatch-arg lines, then
     `cd <this dir>` and `python -m zlbench batch --shard auto --shards N --out DIR`
     with your batch options spelled out (settings taken from ZL_*/BENCH_LEVEL/...
     variables become flags too, so every task measures alike);
  2. runs `sbatch --parsable [--array=<unfinished shards>] DIR/slurm/array.sbatch`
     and records the job in DIR/slurm/submissions.jsonl;
  3. prints the job id and the command to follow it (`zlbench slurm status DIR`).
Task K writes DIR/shard-K-of-N/, a complete batch dir. DIR must be on a file system
that every node mounts at the same path (as must the corpus and this Python).
sbatch passes this shell's environment on (its default --export=ALL).

\b
Submitting again with the same DIR resumes: shards whose operators all have a
status are left out, shards still pending or running in Slurm are left alone, and
the rest are submitted as --array=<their indices>; each picks up where it stopped
(operators with a status are kept, failed ones too). It refuses a DIR that holds a
screen of another shard count, or measured with other settings (the check
`zlbench batch --resume` makes).

\b
Then:
  zlbench slurm status DIR   per shard: Slurm's state, operators done/failed, ETA;
                             exit 0 finished, 3 running, 4 needs resubmit
  scancel JOB (or JOB_K)     stops the screen (or shard K): the batch stops its
                             operators on SIGTERM and leaves the shard resumable
  zlbench summary DIR        the shards read as one batch (--ab A B: two screens)
A task that measured every operator, some of them failing, exits 1: Slurm shows it
FAILED, `slurm status` shows it finished.

\b
Exit codes: 0 submitted (or nothing left to submit); 2 nothing submitted: a bad
option, a refused DIR, or sbatch failed (its message is shown). After a submission
the last line printed is the job id alone.
"""


def _check_args(batch_args: Sequence[str], sbatch_args: Sequence[str]) -> None:
    for arg in batch_args:
        name = arg.split("=", 1)[0]
        if name in _OWN:
            raise click.UsageError(f"{name} is set by zlbench slurm submit: {_OWN[name]}")
    for arg in sbatch_args:
        if not arg.startswith("-"):
            raise click.UsageError(
                f"--sbatch-arg {arg!r}: give an sbatch option, e.g. --sbatch-arg=--partition=gpu"
            )
        name = arg.split("=", 1)[0]
        if name in _SBATCH_OWN or (name.startswith("-a") and len(name) > 2 and name[1] != "-"):
            raise click.UsageError(
                f"--sbatch-arg {arg}: zlbench sets {name}: {_SBATCH_OWN.get(name, _SBATCH_OWN['-a'])}"
            )


def _batch_settings(batch_args: Sequence[str], screen: Path):
    """(settings as plan.json records them, [(variable, value, command-line words)] taken from the
    environment); refuses what `zlbench batch` would refuse."""
    from zlbench.batch.command import config_from_args

    try:
        config = config_from_args([*batch_args, "--out", str(screen)])
        document = plan_settings(absolute_settings(config.settings).values)
    except click.ClickException as e:
        raise click.UsageError(f"batch option: {e.format_message()}") from None
    except (BatchError, ValueError) as e:
        raise click.UsageError(str(e)) from None
    settings = config.settings
    from_env = [
        (knobs.BY_NAME[name].env, knobs.flag_text(document[name]), knobs.BY_NAME[name].args(document[name]))
        for name in knobs.MEASURE_KNOBS
        if settings.sources.get(name) == "env"
    ]
    batch = config.batch_settings
    from_env += [
        (
            knobs.BY_NAME[name].env,
            knobs.flag_text(batch.values[name]),
            knobs.BY_NAME[name].args(batch.values[name]),
        )
        for name in knobs.BATCH_OPTIONS
        if batch is not None and batch.sources.get(name) == "env"
    ]
    return document, from_env


def _read_json(path: Path) -> Optional[dict]:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise SubmitError(f"{path}: cannot read it ({e}); restore it or choose a new --out")


def _check_screen(screen: Path, shards: int, settings: dict) -> None:
    """Refuse a DIR that holds something else: another N, other settings, a plain batch."""
    found = shard_dirs(screen)
    others = sorted({n for _, n in found if n != shards})
    if others:
        raise SubmitError(
            f"--out {screen} holds a screen in {others[0]} shards; submit with "
            f"--shards {others[0]} to continue it, or choose a new --out"
        )
    recorded = _read_json(screen / SLURM_DIR / SLURM_SCREEN)
    if recorded and recorded.get("shards") != shards:
        raise SubmitError(
            f"--out {screen} was submitted with --shards {recorded.get('shards')}; "
            "submit with that to continue it, or choose a new --out"
        )
    if screen.is_dir() and not found and not recorded and any(screen.iterdir()):
        raise SubmitError(
            f"--out {screen} already holds files that are not a sharded screen; choose a new --out"
        )
    sources: List[Tuple[str, dict]] = []
    if recorded:
        sources.append((f"{SLURM_DIR}/{SLURM_SCREEN}", recorded.get("settings") or {}))
    for (k, n), path in sorted(found.items()):
        try:
            plan = read_plan(path)
        except DocumentError as e:
            raise SubmitError(f"{e}; restore it or choose a new --out") from None
        if plan:
            sources.append((path.name, plan.get("settings") or {}))
    for name, saved in sources:
        diffs = caliber_diffs({"settings": saved}, {"settings": settings}, knobs.fixed_on_resume)
        if diffs:
            raise SubmitError(
                f"--out {screen}: {name} was measured with other settings "
                f"({'; '.join(diffs)}); submit with the same flags and "
                "environment, or choose a new --out"
            )


def _last_line(path: Path) -> str:
    """Slurm's own word on the task (``slurmstepd[-node]: error: *** JOB ... CANCELLED``
    line), else the last line of the log."""
    from zlbench.batch.state import tail_lines

    lines = [line.strip() for line in tail_lines(path, 16384) if line.strip()]
    slurm = [line for line in lines if re.match(r"slurmstepd(-\S+)?: ", line)]
    return (slurm or lines or ["(empty or missing)"])[-1]


def _states(tasks: Dict[int, str], strict: bool):
    try:
        return scheduler.task_states(tasks.values())
    except scheduler.SchedulerError as e:
        if strict:
            raise
        return {}, [str(e)]


@slurm_group.command(
    "submit",
    help=SUBMIT_HELP,
    short_help="Submit a screen as a Slurm job array, one task per host shard.",
    options_metavar="[OPTIONS] [BATCH OPTIONS]",
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
)
@click.option(
    "--shards",
    "shards",
    type=click.IntRange(min=1),
    required=True,
    metavar="N",
    help="Host shards: array tasks 0..N-1, each running the operators whose stable hash is K mod N.",
)
@click.option(
    "--out",
    "out",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    metavar="DIR",
    help="The screen dir, on a shared file system: DIR/shard-K-of-N/ "
    "per shard, DIR/slurm/ for the script, logs and job ids.",
)
@click.option(
    "--sbatch-arg",
    "sbatch_args",
    multiple=True,
    metavar="ARG",
    help="An sbatch option, written as an #SBATCH line (repeatable): "
    "--sbatch-arg=--partition=gpu --sbatch-arg=--gres=gpu:8 "
    "--sbatch-arg=--time=08:00:00 --sbatch-arg=--account=perf.",
)
@click.option(
    "--max-parallel",
    "max_parallel",
    type=click.IntRange(min=1),
    default=None,
    metavar="M",
    help="At most M array tasks running at once (--array=...%M).",
)
@click.option(
    "--dry-run",
    "dry_run",
    is_flag=True,
    help="Print the job script and the sbatch command; write and submit nothing.",
)
@click.pass_context
def submit_command(ctx, shards, out, sbatch_args, max_parallel, dry_run):
    batch_args = list(ctx.args)
    _check_args(batch_args, sbatch_args)
    screen = _screen_dir(out, "--out")
    settings, from_env = _batch_settings(batch_args, screen)
    _check_screen(screen, shards, settings)

    current = read_screen(screen, shards)
    finished = [k for k, s in (current.shards.items() if current else []) if s.finished]
    tasks = latest_tasks(read_submissions(screen))
    try:
        states, notes = _states(tasks, strict=not dry_run)
    except scheduler.SchedulerError as e:
        raise SubmitError(str(e)) from None
    active = sorted(
        k
        for k, t in tasks.items()
        if k not in finished and t in states and states[t].state in scheduler.ACTIVE
    )
    todo = [k for k in range(shards) if k not in finished and k not in active]
    for note in notes:
        click.echo(f"note: {note}", err=True)
    if finished:
        click.echo(f"finished, not submitted again: shard(s) {','.join(map(str, finished))}", err=True)
    for k in active:
        click.echo(
            f"shard {k}: still {states[tasks[k]].state} as array task {tasks[k]}; not submitted again",
            err=True,
        )
    if not todo:
        click.echo(
            f"Nothing to submit. Next: zlbench slurm status {screen}"
            + (f"   (then: zlbench summary {screen})" if not active else "")
        )
        return

    command = [
        "zlbench",
        "slurm",
        "submit",
        "--shards",
        str(shards),
        "--out",
        str(screen),
        *[f"--sbatch-arg={a}" for a in sbatch_args],
        *(["--max-parallel", str(max_parallel)] if max_parallel else []),
        *batch_args,
    ]
    text = render_script(
        screen,
        shards,
        batch_args,
        from_env,
        sbatch_args,
        sys.executable,
        Path.cwd(),
        time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        max_parallel or 0,
    )
    script = screen / SLURM_DIR / SLURM_SCRIPT
    sbatch_cli = [] if len(todo) == shards else [f"--array={array_spec(todo, max_parallel or 0)}"]
    sbatch_line = " ".join(shlex.quote(a) for a in ["sbatch", "--parsable", *sbatch_cli, str(script)])
    if dry_run:
        click.echo(text, nl=False)
        click.echo(f"dry run: would write {script} and run: {sbatch_line}", err=True)
        return

    (screen / SLURM_DIR).mkdir(parents=True, exist_ok=True)
    write_atomic(script, text)
    if not (screen / SLURM_DIR / SLURM_SCREEN).exists():
        write_atomic(
            screen / SLURM_DIR / SLURM_SCREEN,
            json.dumps({"shards": shards, "settings": settings}, indent=2) + "\n",
        )
    try:
        job = scheduler.sbatch(str(script), sbatch_cli)
    except scheduler.SchedulerError as e:
        raise SubmitError(f"{e} (script: {script})") from None
    record = {
        "job": job,
        "indices": todo,
        "shards": shards,
        "submitted": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "sbatch": sbatch_line,
        "command": command,
    }
    with open(screen / SLURM_DIR / SLURM_SUBMISSIONS, "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")
    log = screen / SLURM_DIR / SLURM_TASK_LOG.replace("%A", job).replace("%a", "K")
    click.echo(
        f"Submitted job {job}: array tasks {', '.join(f'{job}_{k}' for k in todo)} "
        f"(shards {array_spec(todo)} of {shards}) from {script}"
    )
    click.echo(f"Logs: {log}")
    click.echo(f"Next: zlbench slurm status {screen}")
    click.echo(job)


STATUS_HELP = """Where a sharded screen stands: per shard, Slurm's state of its latest array
task (squeue; sacct once the queue has forgotten it) beside the batch's own progress
(operators planned, with a status, failed, running now, ETA).

\b
A shard is
  finished        every operator of its plan has a status (ok or not);
  running/queued  its latest array task is running or pending;
  needs resubmit  neither: cancelled, failed, timed out, node lost, never submitted.
Also works on a screen run without Slurm (a Kubernetes indexed job, or by hand):
the scheduler column is then '-'.

\b
Exit codes (for scripts and cron):
  0  finished: every shard finished; next: zlbench summary DIR
  3  running: no shard needs a resubmit, some are still pending or running
  4  needs resubmit: some shard is unfinished and nothing runs it (the command to
     resubmit is printed)
  2  DIR holds no sharded screen, or squeue is missing or did not answer
"""


@slurm_group.command(
    "status", help=STATUS_HELP, short_help="Per shard: Slurm's state beside the batch's progress."
)
@click.argument("screen_dir", metavar="DIR", type=click.Path(file_okay=False, path_type=Path))
def status_command(screen_dir):
    screen = _screen_dir(screen_dir, "DIR")
    submissions = read_submissions(screen)
    recorded = _read_json(screen / SLURM_DIR / SLURM_SCREEN) or {}
    count = recorded.get("shards") or (submissions[-1].get("shards") if submissions else None)
    current = read_screen(screen, count)
    if current is None:
        raise SubmitError(
            f"{screen} holds no sharded screen (no shard-K-of-N dirs, no "
            f"{SLURM_DIR}/{SLURM_SUBMISSIONS}); give the --out of "
            "`zlbench slurm submit` or of `zlbench batch --shard`"
        )
    tasks = latest_tasks(submissions)
    try:
        states, notes = scheduler.task_states(tasks.values()) if tasks else ({}, [])
    except scheduler.SchedulerError as e:
        raise SubmitError(str(e)) from None
    lines = shard_lines(current, tasks, states)
    jobs = ", ".join(s["job"] for s in submissions) or "none"
    click.echo(f"Screen {screen}: {current.count} shards; Slurm jobs: {jobs}")
    click.echo(render(lines))
    for note in notes:
        click.echo(f"note: {note}")
    for issue in current.issues:
        if issue.kind not in ("shard_missing", "shard_unfinished"):
            click.echo(f"issue: {issue.kind}: {issue.message}")
    code = exit_code(lines)
    done = sum(line.done for line in lines)
    planned = sum(line.planned or 0 for line in lines)
    if code == EXIT_FINISHED:
        click.echo(f"Finished: {done} operators. Next: zlbench summary {screen}")
    elif code == EXIT_RUNNING:
        click.echo(
            f"Running: {done} of {planned or '?'} operators have a status. "
            f"Next: zlbench slurm status {screen}"
        )
    else:
        for line in lines:
            if line.verdict == RESUBMIT and line.task:
                job, k = line.task.split("_")
                log = screen / SLURM_DIR / SLURM_TASK_LOG.replace("%A", job).replace("%a", k)
                click.echo(f"shard {line.index}: {line.scheduler}; its log {log} says: {_last_line(log)}")
        stuck = ",".join(str(line.index) for line in lines if line.verdict == RESUBMIT)
        again = (
            " ".join(shlex.quote(a) for a in submissions[-1]["command"])
            if submissions and submissions[-1].get("command")
            else f"zlbench batch --shard K/{current.count} --out {screen}   (for each K)"
        )
        click.echo(f"Needs resubmit: shard(s) {stuck} unfinished and not running. Next: {again}")
    sys.exit(code)

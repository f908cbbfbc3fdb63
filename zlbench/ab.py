"""``zlbench ab``: a whole compiler A/B in one command.

Side A runs with the switch off (``ENV=0``) and records its autotune configs; side B
runs with the switch on (``ENV=1``) and replays A's configs, so both sides compile and
time the same kernel configs. Both sides get isolated tuner caches (a shared cache would
hand A's winners to B, which then compiles only those) and identical calibers, on the
same devices (the batch's stable hash puts each operator on the same card). Then the two
batches are paired as ``summary --ab`` does.

A switch that no longer exists produces a full table of noise. So before that table is
trusted, the compiled kernels of both sides (their Triton caches) are compared, and
identical caches are reported loudly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Dict, List, Mapping, Optional, Sequence, Tuple

import click

from . import knobs

if TYPE_CHECKING:
    from .summary.ab import ABResult

# Set on every run of an A/B: keep the isolated Triton cache for the liveness check.
KEEP_TRITON_CACHE_ENV = "ZL_KEEP_TRITON_CACHE"
# Where a shape set's re-check puts its two batches, beside A/ and B/.
RECHECK_DIRS = ("A-recheck", "B-recheck")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass
class SideResult:
    name: str
    batch_dir: Path
    env: Dict[str, str]
    exit_code: int


@dataclass
class ShapeSetResult:
    label: str
    a: SideResult
    b: SideResult
    liveness: Dict[str, dict] = field(default_factory=dict)  # op -> LivenessReport.to_json()
    verdict: str = "empty"
    # The re-check's sides (RECHECK_DIRS under the shape set's dir), where one ran.
    recheck: Optional[Tuple[SideResult, SideResult]] = None
    # summary --ab of A and B (``pair_sides``), made once: the re-check's operators come
    # from it, and it is what is printed.
    paired: Optional["ABResult"] = None


def parse_env_pairs(values: Sequence[str], flag: str) -> Dict[str, str]:
    out: Dict[str, str] = {}
    for value in values:
        name, sep, setting = value.partition("=")
        if not sep or not _ENV_NAME.match(name):
            raise click.BadParameter(f"{value!r}: expected NAME=VALUE", param_hint=flag)
        out[name] = setting
    return out


def side_envs(
    switch: Optional[str], a_env: Mapping[str, str], b_env: Mapping[str, str]
) -> Tuple[Dict[str, str], Dict[str, str]]:
    """The environment of each side: the switch off/on, then the explicit extras."""
    a = {switch: "0"} if switch else {}
    b = {switch: "1"} if switch else {}
    a.update(a_env)
    b.update(b_env)
    if a == b:
        raise click.UsageError(
            "sides A and B would run identically: give --switch ENV or --a-env/--b-env that differ"
        )
    for side in (a, b):
        clash = sorted(set(side) & set(knobs.BY_ENV))
        if clash:
            raise click.UsageError(
                f"{', '.join(clash)} is a zlbench knob, and knobs are part of the caliber that "
                "must match on both sides; A/B a build switch instead"
            )
        side[KEEP_TRITON_CACHE_ENV] = "1"
    return a, b


def kept_triton_caches(batch_dir: Path) -> Dict[Path, Path]:
    """run dir -> the Triton cache it kept (run_identity.json says where), for every run
    under the batch: the operators' own and the attempts set aside by retries."""
    from . import rundir

    out: Dict[Path, Path] = {}
    for ident_path in rundir.identity_paths(batch_dir):
        cache = rundir.read_identity(ident_path.parent).get("triton_cache_dir")
        if cache:
            out[ident_path.parent] = Path(cache)
    return out


def discard_kept_caches(*batch_dirs: Path) -> None:
    from .tuner_cache import discard_kept_triton_cache

    for batch_dir in batch_dirs:
        for cache in kept_triton_caches(batch_dir).values():
            discard_kept_triton_cache(cache)


def overall_verdict(verdicts: Sequence[str]) -> str:
    """``live`` when any operator's kernels changed; ``identical`` only when every compared
    operator's were the same; otherwise what kept the check from concluding."""
    if "live" in verdicts:
        return "live"
    if verdicts and all(v == "identical" for v in verdicts):
        return "identical"
    if "inconclusive" in verdicts:
        return "inconclusive"
    return "empty"


def check_liveness(a_dir: Path, b_dir: Path) -> Tuple[str, Dict[str, dict], List[str]]:
    """Compare each operator's compiled kernels on both sides; drop every kept cache after.

    Returns the overall verdict (``overall_verdict``), the per-operator reports and the
    lines to print.
    """
    from .tuner_cache import compare_triton_caches, discard_kept_triton_cache

    a_all, b_all = kept_triton_caches(a_dir), kept_triton_caches(b_dir)
    a_caches = {run.name: cache for run, cache in a_all.items() if run.parent == a_dir}
    b_caches = {run.name: cache for run, cache in b_all.items() if run.parent == b_dir}
    reports: Dict[str, dict] = {}
    lines: List[str] = []
    for op in sorted(set(a_caches) & set(b_caches)):
        report = compare_triton_caches(a_caches[op], b_caches[op])
        reports[op] = report.to_json()
        if report.verdict != "live":
            lines.append(f"  {op}: {report.summary()}")
    for cache in [*a_all.values(), *b_all.values()]:
        discard_kept_triton_cache(cache)
    return overall_verdict([r["verdict"] for r in reports.values()]), reports, lines


def liveness_banner(verdict: str, switch_text: str, n_ops: int) -> str:
    if verdict == "live":
        return f"liveness: the sides compiled different kernels ({switch_text}): the axis is live"
    if verdict == "identical":
        return (
            "WARNING: liveness: both sides compiled IDENTICAL kernels for every operator "
            f"compared ({n_ops}); {switch_text} changed nothing the compiler saw. A 'no "
            "difference' table below says nothing about the switch: check it still exists."
        )
    if verdict == "inconclusive":
        return (
            "WARNING: liveness: inconclusive: no kernel changed, but some of B's kernels match "
            "none of A's (see the lines below); the switch may or may not be live"
        )
    return (
        f"WARNING: liveness: could not be checked ({verdict}): no compiled Triton kernels "
        "were found on both sides (no triton here, or every kernel came from elsewhere)"
    )


def run_ab(
    out: Path,
    settings: knobs.Settings,
    switch: Optional[str],
    a_env: Mapping[str, str],
    b_env: Mapping[str, str],
    shape_files: Sequence[Optional[str]],
    batch_kwargs: dict,
    recheck: bool = True,
) -> List[ShapeSetResult]:
    from .batch import BatchConfig, run_batch

    env_a, env_b = side_envs(switch, a_env, b_env)
    # Identical calibers on both sides, isolated caches, A records.
    base = settings.replace(isolate_tuner_cache=True, replay_from=None)
    results = []
    for shape_file in shape_files:
        label = Path(shape_file).stem if shape_file else "default-shapes"
        root = out / label if len(shape_files) > 1 else out
        side_settings = base if shape_file is None else base.replace(shape_file=shape_file, shape_mode="file")
        click.echo(f"== A/B {label}: side A ({_env_text(env_a)}) records ==")
        res_a = run_batch(
            BatchConfig(out=root / "A", settings=side_settings, extra_env=env_a, **batch_kwargs)
        )
        if res_a.interrupted:
            raise KeyboardInterrupt  # side B would replay an unfinished side A
        click.echo(f"== A/B {label}: side B ({_env_text(env_b)}) replays A's configs ==")
        res_b = run_batch(
            BatchConfig(
                out=root / "B",
                settings=side_settings.replace(replay_from=str(root / "A")),
                extra_env=env_b,
                **batch_kwargs,
            )
        )
        if res_b.interrupted:
            raise KeyboardInterrupt  # no liveness check or re-check on half a side B
        verdict, reports, lines = check_liveness(root / "A", root / "B")
        result = ShapeSetResult(
            label,
            SideResult("A", root / "A", env_a, res_a.exit_code),
            SideResult("B", root / "B", env_b, res_b.exit_code),
            reports,
            verdict,
        )
        results.append(result)
        for line in [liveness_banner(verdict, _env_text(env_b), len(reports)), *lines]:
            click.echo(line)
        if recheck:
            result.recheck = run_recheck(result, side_settings, batch_kwargs)
    return results


def pair_sides(result: ShapeSetResult) -> "ABResult":
    """summary --ab of the shape set's A and B, at the floor zlbench noise recorded for
    this machine and caliber (as summary --ab), made once and kept on ``result``; raises
    SummaryInputError when there is nothing to pair."""
    from .summary import pair_summaries, summarize
    from .summary.command import resolve_floors

    if result.paired is None:
        side_a = summarize(str(result.a.batch_dir))
        floor, source, run_floors = resolve_floors(side_a, None, None)
        result.paired = pair_summaries(side_a, summarize(str(result.b.batch_dir)), floor, source, run_floors)
    return result.paired


def run_recheck(
    result: ShapeSetResult, settings: knobs.Settings, batch_kwargs: dict
) -> Optional[Tuple[SideResult, SideResult]]:
    """The operators of A/B's SLOWER and FASTER rows (``summary.ab.recheck_ops``) once
    more on each side (its environment), in fresh processes, both replaying A's configs
    (so both run A's kernels as A and B did), into RECHECK_DIRS beside A and B: the pair
    ``summary.ab.apply_recheck`` judges those verdicts by. None when no row needs it (or
    A and B could not be paired: printing says why)."""
    from .batch import BatchConfig, run_batch
    from .summary import SummaryInputError
    from .summary.ab import recheck_ops

    try:
        ops = recheck_ops(pair_sides(result))
    except SummaryInputError:
        return None
    if not ops:
        return None
    root = result.a.batch_dir.parent
    click.echo(
        f"== A/B {result.label}: re-check of {len(ops)} operators with SLOWER/FASTER rows: {','.join(ops)} =="
    )
    sides = []
    for name, env, where in (("A", result.a.env, RECHECK_DIRS[0]), ("B", result.b.env, RECHECK_DIRS[1])):
        kwargs = dict(batch_kwargs, ops=ops)
        res = run_batch(
            BatchConfig(
                out=root / where,
                settings=settings.replace(replay_from=str(root / "A")),
                extra_env=env,
                **kwargs,
            )
        )
        if res.interrupted:
            raise KeyboardInterrupt
        sides.append(SideResult(name, root / where, env, res.exit_code))
    discard_kept_caches(*(side.batch_dir for side in sides))
    return sides[0], sides[1]


def _env_text(env: Mapping[str, str]) -> str:
    return " ".join(f"{k}={v}" for k, v in env.items() if k != KEEP_TRITON_CACHE_ENV) or "-"


def print_pairing(result: ShapeSetResult, fmt_name: str, allow_mismatch: bool) -> bool:
    """Print summary --ab of one shape set; False when the calibers refuse it."""
    from .clihelp import InputError
    from .summary import SummaryInputError
    from .summary.ab import apply_recheck
    from .summary.caliber import REPLAY_DIFFS
    from .summary.command import caliber_lines, pair_recheck
    from .summary.render_ab import render_ab

    try:
        paired = pair_sides(result)
    except SummaryInputError as e:
        click.echo(f"zlbench ab: nothing to pair for {result.label}: {e}", err=True)
        return False
    if result.recheck:
        dirs = (str(result.recheck[0].batch_dir), str(result.recheck[1].batch_dir))
        try:
            paired = apply_recheck(paired, pair_recheck(dirs, paired, allow_mismatch))
        except (SummaryInputError, InputError) as e:  # the pairing stands without it
            click.echo(f"zlbench ab: the re-check of {result.label} is left out: {e}", err=True)
    paired.caliber.drop(REPLAY_DIFFS)  # B replays A's records by design
    warning = caliber_lines(paired.caliber)
    if paired.caliber.mismatch and not allow_mismatch:
        click.echo("\n".join(warning), err=True)
        click.echo(
            "zlbench ab: refusing to pair: the sides were measured differently "
            "(--allow-caliber-mismatch to pair anyway)",
            err=True,
        )
        return False
    if result.verdict == "identical":
        click.echo("NOTE: the table below follows an IDENTICAL-kernels liveness result (see above).")
    click.echo(render_ab(paired, fmt_name), nl=False)
    return True


# The batch knobs an A/B passes to both of its batches (the rest stay at their defaults).
AB_BATCH_KNOBS = ["timeout", "retries"]


@click.command("ab", short_help="Compare a build switch: A (ENV=0) records, B (ENV=1) replays A's configs.")
@knobs.knob_options(
    [n for n in knobs.MEASURE_KNOBS if n not in ("isolate_tuner_cache", "replay_from", "shape_file")]
)
@click.option(
    "--switch",
    default=None,
    metavar="ENV",
    help="Environment variable that toggles the change: A runs with ENV=0, B with ENV=1.",
)
@click.option("--a-env", multiple=True, metavar="K=V", help="Extra variable for side A (repeatable).")
@click.option("--b-env", multiple=True, metavar="K=V", help="Extra variable for side B (repeatable).")
@click.option("--ops", default=None, metavar="a,b,c", help="Operators to compare.")
@click.option(
    "--shape-file",
    "shape_files",
    multiple=True,
    metavar="FILE",
    help="Shape file (repeatable): one A/B per file, in <out>/<file stem>/.",
)
@click.option(
    "--devices",
    "--gpus",
    "devices",
    default=None,
    metavar="0,1,...",
    help="Devices in your numbering; both sides use the same operator->device map.",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where A/ and B/ go. [default: ./runs/ab-<timestamp>]",
)
@knobs.knob_options(AB_BATCH_KNOBS)
@click.option(
    "--format",
    "fmt_name",
    type=click.Choice(["table", "markdown", "csv", "json"]),
    default="table",
    show_default=True,
    help="How to print the pairing.",
)
@click.option(
    "--allow-caliber-mismatch", is_flag=True, help="Pair even when the sides were measured differently."
)
@click.option(
    "--recheck/--no-recheck",
    default=True,
    show_default=True,
    help="Run the operators of the SLOWER and FASTER rows once more on each side, in fresh "
    "processes (A-recheck and B-recheck beside A and B): such a verdict stands only where "
    "that pair gives it too, else the row is SAME, marked not reproduced.",
)
@click.option(
    "--allow-unverified-switch",
    is_flag=True,
    help="Exit 0 even when the switch could not be shown live (its kernels identical on both "
    "sides, or the check inconclusive or impossible: no Triton caches here).",
)
def ab_command(
    switch,
    a_env,
    b_env,
    ops,
    shape_files,
    devices,
    out,
    timeout,
    retries,
    fmt_name,
    allow_caliber_mismatch,
    recheck,
    allow_unverified_switch,
    **flags,
):
    """Compare a build switch: side A (ENV=0) records, side B (ENV=1) replays A's configs.

    \b
    zlbench ab --switch MY_COMPILER_PASS --ops topk,dropout --flaggems-dir ~/FlagGems
    zlbench ab --a-env TRITON_X=old --b-env TRITON_X=new --shape-file a.yaml --shape-file b.yaml

    \b
    Exit codes: 0 paired, both sides measured and the switch shown live; 1 an operator
    failed on a side or in its re-check, or the pairing was refused; 4 the switch could
    not be shown live (identical kernels, inconclusive, or nothing to compare) unless
    --allow-unverified-switch; 2 could not start; 130 interrupted.
    """
    from . import rundir
    from .atomic import write_json_atomic
    from .batch.command import BatchStartError
    from .batch.config import default_out_dir, parse_devices_flag
    from .batch.oplist import parse_ops_flag
    from .batch.state import BatchError

    settings = knobs.resolve(flags, names=knobs.MEASURE_KNOBS)
    out = out or default_out_dir("ab")
    batch_kwargs = {"ops": parse_ops_flag(ops) if ops else None, "devices": parse_devices_flag(devices)}
    given = knobs.resolve({"timeout": timeout, "retries": retries}, names=AB_BATCH_KNOBS)
    if given.sources["timeout"] == "flag":
        batch_kwargs["timeout_s"] = given.timeout or None
    if given.sources["retries"] == "flag":
        batch_kwargs["retries"] = given.retries
    try:
        results = run_ab(
            out,
            settings,
            switch,
            parse_env_pairs(a_env, "--a-env"),
            parse_env_pairs(b_env, "--b-env"),
            list(shape_files) or [None],
            batch_kwargs,
            recheck,
        )
    except BatchError as e:
        raise BatchStartError(f"zlbench ab: {e}") from None
    except KeyboardInterrupt:
        discard_kept_caches(out)
        click.echo(f"zlbench ab: interrupted; what was measured is under {out}", err=True)
        raise SystemExit(130)
    ok = all([print_pairing(r, fmt_name, allow_caliber_mismatch) for r in results])
    write_json_atomic(
        out / rundir.AB_JSON,
        {
            "switch": switch,
            "shape_sets": [
                {
                    "label": r.label,
                    "liveness": r.verdict,
                    "per_op": r.liveness,
                    "a": {"dir": str(r.a.batch_dir), "env": r.a.env, "exit_code": r.a.exit_code},
                    "b": {"dir": str(r.b.batch_dir), "env": r.b.env, "exit_code": r.b.exit_code},
                    "recheck": [
                        {"dir": str(side.batch_dir), "exit_code": side.exit_code} for side in r.recheck or ()
                    ],
                }
                for r in results
            ],
        },
    )
    click.echo(f"{out}")
    failed = any(side.exit_code for r in results for side in (r.a, r.b, *(r.recheck or ())))
    if not ok or failed:
        raise SystemExit(1)
    unverified = [r for r in results if r.verdict != "live"]
    if unverified and not allow_unverified_switch:
        click.echo(
            "zlbench ab: the switch could not be shown live ("
            + ", ".join(f"{r.label}: {r.verdict}" for r in unverified)
            + "): its verdicts may be noise; exit "
            f"{EXIT_UNVERIFIED} (--allow-unverified-switch to accept them)",
            err=True,
        )
        raise SystemExit(EXIT_UNVERIFIED)
    raise SystemExit(0)


# `zlbench ab`: the sides were measured and paired, but the switch was not shown live.
EXIT_UNVERIFIED = 4

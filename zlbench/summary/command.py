"""`zlbench summary`: tables from run logs, and `--ab A B` between two runs."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple, Union

import click

from zlbench import rundir
from zlbench.atomic import write_chunks_atomic
from zlbench.clihelp import InputError
from zlbench.summary.ab import ABResult, NoiseFloor, apply_recheck, pair_summaries
from zlbench.summary.caliber import REPLAY_DIFFS, compare_run_pairs
from zlbench.summary.gate import Tripped, parse_fail_on, tripped
from zlbench.summary.plot import PlotUnavailable, plot_gains, pyplot
from zlbench.summary.render import FORMATS, csv_lines, screen_state, summary_chunks
from zlbench.summary.render_ab import ab_chunks, ab_csv_lines, caliber_lines, same_run_warning
from zlbench.summary.rows import Summary, summarize
from zlbench.summary.sources import OPS_STATUS, SummaryInputError, missing_run_dirs
from zlbench.summary.tables import compact_shape
from zlbench.summary.verdict import DEFAULT_NOISE_FLOOR


def _write(path: Path, text: Union[str, Iterable[str]], flag_hint: str) -> None:
    """Write text (or its pieces, as they are made) to path, never half of it."""
    try:
        write_chunks_atomic(path, [text] if isinstance(text, str) else text)
    except OSError as e:
        raise click.ClickException(f"cannot write {path}: {e.strerror or e}; {flag_hint}") from None


def echo_chunks(chunks: Iterable[str], size: int = 1 << 16) -> None:
    """Print text made a piece at a time, in blocks of about ``size`` characters: the
    whole output is never one string."""
    block: List[str] = []
    held = 0
    for chunk in chunks:
        block.append(chunk)
        held += len(chunk)
        if held >= size:
            click.echo("".join(block), nl=False)
            block, held = [], 0
    if block:
        click.echo("".join(block), nl=False)


def load_summary(path: str) -> Summary:
    try:
        return summarize(path)
    except SummaryInputError as e:
        raise InputError(str(e)) from None


def resolve_floors(
    a: Summary, noise_floor_pct: Optional[float], history_db: Optional[str]
) -> Tuple[float, str, Dict[str, NoiseFloor]]:
    """(fallback floor, where it came from, recorded floors by A's run dir).

    --noise-floor wins; else the floors `zlbench noise` recorded for A's machine and
    caliber in the history database (``history_db``; "none" skips it); else the default."""
    if noise_floor_pct is not None:
        return noise_floor_pct / 100.0, "--noise-floor", {}
    if history_db == "none":
        return DEFAULT_NOISE_FLOOR, "the default; --history-db none", {}
    from zlbench import knobs
    from zlbench.history.noise import floors_for
    from zlbench.history.store import HistoryError

    db = knobs.history_db_path(history_db)
    try:
        found = floors_for(a, db)
    except HistoryError as e:
        raise click.ClickException(f"{e} (or pass --noise-floor PCT, or --history-db none)") from None
    default = f"the default; no zlbench noise floor recorded for this machine and caliber in {db}"
    if not found:
        return DEFAULT_NOISE_FLOOR, default + " (measure one: zlbench noise)", {}
    return DEFAULT_NOISE_FLOOR, default, found


def gate_lines(hits: List[Tripped]) -> List[str]:
    lines = [f"GATE: {len(hits)} rows tripped it:"]
    for t in hits:
        change = "" if t.change is None else f" {t.change * 100:+.1f}% latency"
        lines.append(
            f"  {t.why:<10} {t.op} {t.dtype} {compact_shape(t.shape)}{change}"
            + (f" ({t.detail})" if t.detail else "")
        )
    return lines


def run_summary(path: str, fmt_name: str, out: Optional[str]) -> None:
    summary = load_summary(path)
    target = Path(out) if out else summary.root / rundir.SUMMARY_CSV
    _write(target, csv_lines(summary), "choose another file with --out FILE")
    if summary.screen is not None:
        merged = summary.root / OPS_STATUS
        _write(merged, summary.screen.status_csv(), f"check the permissions of {summary.root}")
        click.echo(
            f"wrote {merged} ({len(summary.screen.rows)} operators of {summary.screen.count} shards merged)",
            err=True,
        )
        # FlagGems' tools read one summary.json: the screen's, beside the shards' own
        # (imported here: only a sharded screen writes it).
        from zlbench.batch.flaggems_summary import write_screen_summary

        try:
            fg_path = write_screen_summary(
                summary.root, summary.screen.rows, [shard.path for shard in summary.screen.shards.values()]
            )
        except OSError as e:
            raise click.ClickException(
                f"cannot write {e.filename}: {e.strerror}; check the permissions of {summary.root}"
            )
        click.echo(f"wrote {fg_path} (FlagGems' run_tests.py format)", err=True)
    echo_chunks(summary_chunks(summary, fmt_name))
    gone = missing_run_dirs(summary)
    if gone:
        click.secho(
            f"{len(gone)} operator(s) the batch counts as ok have no run dir here, so none of "
            f"their rows are above: {', '.join(i.op or '?' for i in gone)}",
            err=True,
            fg="red",
        )
    state = screen_state(summary)
    not_run: List[str] = state["not_run"]  # type: ignore[assignment]
    unfinished = (
        ""
        if state["finished"]
        else f"; UNFINISHED: {len(not_run)} operators not run"
        if not_run
        else "; UNFINISHED: a shard is missing or unfinished"
    )
    click.echo(
        f"wrote {target} ({len(summary.rows)} rows, {len(summary.issues)} issues{unfinished})", err=True
    )


def check_caliber(result: ABResult, allow_mismatch: bool) -> List[str]:
    """The caliber warning lines; refuse the A/B when they say A and B were measured
    differently and --allow-caliber-mismatch was not given."""
    warning = caliber_lines(result.caliber)
    if result.caliber.mismatch and not allow_mismatch:
        raise InputError(
            "\n".join(warning) + "\nRefusing to compare: the gains would mix the build "
            "with the measurement. Re-run one side with the other's settings, or pass "
            "--allow-caliber-mismatch to compare anyway."
        )
    return warning


def pair_recheck(dirs: Tuple[str, str], first: ABResult, allow_mismatch: bool) -> ABResult:
    """The re-check's own pairing (``--recheck A2 B2``; ``apply_recheck`` judges its rows
    at the first pair's floors), refused (InputError) where A2 and B2, or A2 and A, were
    measured differently: a re-check at another caliber re-checks nothing. Replaying A's
    autotuned configs (REPLAY_DIFFS) is no difference."""
    again = pair_summaries(load_summary(dirs[0]), load_summary(dirs[1]))
    runs_a = {r.rel: r for r in first.a.runs}
    against_a = compare_run_pairs(
        [(runs_a[r.rel], r) for r in again.a.runs if r.rel in runs_a], first.a.rows, again.a.rows
    )
    for report, what in (
        (again.caliber, f"{dirs[0]} against {dirs[1]}"),
        (against_a, f"{dirs[0]} against A"),
    ):
        report.drop(REPLAY_DIFFS)
        if report.mismatch:
            lines = caliber_lines(report)
            if not allow_mismatch:
                raise InputError(
                    "\n".join(lines) + f"\nRefusing the re-check (--recheck): {what} were measured "
                    "differently. Re-check with A's and B's settings, or pass --allow-caliber-mismatch."
                )
            click.echo("\n".join([f"--recheck {what}:", *lines]), err=True)
    return again


def print_ab(
    a: str,
    b: str,
    fmt_name: str,
    out: Optional[str],
    plot: Optional[str],
    allow_mismatch: bool,
    noise_floor_pct: Optional[float] = None,
    history_db: Optional[str] = None,
    fail_on: Sequence[str] = (),
    max_slowdown_pct: Optional[float] = None,
    recheck: Optional[Tuple[str, str]] = None,
) -> None:
    if plot:
        # Fail before the work when the picture cannot be drawn.
        try:
            pyplot()
        except PlotUnavailable as e:
            raise click.ClickException(str(e)) from None
    summary_a = load_summary(a)
    floor, source, run_floors = resolve_floors(summary_a, noise_floor_pct, history_db)
    result = pair_summaries(summary_a, load_summary(b), floor, source, run_floors)
    warning = check_caliber(result, allow_mismatch)
    if recheck:
        result = apply_recheck(result, pair_recheck(recheck, result, allow_mismatch))
    if result.same_run:
        # On stderr whatever the format: stdout may be going into a file.
        click.secho(same_run_warning(result), err=True, fg="red", bold=True)
    if warning and fmt_name in ("csv", "json"):
        # table and markdown open with these lines; machine formats keep stdout clean.
        click.echo("\n".join(warning), err=True)
    echo_chunks(ab_chunks(result, fmt_name))
    if out:
        _write(Path(out), ab_csv_lines(result), "choose another file with --out FILE")
        click.echo(f"wrote {out}", err=True)
    if plot:
        plot_gains(result, Path(plot))
        click.echo(f"wrote {plot}", err=True)
    if fail_on or max_slowdown_pct is not None:
        hits = tripped(result, fail_on, None if max_slowdown_pct is None else max_slowdown_pct / 100.0)
        if hits:
            click.echo("\n".join(gate_lines(hits)), err=True)
            raise SystemExit(EXIT_GATE)
        click.echo("GATE: passed (no row tripped it)", err=True)


# `summary --ab` and `report --ab` alike.
RECHECK_OPTION = click.option(
    "--recheck",
    nargs=2,
    type=click.Path(),
    default=None,
    metavar="A2 B2",
    help="With --ab: a second pair of runs of the SLOWER and FASTER rows' operators (A's "
    "build and B's, fresh processes; `zlbench ab` leaves them in A-recheck and B-recheck): "
    "such a verdict stands only where that pair gives it too, else the row is SAME (not "
    "reproduced).",
)

# `summary --ab --fail-on/--max-slowdown`: some row tripped the gate.
EXIT_GATE = 1


@click.command("summary")
@click.argument("path", required=False, type=click.Path())
@click.option(
    "--ab",
    nargs=2,
    type=click.Path(),
    default=None,
    metavar="A B",
    help="Compare two runs (log, run dir or batch dir): B's gain over A.",
)
@click.option(
    "--format",
    "fmt_name",
    type=click.Choice(FORMATS),
    default="table",
    show_default=True,
    help="What to print on stdout.",
)
@click.option(
    "--out",
    type=click.Path(dir_okay=False),
    default=None,
    help="Where to write the CSV (default: summary.csv in the input dir; with --ab: no file unless given).",
)
@click.option(
    "--plot",
    type=click.Path(dir_okay=False),
    default=None,
    help="With --ab: draw each operator's gain distribution to this PNG "
    "(needs matplotlib: pip install 'zlbench[plot]').",
)
@click.option(
    "--allow-caliber-mismatch",
    is_flag=True,
    help="With --ab: compare even when the two runs were measured differently.",
)
@click.option(
    "--noise-floor",
    type=click.FloatRange(min=0, max=100),
    default=None,
    metavar="PCT",
    help="With --ab: the A/A noise floor in percent that a change must exceed, on "
    "top of the two rows' spreads, to be called FASTER or SLOWER "
    f"[default: {DEFAULT_NOISE_FLOOR * 100:g}].",
)
@click.option(
    "--history-db",
    default=None,
    metavar="FILE",
    help="With --ab: where to look up the noise floor `zlbench noise` recorded for A's "
    "machine and caliber (default: ZL_HISTORY_DB, as zlbench history; 'none': do not look).",
)
@click.option(
    "--fail-on",
    default=None,
    metavar="slower[,faster,unknown,missing]",
    help="With --ab: exit 1 when any row has one of these verdicts (missing: a row of A "
    "that B did not measure or that failed there), listing the rows on stderr.",
)
@RECHECK_OPTION
@click.option(
    "--max-slowdown",
    type=click.FloatRange(min=0),
    default=None,
    metavar="PCT",
    help="With --ab: exit 1 when a SLOWER row is more than PCT percent slower.",
)
def summary_command(
    path: Optional[str],
    ab: Optional[Tuple[str, str]],
    fmt_name: str,
    out: Optional[str],
    plot: Optional[str],
    allow_caliber_mismatch: bool,
    noise_floor: Optional[float],
    history_db: Optional[str],
    fail_on: Optional[str],
    max_slowdown: Optional[float],
    recheck: Optional[Tuple[str, str]],
) -> None:
    """Tables from run logs: PATH is a run.log, a run dir or a batch dir.

    A sharded screen (the DIR of `zlbench batch --shard K/N --out DIR` or of `zlbench
    slurm submit`) reads as one batch: its shards' rows merged, a missing or unfinished
    shard and an operator in two shards listed under Issues, and the merged status
    written to DIR/ops_status.csv.

    \b
    With --ab A B, each row gets a verdict (SLOWER, FASTER, SAME, UNKNOWN: also for rows
    measured throttled on either side, or timed at the power cap on one side only
    (POWER_CAP_WINDOW); SAME for a row whose calls ran no device work on
    either side, a view: host time, not compared). The noise floor is --noise-floor, else the one
    `zlbench noise` recorded for A's machine and caliber, else 2%.
    Exit codes: 0 done; 1 a --fail-on / --max-slowdown gate tripped (the rows are listed
    on stderr), or an output file could not be written; 2 usage error (an input missing,
    empty or unreadable, a caliber mismatch).
    """
    if ab and path:
        raise click.UsageError("give either PATH or --ab A B, not both")
    if not ab:
        if path is None:
            raise click.UsageError("give a PATH (run.log, run dir or batch dir) or --ab A B")
        if plot or allow_caliber_mismatch or noise_floor is not None or history_db:
            raise click.UsageError(
                "--plot, --allow-caliber-mismatch, --noise-floor and --history-db need --ab A B"
            )
        if fail_on or max_slowdown is not None or recheck:
            raise click.UsageError("--fail-on, --max-slowdown and --recheck need --ab A B")
        run_summary(path, fmt_name, out)
        return
    try:
        words = parse_fail_on(fail_on)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--fail-on") from None
    print_ab(
        ab[0],
        ab[1],
        fmt_name,
        out,
        plot,
        allow_caliber_mismatch,
        noise_floor,
        history_db,
        words,
        max_slowdown,
        recheck,
    )

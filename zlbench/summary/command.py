"""`zlbench summary`: tables from run logs, and `--ab A B` between two runs."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional, Tuple

import click

from zlbench import rundir
from zlbench.batch.flaggems_summary import write_screen_summary
from zlbench.clihelp import InputError
from zlbench.summary.ab import ABResult, pair_summaries
from zlbench.summary.plot import PlotUnavailable, plot_gains, pyplot
from zlbench.summary.render import FORMATS, render_csv, render_summary
from zlbench.summary.render_ab import caliber_lines, render_ab, render_ab_csv, same_run_warning
from zlbench.summary.rows import Summary, summarize
from zlbench.summary.sources import OPS_STATUS, SummaryInputError
from zlbench.summary.verdict import DEFAULT_NOISE_FLOOR


def _write(path: Path, text: str, flag_hint: str) -> None:
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as e:
        raise click.ClickException(f"cannot write {path}: {e.strerror}; {flag_hint}") from None


def _load_summary(path: str) -> Summary:
    try:
        return summarize(path)
    except SummaryInputError as e:
        raise InputError(str(e)) from None


def run_summary(path: str, fmt_name: str, out: Optional[str]) -> None:
    summary = _load_summary(path)
    target = Path(out) if out else summary.root / rundir.SUMMARY_CSV
    csv_text = render_csv(summary)
    _write(target, csv_text, "choose another file with --out FILE")
    if summary.screen is not None:
        merged = summary.root / OPS_STATUS
        _write(merged, summary.screen.status_csv(), f"check the permissions of {summary.root}")
        click.echo(
            f"wrote {merged} ({len(summary.screen.rows)} operators of {summary.screen.count} shards merged)",
            err=True,
        )
        # FlagGems' tools read one summary.json: the screen's, beside the shards' own.
        try:
            fg_path = write_screen_summary(
                summary.root, summary.screen.rows, [shard.path for shard in summary.screen.shards.values()]
            )
        except OSError as e:
            raise click.ClickException(
                f"cannot write {e.filename}: {e.strerror}; check the permissions of {summary.root}"
            )
        click.echo(f"wrote {fg_path} (FlagGems' run_tests.py format)", err=True)
    click.echo(csv_text if fmt_name == "csv" else render_summary(summary, fmt_name), nl=False)
    click.echo(f"wrote {target} ({len(summary.rows)} rows, {len(summary.issues)} issues)", err=True)


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


def print_ab(
    a: str,
    b: str,
    fmt_name: str,
    out: Optional[str],
    plot: Optional[str],
    allow_mismatch: bool,
    noise_floor_pct: float = DEFAULT_NOISE_FLOOR * 100,
) -> None:
    if plot:
        # Fail before the work when the picture cannot be drawn.
        try:
            pyplot()
        except PlotUnavailable as e:
            raise click.ClickException(str(e)) from None
    result = pair_summaries(_load_summary(a), _load_summary(b), noise_floor_pct / 100.0)
    warning = check_caliber(result, allow_mismatch)
    if result.same_run:
        # On stderr whatever the format: stdout may be going into a file.
        click.secho(same_run_warning(result), err=True, fg="red", bold=True)
    if warning and fmt_name in ("csv", "json"):
        # table and markdown open with these lines; machine formats keep stdout clean.
        click.echo("\n".join(warning), err=True)
    click.echo(render_ab(result, fmt_name), nl=False)
    if out:
        _write(Path(out), render_ab_csv(result), "choose another file with --out FILE")
        click.echo(f"wrote {out}", err=True)
    if plot:
        plot_gains(result, Path(plot))
        click.echo(f"wrote {plot}", err=True)


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
def summary_command(
    path: Optional[str],
    ab: Optional[Tuple[str, str]],
    fmt_name: str,
    out: Optional[str],
    plot: Optional[str],
    allow_caliber_mismatch: bool,
    noise_floor: Optional[float],
) -> None:
    """Tables from run logs: PATH is a run.log, a run dir or a batch dir.

    A sharded screen (the DIR of `zlbench batch --shard K/N --out DIR` or of `zlbench
    slurm submit`) reads as one batch: its shards' rows merged, a missing or unfinished
    shard and an operator in two shards listed under Issues, and the merged status
    written to DIR/ops_status.csv.
    """
    if ab and path:
        raise click.UsageError("give either PATH or --ab A B, not both")
    if not ab:
        if path is None:
            raise click.UsageError("give a PATH (run.log, run dir or batch dir) or --ab A B")
        if plot or allow_caliber_mismatch or noise_floor is not None:
            raise click.UsageError("--plot, --allow-caliber-mismatch and --noise-floor need --ab A B")
        run_summary(path, fmt_name, out)
        return
    print_ab(
        ab[0],
        ab[1],
        fmt_name,
        out,
        plot,
        allow_caliber_mismatch,
        DEFAULT_NOISE_FLOOR * 100 if noise_floor is None else noise_floor,
    )

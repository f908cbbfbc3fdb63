"""`zlbench report DIR [--ab B] -o report.html`: the screen as one HTML page."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator, Optional, Tuple

import click

from zlbench.atomic import write_chunks_atomic
from zlbench.clihelp import InputError
from zlbench.report import ReportUnavailable
from zlbench.summary.command import RECHECK_OPTION
from zlbench.summary.sources import SummaryInputError


def build_report(
    path: str,
    ab: Optional[str],
    out: Path,
    allow_mismatch: bool = False,
    history_db: Optional[str] = None,
    noise_floor_pct: Optional[float] = None,
    recheck: Optional[Tuple[str, str]] = None,
) -> str:
    """Write the page; return a one-line description of what was written."""
    from zlbench.report import require
    from zlbench.report.model import ab_page, batch_page
    from zlbench.report.page import page_chunks
    from zlbench.summary.ab import apply_recheck, pair_summaries
    from zlbench.summary.command import check_caliber, pair_recheck, resolve_floors
    from zlbench.summary.rows import summarize

    require()
    summary = summarize(path)
    if ab:
        # The same floor summary --ab would use: --noise-floor, else zlbench noise's, else 2%.
        floor, source, run_floors = resolve_floors(summary, noise_floor_pct, history_db)
        result = pair_summaries(summary, summarize(ab), floor, source, run_floors)
        check_caliber(result, allow_mismatch)
        if recheck:
            result = apply_recheck(result, pair_recheck(recheck, result, allow_mismatch))
        page = ab_page(result)
        history = None
        what = f"A/B of {len(result.pairs)} paired rows"
    else:
        page = batch_page(summary)
        history = _history(summary, history_db)
        what = f"{len(summary.rows)} rows"
    chunks = _reading(page_chunks(page, history))
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        size = write_chunks_atomic(out, chunks)
    except OSError as e:
        raise ReportWriteError(
            f"cannot write {out}: {e.strerror or e}; choose another file with -o FILE"
        ) from None
    return f"wrote {out} ({what}, {size / 1e6:.1f} MB)"


class ReportWriteError(Exception):
    """The page could not be written to -o; the message names the file and the fix."""


class ReportReadError(Exception):
    """Something the page is made from could not be read; the message names it."""


def _reading(chunks: Iterator[str]) -> Iterator[str]:
    """The page's pieces, where an OSError met while making one is a read failure that
    names its file, never one of -o."""
    while True:
        try:
            chunk = next(chunks)
        except StopIteration:
            return
        except OSError as e:
            raise ReportReadError(f"cannot read {e.filename or 'an input'}: {e.strerror or e}") from None
        yield chunk


def _history(summary, history_db: Optional[str]):
    from zlbench.history.store import HistoryError
    from zlbench.report.history import history_section

    try:
        return history_section(summary, history_db)
    except HistoryError as e:
        raise click.ClickException(f"{e} (or leave the history section out: --history-db none)") from None


@click.command("report")
@click.argument("path", type=click.Path())
@click.option(
    "--ab",
    "ab",
    type=click.Path(),
    default=None,
    metavar="B",
    help="Compare PATH (A) with B: gains and per-row verdicts (as summary --ab gives "
    "them), biggest changes first.",
)
@click.option(
    "-o",
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("report.html"),
    show_default=True,
    help="The HTML file to write (self-contained: open it from disk or keep it as a CI artifact).",
)
@click.option(
    "--allow-caliber-mismatch",
    is_flag=True,
    help="With --ab: compare even when the two runs were measured differently.",
)
@click.option(
    "--history-db",
    default=None,
    metavar="FILE",
    help="History database for the page's nights section (default: as "
    "`zlbench history`, ZL_HISTORY_DB; the section is left out when it holds "
    "fewer than two nights of this screen's caliber; 'none' leaves it out). With --ab: "
    "where the noise floor `zlbench noise` recorded is looked up.",
)
@click.option(
    "--noise-floor",
    type=click.FloatRange(min=0, max=100),
    default=None,
    metavar="PCT",
    help="With --ab: the A/A noise floor in percent (as in summary --ab).",
)
@RECHECK_OPTION
def report_command(
    path: str,
    ab: Optional[str],
    out: Path,
    allow_caliber_mismatch: bool,
    history_db: Optional[str],
    noise_floor: Optional[float],
    recheck: Optional[Tuple[str, str]],
) -> None:
    """One HTML page for a batch (or run) dir: counts, plots, every row, failures."""
    if (noise_floor is not None or recheck) and not ab:
        raise click.UsageError("--noise-floor and --recheck need --ab B")
    try:
        click.echo(
            build_report(path, ab, out, allow_caliber_mismatch, history_db, noise_floor, recheck), err=True
        )
    except SummaryInputError as e:
        raise InputError(str(e)) from None
    except (ReportUnavailable, ReportWriteError, ReportReadError) as e:
        raise click.ClickException(str(e)) from None
    except OSError as e:
        raise click.ClickException(f"cannot read {e.filename or path}: {e.strerror or e}") from None

"""`zlbench history add DIR` / `zlbench history show [--op X]`: nights compared over time."""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Sequence, Set

import click

from zlbench import knobs
from zlbench.clihelp import InputError

DB_HELP = knobs.BY_NAME["history_db"].help + " Env: ZL_HISTORY_DB."


def _pct(v: float) -> str:
    return f"{v * 100:+.1f}%"


def _families_text(conn, result) -> str:
    from zlbench.history.store import family_sources, night_families

    recorded = night_families(conn, result.night.id)
    return "; ".join(family_sources(recorded, sorted(recorded)))


def _open(db: Optional[str], create: bool = True):
    """``create`` False: a reader, which never creates the file and opens it read-only."""
    from zlbench.history.store import HistoryError, db_exists, open_db

    path = knobs.history_db_path(db)
    if not create and not db_exists(path) and not os.path.lexists(path):
        # A command that reads never creates the file it was asked to read.
        settings = knobs.resolve({"history_db": db}, names=["history_db"])
        where = f" ({settings.origin('history_db')})" if settings.sources["history_db"] != "default" else ""
        raise InputError(
            f"no history database at {path}{where}: record a screen with zlbench history add DIR, "
            "or give the file with --db FILE / ZL_HISTORY_DB"
        )
    try:
        return path, open_db(path, readonly=not create)
    except HistoryError as e:
        raise click.ClickException(str(e)) from None


@click.group("history")
def history_group():
    """Nights compared over time: record finished screens, show steps per operator.

    \b
    zlbench history add runs/nightly-2026-12-01     # once per finished screen
    zlbench history show                            # operators whose latency stepped
    zlbench history show --op softmax               # every row of one operator
    zlbench history show --family Math --all        # the operators of one family
    Series are keyed by caliber: screens measured differently are never one line.
    """


@history_group.command("add")
@click.argument("path", type=click.Path())
@click.option("--db", default=None, metavar="FILE", help=DB_HELP)
def add_command(path: str, db: Optional[str]) -> None:
    """Record a finished screen (a batch dir, a sharded screen or a run dir)."""
    from zlbench.history.store import HistoryError, add_screen, calibers
    from zlbench.summary.rows import summarize
    from zlbench.summary.sources import SummaryInputError, missing_run_dirs
    from zlbench.summary.status import operator_statuses

    try:
        summary = summarize(path)
    except SummaryInputError as e:
        raise InputError(str(e)) from None
    statuses = operator_statuses(summary)
    if statuses.not_run or (summary.screen is not None and not summary.screen.finished):
        raise InputError(
            f"{path} is not a finished screen ({statuses.not_run} operators not run"
            + (
                "; shards unfinished or missing"
                if summary.screen is not None and not summary.screen.finished
                else ""
            )
            + "): finish it first (zlbench batch --resume --out DIR, or the same --shard "
            "command), then add it"
        )
    gone = missing_run_dirs(summary)
    if gone:
        raise click.ClickException(
            f"{path}: {len(gone)} operator(s) counted ok have no run dir, so their rows "
            f"would be missing from the night: {gone[0].message} ({', '.join(i.op or '?' for i in gone)}); "
            "restore them, or measure them again (zlbench batch --resume --out DIR), then add it"
        )
    if not summary.rows:
        counts = ", ".join(f"{n} {name}" for name, n in statuses.counts.items())
        raise click.ClickException(
            f"{path} holds no table rows" + (f" ({counts})" if counts else "") + ": nothing to record; "
            f"its failures: zlbench summary {path}"
        )
    db_path, conn = _open(db)
    try:
        result = add_screen(conn, summary)
        if not result.added:
            click.echo(
                f"already recorded as night '{result.night.label}' ({result.rows} rows): "
                + (
                    f"its operators' families recorded now ({_families_text(conn, result)})"
                    if result.families
                    else f"nothing added to {db_path}"
                )
            )
            return
        click.echo(f"recorded night '{result.night.label}': {result.rows} rows in {db_path}")
        for cal in calibers(conn):
            if cal.key in result.calibers:
                click.echo(f"  caliber {cal.key} ({len(cal.nights)} nights): {cal.label}")
        click.echo(
            f"  families: {_families_text(conn, result)}"
            if result.families
            else "  families: none found (neither the corpus nor an inventory knows its operators)"
        )
    except HistoryError as e:
        raise click.ClickException(str(e)) from None
    finally:
        conn.close()


@history_group.command("show")
@click.option("--op", default=None, help="Every row of this operator, night by night.")
@click.option(
    "--family",
    default=None,
    metavar="NAME",
    help="Only the operators of this family (FlagGems' kind, e.g. Math, or the Benchmark "
    "class where the corpus had no conf/operators.yaml), as recorded when their screens were added.",
)
@click.option(
    "--caliber",
    "caliber_key",
    default=None,
    metavar="KEY",
    help="Only the caliber whose key starts with KEY (keys are listed by add and show).",
)
@click.option("--all", "show_all", is_flag=True, help="List operators without a step too.")
@click.option(
    "--threshold",
    type=click.FloatRange(0, None, min_open=True),
    default=0.05,
    show_default=True,
    help="Smallest relative step reported (also beyond the scatter of the nights on either side).",
)
@click.option("--db", default=None, metavar="FILE", help=DB_HELP)
@click.option(
    "--fail-on-step",
    is_flag=True,
    help="Exit 1 when a row stepped slower on the latest night of its caliber, listing the rows.",
)
def show_command(
    op: Optional[str],
    family: Optional[str],
    caliber_key: Optional[str],
    show_all: bool,
    threshold: float,
    db: Optional[str],
    fail_on_step: bool,
) -> None:
    """Each operator's latency over nights, per caliber, with its steps beyond the noise.

    \b
    Exit codes: 0 shown; 1 with --fail-on-step, some row stepped slower on the latest
    night (or the database cannot be used).
    """
    from zlbench.history.store import calibers, op_families, operators
    from zlbench.suggest import unknown_operator_hint

    db_path, conn = _open(db, create=False)
    try:
        cals = [
            c for c in calibers(conn) if c.nights and (caliber_key is None or c.key.startswith(caliber_key))
        ]
        if op is not None:
            known = operators(conn)
            if op not in known:
                raise InputError(
                    f"--op {unknown_operator_hint(op, known)}: no rows of it in {db_path} "
                    f"({len(known)} operators recorded)"
                )
        fams = op_families(conn)
        only = None if family is None else _family_members(fams, family, op, db_path)
        if not cals:
            raise InputError(
                f"no recorded screens in {db_path}"
                + (f" with a caliber starting {caliber_key}" if caliber_key else "")
                + ": record one with zlbench history add DIR"
            )
        tripped: List[str] = []
        from zlbench.history.analysis import analyse

        for cal in cals:
            # Analysed once per caliber: the text and the gate read the same steps.
            ops = [o for o in analyse(conn, cal, op, threshold) if only is None or o.op in only]
            click.echo("\n".join(_caliber_text(cal, ops, op, show_all, threshold, fams, family)))
            if fail_on_step:
                tripped += latest_slower_steps(cal, ops)
    finally:
        conn.close()
    if fail_on_step:
        if tripped:
            click.echo(f"GATE: {len(tripped)} rows stepped slower on the latest night:", err=True)
            click.echo("\n".join(tripped), err=True)
            raise SystemExit(1)
        click.echo("GATE: passed (no row stepped slower on the latest night)", err=True)


def _family_members(fams, family: str, op: Optional[str], db_path: str) -> Set[str]:
    """The operators recorded in ``family``; a family no screen recorded is a usage error
    naming the near ones."""
    from zlbench.suggest import close_names

    if not fams:
        raise InputError(
            f"--family {family}: no families recorded in {db_path} (its screens were added by a "
            "zlbench that did not record them, or their corpus was not found); zlbench history "
            "add DIR records a screen's, also for a screen recorded already"
        )
    known = sorted({f.name for f in fams.values()})
    if family not in known:
        near = close_names(family, known + [k.lower() for k in known])
        near = list(dict.fromkeys(k for k in known if k in near or k.lower() in near))
        hint = f" (did you mean {' or '.join(near)}?)" if near else ""
        raise InputError(
            f"--family {family}{hint}: no operator of it in {db_path} (families: {', '.join(known)})"
        )
    members = {name for name, f in fams.items() if f.name == family}
    if op is not None and op not in members:
        where = f"in family {fams[op].name}" if op in fams else "of no recorded family"
        raise InputError(f"--op {op} is {where}, not {family}: drop --family, or choose another --op")
    return members


def latest_slower_steps(cal, ops: Sequence[Any]) -> List[str]:
    """A line per row of ``ops`` (``cal``'s analysed operators) whose latency stepped up
    on the caliber's latest night."""
    from zlbench.summary.tables import compact_shape

    last = len(cal.nights) - 1
    out = []
    for o in ops:
        for row in o.rows:
            for s in row.steps:
                if s.index == last and s.change > 0:
                    _, dtype, shape = row.key
                    out.append(
                        f"  {o.op} {dtype} {compact_shape(shape)}: {_pct(s.change)} "
                        f"({s.before:.6f} -> {s.after:.6f} ms) in caliber {cal.key}, night '{cal.nights[last].label}'"
                    )
    return out


def _caliber_text(
    cal,
    ops: Sequence[Any],
    op: Optional[str],
    show_all: bool,
    threshold: float,
    fams: Dict[str, Any],
    family: Optional[str] = None,
) -> List[str]:
    from zlbench.history.analysis import median_change
    from zlbench.history.store import family_sources
    from zlbench.summary.tables import compact_shape

    nights = cal.nights
    lines = [f"caliber {cal.key}: {cal.label}", f"  {len(nights)} nights:"]
    for i, n in enumerate(nights, 1):
        versions = " ".join(f"{k} {v}" for k, v in n.versions.items())
        lines.append(f"    {i:>3}  {n.label}" + (f"  ({versions})" if versions else ""))
    sources = family_sources(fams, [o.op for o in ops])
    if ops:
        lines.append(
            "  families: " + "; ".join(sources)
            if sources
            else "  families: none recorded for these operators (zlbench history add DIR records a "
            "screen's, also for a screen recorded already)"
        )
    if op is not None:
        if not ops:
            return lines + [f"  no rows of {op} in this caliber"]
        shown = nights[-8:]
        first = len(nights) - len(shown)
        of = f" (family {fams[op].name}, {fams[op].origin})" if op in fams else ""
        lines.append(
            f"  {op}{of}: gems ms per night (nights {first + 1}-{len(nights)}); steps beyond the noise marked"
        )
        for row in ops[0].rows:
            _, dtype, shape = row.key
            cells = " ".join(f"{v:>10.6f}" if v is not None else f"{'-':>10}" for v in row.values[first:])
            steps = "; ".join(f"night {s.index + 1}: {_pct(s.change)}" for s in row.steps)
            lines.append(
                f"    {dtype:<15} {compact_shape(shape):<28} {cells}" + (f"   STEP {steps}" if steps else "")
            )
        return lines
    if family is not None and not ops:
        return lines + [f"  no operators of family {family} in this caliber"]
    of_family = f" of family {family}" if family is not None else ""
    stepped = [o for o in ops if o.stepped]
    if len(nights) < 2:
        lines.append(f"  one night so far: steps need two ({len(ops)} operators{of_family} recorded)")
        return lines
    listed = ops if show_all else stepped
    width = max([len("family")] + [len(fams[o.op].name) for o in listed if o.op in fams])
    if listed:
        lines.append(
            f"  {'operator':<28} {'family':<{width}} {'rows':>5} {'stepped':>8}  latest night vs usual  steps"
        )
    for o in listed:
        index = o.index(len(nights))
        latest = index[-1]
        by_night = o.step_nights()
        text = "; ".join(
            f"night {i + 1}: {len(s)} rows, median {_pct(median_change(s))}"
            for i, s in sorted(by_night.items())
        )
        name = fams[o.op].name if o.op in fams else "-"
        lines.append(
            f"  {o.op:<28} {name:<{width}} {len(o.rows):>5} {len(o.stepped):>8}  "
            f"{_pct(latest - 1) if latest is not None else 'not measured':>21}  {text}"
        )
    quiet = len(ops) - len(stepped)
    lines.append(
        f"  {len(stepped)} operators{of_family} stepped beyond the noise (threshold "
        f"{threshold * 100:g}%); {quiet} did not" + ("" if show_all or not quiet else " (--all lists them)")
    )
    return lines

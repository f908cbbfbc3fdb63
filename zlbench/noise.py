"""``zlbench noise``: this machine's A/A noise floor for a corpus, kept for ``summary --ab``.

Batches of the same build (three run here over --ops, or existing batch dirs given with
--from) are paired, every pair of them, as ``summary --ab`` pairs two. Each row's excess is what its change
exceeds the two rows' own spreads by (``|B/A - 1| - sqrt(spread_A^2 + spread_B^2)``, at
least 0); the floor is a high quantile of the excess (99th by default), pooled over the pairs, over the rows
measured in a good state (rows either side measured throttled are left out: their
verdicts are UNKNOWN anyway). A row whose largest excess lies beyond that floor keeps a
floor of its own (history.noise.ROW_FLOOR_FACTOR times that excess). They are stored in
the history database per machine (the host that ran the batches) and caliber (history's
series caliber: how the runs measured), and ``summary --ab`` of batches of that machine
and caliber uses them, saying so.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import click

from . import knobs
from .batch.config import FINITE_SECONDS

DEFAULT_QUANTILE = 0.99
# Three batches give three A/A pairs: on the project's 2-core VM a floor from one pair
# (two batches) left 1-8% of the next pairs' rows SLOWER or FASTER, from three 0-6%.
DEFAULT_BATCHES = 3
# Fewer unthrottled A/A rows than this (or fewer than were throttled): a floor, but a weak one.
MIN_ROWS = 20
# Rows keep their own floors only from this many A/A pairs (three batches) or more.
MIN_ROW_FLOOR_PAIRS = 3


def aa_floors(results: Sequence, quantile: float, machine: str) -> list:
    """One FloorRecord per caliber of the runs, pooled over A/A pairings made with a zero
    floor (every pair of the batches). Raises click.ClickException when there is nothing
    to take one from."""
    from .history.noise import ROW_FLOOR_FACTOR, FloorRecord, run_calibers
    from .history.store import series_caliber
    from .stats import quantile as q_of
    from .summary.ab import row_spot

    groups: Dict[str, List] = {}
    fields_of: Dict[str, Dict[str, str]] = {}
    batches: List[str] = []
    for result in results:
        if result.same_run:
            raise click.ClickException(
                f"{result.a.input} is given twice: an A/A floor needs batches of the same build, each its own"
            )
        cal_of = run_calibers(result.a)
        fields_of.update({cal_of[str(r.run_dir)]: series_caliber(r.identity) for r in result.a.runs})
        for side in (result.a, result.b):
            path = str(Path(side.input).resolve())
            if path not in batches:
                batches.append(path)
        for p in result.pairs:
            groups.setdefault(cal_of.get(p.a.run_dir, ""), []).append(p)
    out = []
    for cal, pairs in sorted(groups.items()):
        # Paired with a zero floor, a row the verdict can judge has its threshold = the
        # spreads' root of squares; the rest (throttled, no spread, two clocks, no
        # latency) have none and say nothing about the floor.
        clean = [p for p in pairs if p.verdict.threshold is not None and p.verdict.change is not None]
        excess = [max(0.0, abs(p.verdict.change) - p.verdict.threshold) for p in clean]
        changes = [abs(p.verdict.change) for p in clean]
        floor = q_of(excess, quantile)
        if floor is None:
            continue
        # Each row's largest excess over the pairs; a row that moved beyond the machine's
        # floor keeps its own, ROW_FLOOR_FACTOR times that (history.noise). Not from one
        # pair: one draw is all it shows of a row, and the machine's quantile is taken
        # over such draws.
        seen: Dict = {}
        for p in clean:
            spot = row_spot(p.a, p.occurrence)
            seen[spot] = max(seen.get(spot, 0.0), abs(p.verdict.change) - p.verdict.threshold)
        row_floors = (
            {spot: (ROW_FLOOR_FACTOR * e, e) for spot, e in seen.items() if e > floor}
            if len(results) >= MIN_ROW_FLOOR_PAIRS
            else {}
        )
        out.append(
            FloorRecord(
                machine=machine,
                caliber=cal,
                fields=fields_of.get(cal, {}),
                floor=floor,
                quantile=quantile,
                rows=len(clean),
                excluded=sum(1 for p in pairs if p.verdict.throttled),
                unjudged=sum(1 for p in pairs if not p.verdict.throttled) - len(clean),
                median=q_of(changes, 0.5),
                p90=q_of(changes, 0.9),
                batches=batches,
                pairs=len(results),
                row_floors=row_floors,
            )
        )
    if not out:
        paired = sum(len(r.pairs) for r in results)
        raise click.ClickException(
            f"no row of {', '.join(batches)} pairs with another batch's row measured in a good state "
            f"({paired} paired, every one throttled or without a latency): nothing to take a "
            "floor from; run the batches again, on a quieter machine or with more operators"
        )
    return out


def _pct(v: Optional[float]) -> str:
    return "n/a" if v is None else f"{v * 100:.1f}%"


def floor_lines(records: Sequence) -> List[str]:
    from .history.noise import ROW_FLOOR_FACTOR
    from .history.store import caliber_label

    lines = []
    for r in records:
        lines.append(
            f"noise floor {_pct(r.floor)} for machine {r.machine}, caliber {r.caliber} "
            f"({caliber_label(r.fields)})"
        )
        lines.append(
            f"  p{r.quantile * 100:g} of {r.rows} A/A rows' change beyond their own spreads "
            f"({r.pairs} pairs of batches); {r.excluded} rows measured throttled left out; "
            + (
                f"{r.unjudged} more with no threshold to judge by (no spread, two clocks, host time); "
                if r.unjudged
                else ""
            )
            + f"|B/A - 1| median {_pct(r.median)}, p90 {_pct(r.p90)}; {r.batches_text()}"
            + (f", {r.measured[:16]}" if r.measured else "")
        )
        if r.pairs < MIN_ROW_FLOOR_PAIRS:
            lines.append(
                f"  no row keeps a floor of its own: that takes {MIN_ROW_FLOOR_PAIRS} A/A pairs "
                "(three batches) or more"
            )
        elif r.row_floors:
            top = sorted(r.row_floors.items(), key=lambda kv: -kv[1][0])
            lines.append(
                f"  {len(top)} rows moved beyond it and keep their own floor ({ROW_FLOOR_FACTOR:g} x the "
                "largest excess seen), largest: "
                + "; ".join(
                    f"{op} {dtype} {shape} {_pct(own)}" for ((op, dtype, shape), _), (own, _) in top[:3]
                )
            )
    return lines


def _run_batches(n: int, out: Path, settings: knobs.Settings, batch_kwargs: dict) -> List[Path]:
    from .batch import BatchConfig, run_batch

    dirs = []
    for i in range(1, n + 1):
        target = out / f"a{i}"
        click.echo(f"== zlbench noise: batch {i} of {n} ({target}) ==", err=True)
        res = run_batch(BatchConfig(out=target, settings=settings, **batch_kwargs))
        if res.interrupted:
            raise SystemExit(130)
        dirs.append(target)
    return dirs


@click.command("noise", short_help="This machine's A/A noise floor, recorded for summary --ab.")
@knobs.knob_options([n for n in knobs.MEASURE_KNOBS if n != "replay_from"])
@click.option(
    "--from",
    "from_dirs",
    multiple=True,
    type=click.Path(exists=True, file_okay=False),
    metavar="DIR",
    help="An existing batch dir of the build (repeat: at least two); the floor is taken "
    "from them instead of running batches.",
)
@click.option(
    "--batches",
    type=click.IntRange(min=2),
    default=DEFAULT_BATCHES,
    show_default=True,
    help="How many batches to run; every pair of them is compared.",
)
@click.option("--ops", default=None, metavar="a,b,c", help="Operators to run (default: the whole corpus).")
@click.option("--devices", "--gpus", "devices", default=None, metavar="0,1,...", help="As in zlbench batch.")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where the batches go (a1/, a2/, ...). [default: ./runs/noise-<timestamp>]",
)
@click.option("--timeout", type=FINITE_SECONDS, default=None, metavar="SECONDS", help="As in zlbench batch.")
@click.option(
    "--quantile",
    type=click.FloatRange(50, 100),
    default=DEFAULT_QUANTILE * 100,
    show_default=True,
    metavar="PCT",
    help="Which percentile of the rows' excess over their spreads is the floor.",
)
@click.option(
    "--db", default=None, metavar="FILE", help=knobs.BY_NAME["history_db"].help + " Env: ZL_HISTORY_DB."
)
@click.option("--list", "list_only", is_flag=True, help="Print the floors recorded in the database and exit.")
def noise_command(from_dirs, batches, ops, devices, out, timeout, quantile, db, list_only, **flags):
    """This machine's A/A noise floor for a corpus, recorded for `summary --ab`.

    Two batches of the same build differ by more than their rows' spreads say (clock and
    thermal drift, a shared VM's core speed). This runs --batches batches of one build,
    compares every pair, and records by how much they differ (the --quantile of the rows'
    change beyond their spreads; rows measured throttled left out), per machine and
    caliber, in the history database. `summary --ab` and `report --ab` of batches of that
    machine and caliber then use it as the noise floor and say where it came from. A row
    that moved beyond that floor between the batches (one that sits at another level in
    each process) keeps a floor of its own, 1.5 times the most it moved beyond its spreads.

    \b
    zlbench noise --ops abs,softmax,layer_norm --devices 0      # three batches, then the floor
    zlbench noise --from runs/nightly-1 --from runs/nightly-2   # batches you have
    zlbench noise --list

    \b
    Exit codes: 0 recorded (or listed); 1 nothing to take a floor from (every row
    throttled, the same batch twice, calibers that differ) or the database cannot be
    used; 2 usage error, or the batches could not start; 130 interrupted.
    """
    from .clihelp import InputError
    from .history.noise import floors, machine_of, record_floor
    from .history.store import HistoryError, db_exists, open_db
    from .summary.ab import pair_summaries
    from .summary.command import check_caliber, load_summary

    db_path = knobs.history_db_path(db)
    if list_only:
        if not db_exists(db_path):
            raise click.ClickException(f"no history database at {db_path}: run zlbench noise first")
        try:
            conn = open_db(db_path, readonly=True)  # listing never changes the file
        except HistoryError as e:
            raise click.ClickException(str(e)) from None
        try:
            found = floors(conn)
        finally:
            conn.close()
        if not found:
            raise click.ClickException(f"no noise floor recorded in {db_path}: run zlbench noise")
        click.echo("\n".join(floor_lines(found)))
        return
    if from_dirs:
        if len(from_dirs) < 2:
            raise click.UsageError("--from needs at least two batch dirs (--from A --from B)")
        if ops or devices or out or timeout is not None or any(v is not None for v in flags.values()):
            raise click.UsageError("--from takes the floor from existing batches: leave out the batch flags")
        dirs = [Path(d) for d in from_dirs]
    else:
        from .batch.command import BatchStartError
        from .batch.config import default_out_dir, parse_devices_flag
        from .batch.oplist import parse_ops_flag
        from .batch.state import BatchError

        settings = knobs.resolve(flags, names=knobs.MEASURE_KNOBS)
        batch_kwargs = {"ops": parse_ops_flag(ops) if ops else None, "devices": parse_devices_flag(devices)}
        if timeout is not None:
            batch_kwargs["timeout_s"] = timeout or None
        try:
            dirs = _run_batches(batches, out or default_out_dir("noise"), settings, batch_kwargs)
        except BatchError as e:
            raise BatchStartError(f"zlbench noise: {e}") from None
    summaries = [load_summary(str(d)) for d in dirs]
    results = []
    for a, b in itertools.combinations(summaries, 2):
        result = pair_summaries(a, b, 0.0, "zero (an A/A pairing)")
        try:
            check_caliber(result, allow_mismatch=False)
        except InputError as e:  # exit 1, not 2: the batches ran, and two calibers make no A/A
            raise click.ClickException(f"zlbench noise: {e.format_message()}") from None
        results.append(result)
    machine, recorded = machine_of(summaries[0])
    if not recorded:
        click.echo(
            f"zlbench noise: {summaries[0].input} names no host that measured it (no plan.json "
            f"session): the floor is recorded for this host, {machine}",
            err=True,
        )
    records = aa_floors(results, quantile / 100.0, machine)
    try:
        conn = open_db(db_path)
    except HistoryError as e:
        raise click.ClickException(str(e)) from None
    try:
        for rec in records:
            record_floor(conn, rec)
    finally:
        conn.close()
    click.echo("\n".join(floor_lines(records)))
    for rec in records:
        if rec.rows < MIN_ROWS or rec.rows < rec.excluded:
            click.echo(
                f"WARNING: the floor of caliber {rec.caliber} rests on {rec.rows} rows "
                f"({rec.excluded} of {rec.rows + rec.excluded} were measured throttled): the machine "
                "was busy or slowed down; measure again when it is quieter, or over more operators",
                err=True,
            )
    click.echo(
        f"recorded in {db_path}: `zlbench summary --ab A B` of this machine's batches of "
        "this caliber uses it (--noise-floor PCT overrides)"
    )

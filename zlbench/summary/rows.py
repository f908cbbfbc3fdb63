"""Rows of a whole input: parse every log, attach markers, set each row's timer."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from zlbench import rowstats, rundir
from zlbench.corpus.families import Families, operator_families
from zlbench.markers import BENCHMARK_DIRECT_NO_CUDAGRAPH, RUN_PHASE, Marker
from zlbench.runlog import Issue, ParsedLog, Row, parse_log, reads_as
from zlbench.safe_read import DEFAULT_LIMIT, describe_error, read_text_capped
from zlbench.summary.screen import Screen, read_screen
from zlbench.summary.sources import RunLog, find_runs

# The marker fields that name a row (and that a row's own columns already show).
ROW_FIELDS = ("op", "dtype", "shape")
# Markers about the run's progress, not about how any row was measured: the batch reads
# them into ops_status.csv (and the phases plugin keeps phases.json); rows never carry them.
NOT_ROW_MARKERS = frozenset({RUN_PHASE})


@dataclass
class Summary:
    # What the user named (a log, run dir or batch dir); root is its dir.
    input: Path
    root: Path
    runs: List[RunLog]
    rows: List[Row] = field(default_factory=list)
    issues: List[Issue] = field(default_factory=list)
    # The shards and their merged status when the input is a sharded screen.
    screen: Optional[Screen] = None
    # "zlbench" (run logs), or "flaggems": a tools/run_tests.py output dir (flaggems.py).
    format: str = "zlbench"
    # Operator statuses of an input without ops_status.csv (a run_tests.py dir).
    statuses: Optional[Dict[str, Dict[str, str]]] = None


def summary_families(*summaries: Summary) -> Families:
    """The families of these summaries' operators, from the corpus their runs name
    (``corpus.families.operator_families``): what summary, the report and history show."""
    runs = [r for s in summaries for r in s.runs]
    return operator_families(
        {row.op for s in summaries for row in s.rows},
        [(r.identity or {}).get("corpus_root") for r in runs],
        [(r.identity or {}).get("layout") for r in runs],
    )


def _rows_for(marker: Marker, rows: Sequence[Row], index: Dict[Tuple, List[Row]]) -> List[Row]:
    """The rows a marker names: by op/dtype/shape, by op/dtype, by op, or all rows."""
    named = tuple(marker.get(f) for f in ROW_FIELDS)
    if all(v is None for v in named):
        return list(rows)
    op, dtype, shape = named
    if op is not None and (dtype is not None or shape is None):
        return index.get(named, [])
    # Unusual: a dtype or shape without its op. Match on what the marker gives.
    return [r for r in rows if all(v is None or getattr(r, f) == v for f, v in zip(ROW_FIELDS, named))]


def _index(rows: Sequence[Row]) -> Dict[Tuple, List[Row]]:
    index: Dict[Tuple, List[Row]] = {}
    for r in rows:
        for key in ((r.op, r.dtype, r.shape), (r.op, r.dtype, None), (r.op, None, None)):
            index.setdefault(key, []).append(r)
    return index


def attach_markers(parsed: ParsedLog, source: str) -> None:
    """Give each row the markers that name it; report markers that name no row."""
    if not parsed.markers:
        return
    index = _index(parsed.rows)
    for lineno, marker in parsed.markers:
        if marker.name in NOT_ROW_MARKERS:
            continue
        hit = _rows_for(marker, parsed.rows, index)
        for row in hit:
            row.markers.append(marker)
        if not hit:
            fields = " ".join(f"{k}={v}" for k, v in marker.fields.items())
            what = (
                "names no printed row"
                if any(marker.get(f) for f in ROW_FIELDS)
                else "is about the whole run, which printed no rows"
            )
            parsed.issues.append(
                Issue(
                    "unattached_marker",
                    f"{marker.name} {what}: {fields}",
                    marker.get("op"),
                    marker.get("dtype"),
                    lineno,
                    source,
                )
            )


def attach_row_stats(rows: Sequence[Row], run_dir: Path, issues: List[Issue]) -> None:
    """Samples and spread per side from row_stats.jsonl; the n-th record of a key goes
    with the n-th printed row of that key (a row printed twice was timed twice)."""
    records, problems = rowstats.read(run_dir)
    issues.extend(Issue("bad_row_stats", p, source=str(rundir.row_stats_path(run_dir))) for p in problems)
    if not records:
        return
    pending = rowstats.by_key(records)
    for row in rows:
        for side in ("torch", "gems"):
            queue = pending.get((row.op, row.dtype, row.shape, side))
            if not queue:
                continue
            rec = queue.pop(0)
            samples = rec.get("samples")
            setattr(row, f"{side}_samples", samples if isinstance(samples, int) else None)
            setattr(row, f"{side}_spread", rowstats.finite(rec.get("spread")))
            clock = rec.get("clock")
            setattr(row, f"{side}_clock", clock if isinstance(clock, str) else None)
            placements = rec.get("placements")
            setattr(row, f"{side}_placements", placements if isinstance(placements, int) else None)
            if side == "gems":  # the side a verdict judges
                row.gems_placement_ms = rowstats.placement_medians(rec)
            tuned = rec.get("autotune")
            setattr(row, f"{side}_autotune", tuned if isinstance(tuned, dict) else None)


def rows_of_run(run: RunLog) -> Tuple[List[Row], List[Issue]]:
    try:
        text, cut = read_text_capped(run.log)
    except OSError as e:
        return [], [Issue("unreadable_log", f"{run.log}: {describe_error(e)}", source=str(run.log))]
    parsed = parse_log(text, str(run.log))
    if cut:
        parsed.issues.append(
            Issue("log_too_large", f"only the first {DEFAULT_LIMIT} bytes read", source=str(run.log))
        )
    attach_markers(parsed, str(run.log))
    attach_row_stats(parsed.rows, Path(run.run_dir), parsed.issues)
    if run.complete and not parsed.rows:
        parsed.issues.append(
            Issue("no_rows", f"{run.run_dir} is complete but its log has no table row", source=str(run.log))
        )
    run_op = (run.identity or {}).get("op")
    if isinstance(run_op, str) and run_op:
        for row in parsed.rows:
            if not row.problem and not reads_as(row.op, run_op):
                row.problem = f"table names operator {row.op}, but the run measured {run_op}"
                parsed.issues.append(
                    Issue(
                        "foreign_operator",
                        f"{row.problem}; row not counted",
                        row.op,
                        row.dtype,
                        row.line,
                        str(run.log),
                    )
                )
    timer = str((run.identity or {}).get("timer") or "unknown")
    run_dir = str(run.run_dir)
    for row in parsed.rows:
        row.run_dir = run_dir
        row.fallback = any(m.name == BENCHMARK_DIRECT_NO_CUDAGRAPH for m in row.markers)
        row.timer = "direct" if row.fallback else timer
    return parsed.rows, parsed.issues


def summarize(path) -> Summary:
    """Every row and issue of a log file, a run dir, a batch dir (searched recursively)
    or a sharded screen (its shards merged, as ``read_screen`` does).

    A FlagGems tools/run_tests.py output dir (summary.json and the benchmark's own
    result files, no run.log) is read from those files.

    Raises SummaryInputError when the path is missing or holds no run.log.
    """
    from zlbench.summary import flaggems

    if flaggems.is_results_dir(Path(path)):
        runs, rows, issues, statuses = flaggems.read_results(Path(path))
        found = Summary(Path(path), Path(path), runs, rows, issues, format=flaggems.FORMAT, statuses=statuses)
        found.issues.extend(duplicate_keys(found.rows))
        return found
    screen = read_screen(Path(path)) if Path(path).is_dir() else None
    root, runs, issues = find_runs(Path(path), screen)
    summary = Summary(Path(path), root, runs, issues=issues, screen=screen)
    for run in runs:
        rows, run_issues = rows_of_run(run)
        summary.rows.extend(rows)
        summary.issues.extend(run_issues)
    summary.issues.extend(duplicate_keys(summary.rows))
    return summary


def duplicate_keys(rows: Sequence[Row]) -> List[Issue]:
    """A key printed again (in the same log or another): both rows stay, paired in
    print order by an A/B, but a reader must know the key was measured twice."""
    first: Dict[Tuple, Row] = {}
    issues = []
    for row in rows:
        if row.problem:  # not counted anyway (another operator's table, say)
            continue
        seen = first.setdefault(row.key, row)
        if seen is not row:
            where = "" if seen.run_dir == row.run_dir else f" (first in {seen.run_dir})"
            issues.append(
                Issue(
                    "duplicate_key",
                    f"{row.op} {row.dtype} {row.shape} printed again; first at line {seen.line}{where}",
                    row.op,
                    row.dtype,
                    row.line,
                    row.run_dir,
                )
            )
    return issues

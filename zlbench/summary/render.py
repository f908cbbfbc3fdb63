"""Write a Summary as summary.csv, JSON, markdown or an aligned text table."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator as IteratorABC
from typing import Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

from zlbench.corpus.families import OTHER, Families
from zlbench.runlog import Issue, Row
from zlbench.summary.aggregate import Aggregate, aggregate
from zlbench.summary.rows import Summary, summary_families
from zlbench.summary.status import NOT_RUN, STATUSES, operator_statuses
from zlbench.summary.tables import (
    Cells,
    compact_shape,
    fmt,
    heading,
    marker_brief,
    marker_text,
    table,
    table_lines,
)

CSV_COLUMNS = (
    "op",
    "dtype",
    "mode",
    "level",
    "shape",
    "torch_ms",
    "gems_ms",
    "speedup",
    "tflops",
    "torch_gbps",
    "gems_gbps",
    "status",
    "timer",
    "markers",
    "run_dir",
    # Samples behind each latency and its spread (relative half-width of the median's
    # 95% CI, a fraction); empty where the timer recorded none (see zlbench.rowstats).
    "torch_samples",
    "torch_spread",
    "gems_samples",
    "gems_spread",
    # The direct timer's clock per side (torch.profiler.CUDA: traced device time;
    # torch.cuda.Event: events around each call; host); empty for graph replay.
    "torch_clock",
    "gems_clock",
    # Where the row was printed (line of its log), and why it is not counted ("" when
    # it is): impossible numbers, another operator's table.
    "line",
    "problem",
)
FORMATS = ("table", "csv", "json", "markdown")


def row_record(row: Row) -> Dict[str, object]:
    return {
        name: marker_text(row.markers) if name == "markers" else getattr(row, name) for name in CSV_COLUMNS
    }


def csv_records(records: Iterable[Iterable[object]]) -> Iterator[str]:
    """CSV text, a record at a time (csv writes None as an empty field)."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    for values in records:
        buf.seek(0)
        buf.truncate()
        writer.writerow(values)
        yield buf.getvalue()


def csv_lines(summary: Summary) -> Iterator[str]:
    """summary.csv, a line (record) at a time."""
    yield from csv_records([CSV_COLUMNS])
    yield from csv_records(row_record(row).values() for row in summary.rows)


def render_csv(summary: Summary) -> str:
    return "".join(csv_lines(summary))


def issue_record(issue: Issue) -> Dict[str, object]:
    return {k: v for k, v in vars(issue).items() if v is not None}


def screen_state(summary: Summary) -> Dict[str, object]:
    """The operators behind the rows: counts per batch status, and what did not run
    (empty for a run dir or a log, which have no batch statuses)."""
    statuses = operator_statuses(summary)
    not_run = sorted(op for op, in_plan in statuses.planned.items() if in_plan and op not in statuses.rows)
    order = [*STATUSES, NOT_RUN]
    counts = sorted(
        statuses.counts.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else len(order)
    )
    return {
        "operators": dict(counts),
        "finished": not not_run and (summary.screen is None or summary.screen.finished),
        "not_run": not_run,
    }


def unfinished_what(state: Dict[str, object], limit: int = 20) -> str:
    """What an unfinished screen lacks, for the views' UNFINISHED lines: the operators
    not run (the first ``limit`` named), or a missing or unfinished shard."""
    not_run: List[str] = state["not_run"]  # type: ignore[assignment]
    if not not_run:
        return "a shard is missing or unfinished"
    shown = ", ".join(not_run[:limit]) + (f" and {len(not_run) - limit} more" if len(not_run) > limit else "")
    return f"{len(not_run)} operators not run: {shown}"


def screen_lines(summary: Summary) -> List[str]:
    """One line of operator counts, and a loud one when the screen is unfinished."""
    state = screen_state(summary)
    counts: Dict[str, int] = state["operators"]  # type: ignore[assignment]
    if not counts:
        return []
    total = sum(counts.values())
    lines = [f"Operators: {', '.join(f'{n} {name}' for name, n in counts.items())} (of {total})"]
    not_run: List[str] = state["not_run"]  # type: ignore[assignment]
    if not state["finished"]:
        shown = ", ".join(not_run[:20]) + (f" and {len(not_run) - 20} more" if len(not_run) > 20 else "")
        what = (
            f"{len(not_run)} of {total} operators not run: {shown}"
            if not_run
            else "a shard is missing or unfinished (see Issues)"
        )
        how = (
            "the same zlbench batch --shard K/N command, or zlbench slurm submit again"
            if summary.screen is not None
            else f"zlbench batch --resume --out {summary.root}"
        )
        lines.append(f"UNFINISHED: {what}; continue with {how}")
    return lines


def json_object_chunks(items: Iterable[Tuple[str, object]]) -> Iterator[str]:
    """A JSON object, key by key. A value that is an iterator (a generator, a map) is
    written as a list an item a line, so a list of 200,000 rows is never one string."""
    yield "{"
    for n, (key, value) in enumerate(items):
        yield ("\n " if n == 0 else ",\n ") + json.dumps(key) + ": "
        if isinstance(value, IteratorABC):
            yield "["
            sep = "\n  "
            for item in value:
                yield sep + json.dumps(item)
                sep = ",\n  "
            yield "\n ]" if sep != "\n  " else "]"
        else:
            yield json.dumps(value)
    yield "\n}\n"


def json_chunks(summary: Summary) -> Iterator[str]:
    """The JSON document, a row at a time (the rows are never one string)."""
    doc: List[Tuple[str, object]] = [
        ("input", str(summary.input)),
        ("screen", screen_state(summary)),
        (
            "runs",
            iter(
                {"run_dir": str(r.run_dir), "has_identity": r.identity is not None, "complete": r.complete}
                for r in summary.runs
            ),
        ),
        ("rows", map(row_record, summary.rows)),
        ("by_dtype", [vars(a) for a in aggregate(summary.rows, "dtype")]),
        ("by_op", [vars(a) for a in aggregate(summary.rows, "op")]),
        ("issues", map(issue_record, summary.issues)),
    ]
    fams = families(summary)
    if fams is not None:
        doc.append(
            (
                "families",
                {
                    "source": fams.source,
                    "of": {op: fams.get(op) for op in sorted({r.op for r in summary.rows})},
                },
            )
        )
        doc.append(
            ("by_family", [vars(a) for a in aggregate(summary.rows, "op", key=lambda r: fams.get(r.op))])
        )
    return json_object_chunks(doc)


def render_json(summary: Summary) -> str:
    return "".join(json_chunks(summary))


def families(summary: Summary) -> Optional[Families]:
    """The operators' families (FlagGems' kind where the corpus has conf/operators.yaml,
    else the Benchmark class), or None where none is known."""
    found = summary_families(summary)
    return found if any(found.get(r.op) != OTHER for r in summary.rows) else None


def _aggregate_table(style: str, title: str, aggs: List[Aggregate]) -> str:
    headers = (title, "rows", "excluded", "geomean speedup", "min", "max", "direct fallback")
    rows = [
        (
            a.group,
            str(a.count),
            str(a.excluded),
            fmt(a.geomean, 3),
            fmt(a.min, 3),
            fmt(a.max, 3),
            str(a.direct_fallback or ""),
        )
        for a in aggs
    ]
    return table(style, headers, rows, (False,) + (True,) * 6)


def render_issues(style: str, issues: List[Issue], title: str = "Issues") -> str:
    return "".join(issue_chunks(style, issues, title))


def issue_chunks(style: str, issues: List[Issue], title: str = "Issues") -> Iterator[str]:
    if not issues:
        return
    rows = Cells(issues, lambda i: (i.kind, i.op or "", i.dtype or "", i.message, i.where()))
    yield "\n\n" + heading(style, f"{title} ({len(issues)})")
    for line in table_lines(style, ("kind", "op", "dtype", "what", "where"), rows, (False,) * 5):
        yield "\n" + line


def _row_cells(r: Row) -> Sequence[str]:
    return (
        r.op,
        r.dtype,
        compact_shape(r.shape),
        fmt(r.torch_ms),
        fmt(r.gems_ms),
        fmt(r.speedup, 3),
        r.timer,
        r.status,
        marker_brief(r.markers),
    )


def text_chunks(summary: Summary, style: str) -> Iterator[str]:
    """``style``: "table" or "markdown"; the text a line at a time."""
    headers = ("op", "dtype", "shape", "torch ms", "gems ms", "speedup", "timer", "status", "markers")
    right = (False, False, False, True, True, True, False, False, False)
    state = screen_lines(summary)
    if not summary.rows:
        yield "\n".join(state + [f"No table rows in {summary.input} ({len(summary.runs)} logs)."])
        yield from issue_chunks(style, summary.issues)
        yield "\n"
        return
    yield "\n".join(
        state
        + ([""] if state else [])
        + [heading(style, f"Rows ({len(summary.rows)} from {len(summary.runs)} logs)")]
    )
    for line in table_lines(style, headers, Cells(summary.rows, _row_cells), right):
        yield "\n" + line
    parts = [
        "",
        heading(style, "By dtype (speedup = torch / gems; > 1: gems faster)"),
        _aggregate_table(style, "dtype", aggregate(summary.rows, "dtype")),
        "",
        heading(style, "By operator"),
        _aggregate_table(style, "op", aggregate(summary.rows, "op")),
    ]
    fams = families(summary)
    if fams is not None:
        parts += [
            "",
            heading(style, f"By family ({fams.source})"),
            _aggregate_table(style, "family", aggregate(summary.rows, "op", key=lambda r: fams.get(r.op))),
        ]
    yield "\n" + "\n".join(parts)
    yield from issue_chunks(style, summary.issues)
    yield "\n"


def render_text(summary: Summary, style: str) -> str:
    """``style``: "table" or "markdown"."""
    return "".join(text_chunks(summary, style))


def summary_chunks(summary: Summary, fmt_name: str) -> Iterator[str]:
    """What ``summary --format fmt_name`` prints, in pieces to write as they come."""
    if fmt_name == "csv":
        return csv_lines(summary)
    if fmt_name == "json":
        return json_chunks(summary)
    return text_chunks(summary, fmt_name)


def render_summary(summary: Summary, fmt_name: str) -> str:
    return "".join(summary_chunks(summary, fmt_name))

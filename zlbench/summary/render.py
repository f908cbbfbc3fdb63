"""Write a Summary as summary.csv, JSON, markdown or an aligned text table."""

from __future__ import annotations

import csv
import io
import json
from typing import Dict, List, Optional

from zlbench.corpus.families import OTHER, Families, operator_families
from zlbench.summary.aggregate import Aggregate, aggregate
from zlbench.summary.parse import Issue, Row
from zlbench.summary.rows import Summary
from zlbench.summary.status import NOT_RUN, STATUSES, operator_statuses
from zlbench.summary.tables import compact_shape, fmt, heading, marker_brief, marker_text, table

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


def render_csv(summary: Summary) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    # csv writes None as an empty field.
    writer.writerows(row_record(row).values() for row in summary.rows)
    return buf.getvalue()


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


def render_json(summary: Summary) -> str:
    doc: Dict[str, object] = {
        "input": str(summary.input),
        "screen": screen_state(summary),
        "runs": [
            {"run_dir": str(r.run_dir), "has_identity": r.identity is not None, "complete": r.complete}
            for r in summary.runs
        ],
        "rows": [row_record(r) for r in summary.rows],
        "by_dtype": [vars(a) for a in aggregate(summary.rows, "dtype")],
        "by_op": [vars(a) for a in aggregate(summary.rows, "op")],
        "issues": [issue_record(i) for i in summary.issues],
    }
    fams = families(summary)
    if fams is not None:
        doc["families"] = {
            "source": fams.source,
            "of": {op: fams.get(op) for op in sorted({r.op for r in summary.rows})},
        }
        doc["by_family"] = [vars(a) for a in aggregate(summary.rows, "op", key=lambda r: fams.get(r.op))]
    return json.dumps(doc, indent=1) + "\n"


def families(summary: Summary) -> Optional[Families]:
    """The operators' families (FlagGems' kind where the corpus has conf/operators.yaml,
    else the Benchmark class), or None where none is known."""
    found = operator_families(
        {r.op for r in summary.rows},
        [(r.identity or {}).get("corpus_root") for r in summary.runs],
        [(r.identity or {}).get("layout") for r in summary.runs],
    )
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
    if not issues:
        return ""
    rows = [(i.kind, i.op or "", i.dtype or "", i.message, i.where()) for i in issues]
    return (
        "\n\n"
        + heading(style, f"{title} ({len(issues)})")
        + "\n"
        + table(style, ("kind", "op", "dtype", "what", "where"), rows, (False,) * 5)
    )


def render_text(summary: Summary, style: str) -> str:
    """``style``: "table" or "markdown"."""
    headers = ("op", "dtype", "shape", "torch ms", "gems ms", "speedup", "timer", "status", "markers")
    rows = [
        (
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
        for r in summary.rows
    ]
    right = (False, False, False, True, True, True, False, False, False)
    state = screen_lines(summary)
    if not rows:
        return (
            "\n".join(state + [f"No table rows in {summary.input} ({len(summary.runs)} logs)."])
            + render_issues(style, summary.issues)
            + "\n"
        )
    parts = (
        state
        + ([""] if state else [])
        + [
            heading(style, f"Rows ({len(summary.rows)} from {len(summary.runs)} logs)"),
            table(style, headers, rows, right),
            "",
            heading(style, "By dtype (speedup = torch / gems; > 1: gems faster)"),
            _aggregate_table(style, "dtype", aggregate(summary.rows, "dtype")),
            "",
            heading(style, "By operator"),
            _aggregate_table(style, "op", aggregate(summary.rows, "op")),
        ]
    )
    fams = families(summary)
    if fams is not None:
        parts += [
            "",
            heading(style, f"By family ({fams.source})"),
            _aggregate_table(style, "family", aggregate(summary.rows, "op", key=lambda r: fams.get(r.op))),
        ]
    return "\n".join(parts) + render_issues(style, summary.issues) + "\n"


def render_summary(summary: Summary, fmt_name: str) -> str:
    if fmt_name == "csv":
        return render_csv(summary)
    if fmt_name == "json":
        return render_json(summary)
    return render_text(summary, fmt_name)

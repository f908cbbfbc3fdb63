"""Read one run.log: FlagGems' printed tables, marker lines and failures.

The one reader of a run's log: ``zlbench run`` asks it whether a run measured anything
(``measurement_problem``), summary turns its rows into tables.

FlagGems prints each (op, dtype) as one table; zlbench.corpus.table holds its format
(title, column titles, rows of 3 to 6 value cells and a Size Detail).

Nothing is dropped silently: truncated tables, cut rows, lines that break a table,
pytest's FAILED lines and FlagGems' ``FAILED: Operator=...`` input errors become issues.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

from zlbench import markers as marker_lines
from zlbench import pytestlog
from zlbench.corpus import table as fg_table
from zlbench.markers import Marker

ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# A marker may share its line with pytest's progress ("benchmark/test_x.py ", then "."
# or "F" once a test ends); it is followed by key=value pairs or nothing, which keeps
# source lines quoted in a traceback ("NAME = ...") from reading as markers.
MARKER_START_RE = re.compile(
    r"(?:^|(?<=[\s.FEsxX]))(?:%s|compile_[a-z0-9_]+_no_evict)"
    r"(?=$|\s+[A-Za-z_][A-Za-z0-9_]*=)"
    % "|".join(sorted(map(re.escape, marker_lines.KNOWN), key=len, reverse=True))
)

# Printed values carry 6 (latencies) and 3 (speedup) decimals.
_MS_HALF_ULP = 5e-7
_SPEEDUP_HALF_ULP = 5e-4
# Room for a speedup FlagGems computed from unrounded latencies, beyond rounding.
_SPEEDUP_SLACK = 0.01


class Row:
    """One printed table row; timer, markers, fallback and run_dir are set by rows.py.

    ``line`` and ``text`` are where it was printed: every row has its source line.
    ``problem`` is non-empty when the row must not be counted (a latency that is not a
    positive finite number, a speedup the latencies contradict, a table naming another
    operator, a key printed twice); summary lists each as an issue.
    """

    __slots__ = (
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
        "line",
        "text",
        "key",
        "timer",
        "markers",
        "fallback",
        "run_dir",
        "torch_samples",
        "torch_spread",
        "gems_samples",
        "gems_spread",
        "torch_clock",
        "gems_clock",
        "torch_autotune",
        "gems_autotune",
        "torch_placements",
        "gems_placements",
        "gems_placement_ms",
        "problem",
    )

    def __init__(
        self, op: str, dtype: str, mode: str, level: str, shape: str, status: str, line: int, text: str = ""
    ) -> None:
        self.op, self.dtype, self.mode, self.level = op, dtype, mode, level
        self.shape, self.status, self.line, self.text = shape, status, line, text
        self.problem = ""
        self.key = (op, dtype, shape)
        self.torch_ms: Optional[float] = None
        self.gems_ms: Optional[float] = None
        self.speedup: Optional[float] = None
        self.tflops: Optional[float] = None
        self.torch_gbps: Optional[float] = None
        self.gems_gbps: Optional[float] = None
        self.timer = "unknown"
        self.markers: List[Marker] = []
        # Timed by the direct timer because graph capture failed for this row.
        self.fallback = False
        self.run_dir = ""
        # From row_stats.jsonl: samples behind each latency and the relative half-width
        # of its median's 95% CI; None where the timer recorded none.
        self.torch_samples: Optional[int] = None
        self.torch_spread: Optional[float] = None
        self.gems_samples: Optional[int] = None
        self.gems_spread: Optional[float] = None
        # The direct timer's clock for the side (torch.profiler.CUDA, torch.cuda.Event,
        # host); None for graph replay and older runs.
        self.torch_clock: Optional[str] = None
        self.gems_clock: Optional[str] = None
        # The autotuned configs the side's kernels ran with ({"<kernel> <key>": config}),
        # from the autotune plugin; None where nothing was autotuned or recorded.
        self.torch_autotune: Optional[Dict[str, str]] = None
        self.gems_autotune: Optional[Dict[str, str]] = None
        # Graph timer: the input placements the side was timed over.
        self.torch_placements: Optional[int] = None
        self.gems_placements: Optional[int] = None
        # The gems side's own median at each placement (ms per call), where each had a
        # graph of its own and there were two or more (rowstats.placement_medians).
        self.gems_placement_ms: Optional[List[float]] = None

    def __repr__(self) -> str:
        return f"Row({self.op!r}, {self.dtype!r}, {self.shape!r}, gems_ms={self.gems_ms})"


@dataclass
class Issue:
    """Something the log says went wrong, or that the parser could not read."""

    kind: str
    message: str
    op: Optional[str] = None
    dtype: Optional[str] = None
    line: Optional[int] = None
    source: str = ""

    def where(self) -> str:
        return f"{self.source}:{self.line}" if self.line else self.source


@dataclass
class ParsedLog:
    rows: List[Row] = field(default_factory=list)
    markers: List[Tuple[int, Marker]] = field(default_factory=list)
    issues: List[Issue] = field(default_factory=list)
    # pytest's closing "=== 3 passed in 72.10s ===" text; None when the log stops before it.
    session_end: Optional[str] = None


def parse_row(line: str, op: str, dtype: str, mode: str, level: str, lineno: int) -> Optional[Row]:
    """The row on this line, or None when it is not a complete FlagGems row."""
    text = fg_table.split_row(line)
    if text is None:
        return None
    row = Row(op, dtype, mode, level, text.shape, text.status, lineno, line)
    values = [None if cell == "N/A" else float(cell) for cell in text.cells]
    row.torch_ms, row.gems_ms, row.speedup = values[0], values[1], values[2]
    # 4 cells: TFLOPS; 5: the two GBPS; 6: both.
    if len(values) in (4, 6):
        row.tflops = values[3]
    if len(values) >= 5:
        row.torch_gbps, row.gems_gbps = values[-2], values[-1]
    return row


def value_problem(row: Row) -> str:
    """Why a SUCCESS row's numbers cannot be true ("" when they can)."""
    if row.status != "SUCCESS":
        return ""
    for name in ("torch_ms", "gems_ms"):
        value = getattr(row, name)
        if value is not None and not (math.isfinite(value) and value > 0):
            return f"{name.replace('_ms', ' latency')} {value:g} ms is not a positive finite number"
    t, g, s = row.torch_ms, row.gems_ms, row.speedup
    if s is not None and not (math.isfinite(s) and s > 0):
        return f"speedup {s:g} is not a positive finite number"
    if t is None or g is None or s is None:
        return ""
    lo = (t - _MS_HALF_ULP) / (g + _MS_HALF_ULP)
    hi = (t + _MS_HALF_ULP) / max(g - _MS_HALF_ULP, _MS_HALF_ULP)
    if (s + _SPEEDUP_HALF_ULP) * (1 + _SPEEDUP_SLACK) < lo or (s - _SPEEDUP_HALF_ULP) * (
        1 - _SPEEDUP_SLACK
    ) > hi:
        return f"speedup {s:g} contradicts the latencies (torch {t:g} / gems {g:g} = {t / g:.3f})"
    return ""


def _find_marker(line: str) -> Optional[Marker]:
    m = MARKER_START_RE.search(line)
    if not m:
        return None
    try:
        return marker_lines.parse_marker(line[m.start() :])
    except ValueError:  # a JSON-quoted value that is not valid JSON
        return None


class _Table:
    def __init__(self, op: str, dtype: str, mode: str, level: str, lineno: int) -> None:
        self.op, self.dtype, self.mode, self.level = op, dtype, mode, level
        self.line = lineno
        self.rows = 0


def parse_log(text: str, source: str = "") -> ParsedLog:
    """Parse the text of one log. ``source`` names it in issues (a path)."""
    if "\x1b" in text:
        text = ANSI_RE.sub("", text)
    ends_cleanly = text.endswith("\n")
    lines = text.split("\n")
    if ends_cleanly:
        lines.pop()
    out = ParsedLog()

    def issue(
        kind: str,
        message: str,
        lineno: int,
        table: Optional[_Table] = None,
        op: Optional[str] = None,
        dtype: Optional[str] = None,
    ) -> None:
        if table is not None:
            op, dtype = table.op, table.dtype
        out.issues.append(Issue(kind, message, op, dtype, lineno, source))

    def close(table: _Table, lineno: int, why: str) -> None:
        if table.rows == 0:
            issue("empty_table", f"table for {table.op} {table.dtype} has no rows ({why})", table.line, table)
        elif why != "blank line":
            issue(
                "truncated_table",
                f"table for {table.op} {table.dtype} ends without its blank line ({why}); "
                f"{table.rows} rows kept",
                lineno,
                table,
            )

    table: Optional[_Table] = None
    last = len(lines)
    for lineno, raw in enumerate(lines, 1):
        line = raw.rstrip("\r")
        if table is not None:
            if not line.strip():
                # FlagGems puts the column titles right under the title, so a blank line
                # always ends the table (an empty one if no titles came).
                close(table, lineno, "blank line")
                table = None
                continue
            if fg_table.ROW_START_RE.match(line):
                row = parse_row(line, table.op, table.dtype, table.mode, table.level, lineno)
                if lineno == last and not ends_cleanly:
                    issue("partial_row", f"log ends inside a row, row dropped: {line!r}", lineno, table)
                elif row is None:
                    issue("unreadable_row", f"row not in FlagGems' format: {line!r}", lineno, table)
                else:
                    row.problem = value_problem(row)
                    if row.problem:
                        issue(
                            "bad_values", f"{row.problem}; row not counted: {line.strip()!r}", lineno, table
                        )
                    out.rows.append(row)
                    table.rows += 1
                continue
            # Column titles and the rule under them.
            if fg_table.is_column_titles(line):
                continue
        header = fg_table.TITLE_RE.match(line)
        if header:
            if table is not None:
                close(table, lineno, "next table began")
            table = _Table(header["op"], header["dtype"], header["mode"], header["level"], lineno)
            continue
        marker = _find_marker(line)
        if marker is not None:
            out.markers.append((lineno, marker))
            continue
        if table is not None:
            issue("stray_line", f"line inside the table is not a row: {line.strip()!r}", lineno, table)
            continue
        _scan_outside_table(line, lineno, out, issue)
    if table is not None:
        close(table, last, "log ends")
    if out.session_end is None:
        issue(
            "no_session_end",
            "log stops before pytest's closing summary line (process killed or still running?)",
            last,
        )
    return out


def _scan_outside_table(line: str, lineno: int, out: ParsedLog, issue: Callable[..., None]) -> None:
    bad_input = fg_table.INPUT_ERROR_RE.search(line)
    close = line.find(">>>", bad_input.end()) if bad_input else -1
    if bad_input and close >= 0:
        err = line[bad_input.end() : close]
        if err == "{e}":
            # FlagGems prints this line without its f-string: the error is in pytest's
            # failure report further down.
            err = "(FlagGems printed no error text; see the pytest failure for this test)"
        issue(
            "input_error",
            f"FlagGems could not build inputs for {bad_input['op']}: {err}",
            lineno,
            op=bad_input["op"],
        )
        return
    failed = pytestlog.FAILED_RE.match(line)
    if failed and ("::" in failed["node"] or failed["node"].endswith(".py")):
        msg = f": {failed['msg']}" if failed["msg"] else ""
        issue("pytest_" + failed["kind"].lower(), f"{failed['node']}{msg}", lineno)
        return
    end = pytestlog.session_end(line)
    if end is not None:
        out.session_end = end


def reads_as(printed: str, run_op: str) -> bool:
    """A table of run ``run_op`` may print its own name or a variant of it
    (``mm`` prints ``mm_self_transpose``, a backward test ``abs_backward``)."""
    return printed == run_op or printed.startswith(run_op + "_")


def measurement_problem(text: str, run_op: Optional[str]) -> Optional[Tuple[str, str]]:
    """(reason, detail) when a benchmark process that exited 0 measured nothing that
    can be counted; None when it did (or when pytest says every test was skipped).

    no_session_end: it stopped before pytest's closing line (``os._exit(0)`` mid-test);
    no_rows: tests passed but printed no table row; no_valid_rows: every row names
    another operator or has impossible numbers.
    """
    parsed = parse_log(text)
    if parsed.session_end is None:
        return ("no_session_end", "the benchmark process exited 0 before pytest's closing summary line")
    if "passed" not in parsed.session_end:
        return None
    if not parsed.rows:
        return ("no_rows", f"pytest says {parsed.session_end!r} but no table row was printed")
    valid = [r for r in parsed.rows if not r.problem and (not run_op or reads_as(r.op, run_op))]
    if not valid:
        return (
            "no_valid_rows",
            f"none of its {len(parsed.rows)} rows can be counted (another "
            "operator's name, or impossible numbers)",
        )
    return None

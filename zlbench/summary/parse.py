"""Read one benchmark log: FlagGems' printed tables, marker lines and failures.

FlagGems prints each (op, dtype) as one table (see docs and the protocol notes):

    Operator: abs  Performance Test (dtype=torch.float16, mode=kernel,level=core)
    Status       Torch Latency (ms)    Gems Latency (ms)  ...  Size Detail
    ----------------------------------------------------------------------
    SUCCESS               1.004192            1.064736  ...          [torch.Size([64])]
    <blank line>

A row is the status left-justified in 10 columns, then value cells right-justified in
20 columns each (a wider value pushes the rest right), then 10 spaces and the Size
Detail text. A row prints its TFLOPS cell
only when its own tflops is non-zero and its two GBPS cells only when it has gbps, so
the number of cells (3 to 6) says which columns a row has, whatever its header says.

Nothing is dropped silently: truncated tables, cut rows, lines that break a table,
pytest's FAILED lines and FlagGems' ``FAILED: Operator=...`` input errors become issues.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable, List, Optional, Tuple

from zlbench import markers as marker_lines
from zlbench.markers import Marker

ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# FlagGems starts the title with "\n", so it begins a line (pytest's "." or "F" for
# the previous test is tolerated in front of it).
HEADER_RE = re.compile(
    r"^[.FEsxX]*\s*Operator: (?P<op>\S+)\s+Performance Test \(dtype=(?P<dtype>[^,]*),\s*"
    r"mode=(?P<mode>[^,]*),\s*level=(?P<level>[^)]*)\)"
)
INPUT_ERROR_RE = re.compile(
    r"FAILED: Operator=(?P<op>\S+) dtype=(?P<dtype>\S+) err=<<<(?P<err>.*?)>>>"
)
PYTEST_FAILED_RE = re.compile(r"^(?P<kind>FAILED|ERROR) (?P<node>\S+)(?: - (?P<msg>.*))?$")
SESSION_END_RE = re.compile(r"^=+ (?P<text>.+ in [0-9.]+s\b.*?) =+$")
ROW_START_RE = re.compile(r"^(SUCCESS|FAILED)\s")
TOKEN_RE = re.compile(r"\s*(\S+)")
VALUE = r"N/A|[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:inf|nan)"
VALUE_RE = re.compile(VALUE)
ROW_RE = re.compile(r"^\S+((?: +(?:%s)){3,6}) {10}(\S.*)$" % VALUE)
# A marker may share its line with pytest's progress ("benchmark/test_x.py ", then "."
# or "F" once a test ends); it is followed by key=value pairs or nothing, which keeps
# source lines quoted in a traceback ("NAME = ...") from reading as markers.
MARKER_START_RE = re.compile(
    r"(?:^|(?<=[\s.FEsxX]))(?:%s|compile_[a-z0-9_]+_no_evict)"
    r"(?=$|\s+[A-Za-z_][A-Za-z0-9_]*=)"
    % "|".join(sorted(map(re.escape, marker_lines.KNOWN), key=len, reverse=True))
)

STATUS_WIDTH = 10
class Row:
    """One printed table row; timer, markers, fallback and run_dir are set by rows.py."""

    __slots__ = (
        "op", "dtype", "mode", "level", "shape", "torch_ms", "gems_ms", "speedup",
        "tflops", "torch_gbps", "gems_gbps", "status", "line", "key", "timer", "markers",
        "fallback", "run_dir", "torch_samples", "torch_spread", "gems_samples", "gems_spread",
    )

    def __init__(self, op: str, dtype: str, mode: str, level: str, shape: str,
                 status: str, line: int) -> None:
        self.op, self.dtype, self.mode, self.level = op, dtype, mode, level
        self.shape, self.status, self.line = shape, status, line
        self.key = (op, dtype, shape)
        self.torch_ms = self.gems_ms = self.speedup = None
        self.tflops = self.torch_gbps = self.gems_gbps = None
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


def _split_cells(line: str) -> Optional[Tuple[List[str], str]]:
    """Cells and shape of a well-formed row: 3 to 6 values, 10 spaces, the Size Detail.

    A shape that reads like a value ("N/A") stays the shape: the greedy match backs off
    one cell when nothing is left after it.
    """
    m = ROW_RE.match(line)
    return (m[1].split(), m[2]) if m else None


def _split_tokens(line: str) -> Tuple[List[str], str]:
    """Fallback for a row whose values outgrew their 20 columns: split on whitespace."""
    pos = len(line.split(None, 1)[0])
    cells: List[str] = []
    while len(cells) < 6:
        token = TOKEN_RE.match(line, pos)
        # The last token is the shape even when it reads like a value ("N/A").
        if not token or not VALUE_RE.fullmatch(token[1]) or not line[token.end():].strip():
            break
        cells.append(token[1])
        pos = token.end()
    return cells, line[pos:].strip()


def parse_row(line: str, op: str, dtype: str, mode: str, level: str,
              lineno: int) -> Optional[Row]:
    """The row on this line, or None when it is not a complete FlagGems row."""
    cells, shape = _split_cells(line) or _split_tokens(line)
    shape = shape.rstrip()
    if not 3 <= len(cells) <= 6 or not shape:
        return None
    row = Row(op, dtype, mode, level, shape, line[:STATUS_WIDTH].strip(), lineno)
    values = [None if text == "N/A" else float(text) for text in cells]
    row.torch_ms, row.gems_ms, row.speedup = values[0], values[1], values[2]
    # 4 cells: TFLOPS; 5: the two GBPS; 6: both.
    if len(values) in (4, 6):
        row.tflops = values[3]
    if len(values) >= 5:
        row.torch_gbps, row.gems_gbps = values[-2], values[-1]
    return row


def _find_marker(line: str) -> Optional[Marker]:
    m = MARKER_START_RE.search(line)
    return marker_lines.parse_marker(line[m.start():]) if m else None


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

    def issue(kind: str, message: str, lineno: int, table: Optional[_Table] = None,
              op: Optional[str] = None, dtype: Optional[str] = None) -> None:
        if table is not None:
            op, dtype = table.op, table.dtype
        out.issues.append(Issue(kind, message, op, dtype, lineno, source))

    def close(table: _Table, lineno: int, why: str) -> None:
        if table.rows == 0:
            issue("empty_table", f"table for {table.op} {table.dtype} has no rows ({why})",
                  table.line, table)
        elif why != "blank line":
            issue("truncated_table",
                  f"table for {table.op} {table.dtype} ends without its blank line ({why}); "
                  f"{table.rows} rows kept", lineno, table)

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
            if ROW_START_RE.match(line):
                row = parse_row(line, table.op, table.dtype, table.mode, table.level, lineno)
                if lineno == last and not ends_cleanly:
                    issue("partial_row", f"log ends inside a row, row dropped: {line!r}",
                          lineno, table)
                elif row is None:
                    issue("unreadable_row", f"row not in FlagGems' format: {line!r}",
                          lineno, table)
                else:
                    out.rows.append(row)
                    table.rows += 1
                continue
            # Column titles and the rule under them.
            if (line.startswith("Status") and "Size Detail" in line) or line.strip("-") == "":
                continue
        header = HEADER_RE.match(line)
        if header:
            if table is not None:
                close(table, lineno, "next table began")
            table = _Table(header["op"], header["dtype"], header["mode"], header["level"],
                           lineno)
            continue
        marker = _find_marker(line)
        if marker is not None:
            out.markers.append((lineno, marker))
            continue
        if table is not None:
            issue("stray_line", f"line inside the table is not a row: {line.strip()!r}",
                  lineno, table)
            continue
        _scan_outside_table(line, lineno, out, issue)
    if table is not None:
        close(table, last, "log ends")
    if out.session_end is None:
        issue("no_session_end",
              "log stops before pytest's closing summary line (process killed or still "
              "running?)", last)
    return out


def _scan_outside_table(line: str, lineno: int, out: ParsedLog,
                        issue: Callable[..., None]) -> None:
    bad_input = INPUT_ERROR_RE.search(line)
    if bad_input:
        err = bad_input["err"]
        if err == "{e}":
            # FlagGems prints this line without its f-string: the error is in pytest's
            # failure report further down.
            err = "(FlagGems printed no error text; see the pytest failure for this test)"
        issue("input_error", f"FlagGems could not build inputs for {bad_input['op']}: "
              f"{err}", lineno, op=bad_input["op"])
        return
    failed = PYTEST_FAILED_RE.match(line)
    if failed and ("::" in failed["node"] or failed["node"].endswith(".py")):
        msg = f": {failed['msg']}" if failed["msg"] else ""
        issue("pytest_" + failed["kind"].lower(), f"{failed['node']}{msg}", lineno)
        return
    end = SESSION_END_RE.match(line)
    if end:
        out.session_end = end["text"]

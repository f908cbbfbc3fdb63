"""The result table FlagGems prints for each (op, dtype): read and re-written here only.

    Operator: abs  Performance Test (dtype=torch.float16, mode=kernel,level=core)
    Status       Torch Latency (ms)    Gems Latency (ms)  ...  Size Detail
    ----------------------------------------------------------------------
    SUCCESS               1.004192            1.064736  ...          [torch.Size([64])]
    <blank line>

A row is the status left-justified in 10 columns, then value cells right-justified in
20 columns each (a wider value pushes the rest right), then 10 spaces and the Size
Detail text. A row prints its TFLOPS cell only when its own tflops is non-zero and its
two GBPS cells only when it has gbps, so the number of cells (3 to 6) says which
columns a row has, whatever its header says. ``summary`` parses tables with these
pieces; the live-terminal report plugin re-writes rows with them.
"""

from __future__ import annotations

import re
from typing import List, NamedTuple, Optional, Tuple

# FlagGems starts the title with "\n", so it begins a line (pytest's "." or "F" for
# the previous test is tolerated in front of it).
TITLE_RE = re.compile(
    r"^[.FEsxX]*\s*Operator: (?P<op>\S+)\s+Performance Test \(dtype=(?P<dtype>[^,]*),\s*"
    r"mode=(?P<mode>[^,]*),\s*level=(?P<level>[^)]*)\)"
)
# FlagGems' line for inputs it could not build (its err may be the unformatted "{e}").
# The error text runs from the match's end to the first ">>>" after it: found with
# str.find, since a lazy ".*?>>>" rescans the rest of the line from every "err=<<<"
# (quadratic on a long line of them).
INPUT_ERROR_RE = re.compile(r"FAILED: Operator=(?P<op>\S+) dtype=(?P<dtype>\S+) err=<<<")
ROW_START_RE = re.compile(r"^(SUCCESS|FAILED)\s")
STATUS_WIDTH = 10
SHAPE_GAP = " " * 10
VALUE = r"N/A|[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:inf|nan)"
VALUE_RE = re.compile(VALUE)
ROW_RE = re.compile(r"^(?P<status>SUCCESS|FAILED)(?P<cells>(?: +(?:%s)){3,6}) {10}(?P<shape>\S.*)$" % VALUE)
_TOKEN_RE = re.compile(r"\s*(\S+)")


class RowText(NamedTuple):
    """A row as printed: its status, value cells (text) and Size Detail."""

    status: str
    cells: List[str]
    shape: str


def is_column_titles(line: str) -> bool:
    """The column-title line under a table's title, or the rule under it."""
    return (line.startswith("Status") and "Size Detail" in line) or line.strip("-") == ""


def well_formed_row(line: str) -> Optional[re.Match]:
    """The match of a row in exactly FlagGems' layout (groups status, cells, shape); the
    cells group keeps its spacing, so ``format_row`` rebuilds the line unchanged."""
    return ROW_RE.match(line)


def split_row(line: str) -> Optional[RowText]:
    """The row on this line, or None when it is not a complete FlagGems row.

    A shape that reads like a value ("N/A") stays the shape: the greedy match backs off
    one cell when nothing is left after it. A row whose values outgrew their 20 columns
    is split on whitespace."""
    m = well_formed_row(line)
    cells, shape = (m["cells"].split(), m["shape"]) if m else _split_tokens(line)
    shape = shape.rstrip()
    if not 3 <= len(cells) <= 6 or not shape:
        return None
    return RowText(line[:STATUS_WIDTH].strip(), cells, shape)


def _split_tokens(line: str) -> Tuple[List[str], str]:
    pos = len(line.split(None, 1)[0]) if line.strip() else 0
    cells: List[str] = []
    while len(cells) < 6:
        token = _TOKEN_RE.match(line, pos)
        # The last token is the shape even when it reads like a value ("N/A").
        if not token or not VALUE_RE.fullmatch(token[1]) or not line[token.end() :].strip():
            break
        cells.append(token[1])
        pos = token.end()
    return cells, line[pos:].strip()


def format_row(status: str, cells: str, shape: str) -> str:
    """A row line from a status (possibly coloured), the cells text as matched by
    ``well_formed_row`` (its leading spaces included) and a Size Detail."""
    return status + cells + SHAPE_GAP + shape

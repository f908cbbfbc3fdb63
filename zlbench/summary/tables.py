"""Plain-text and markdown tables, and how numbers and markers are written in them."""

from __future__ import annotations

import os
import re
import shutil
from typing import Any, Callable, Iterable, Iterator, List, Optional, Sequence

from zlbench.markers import Marker, format_marker
from zlbench.summary.rows import ROW_FIELDS


def fmt(value: Optional[float], digits: int = 6) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def fmt_pct(value: Optional[float], sign: bool = True) -> str:
    if value is None:
        return ""
    return f"{value * 100:+.1f}%" if sign else f"{value * 100:.1f}%"


# The fields that say what a marker means for its row; the rest (clock readings, load)
# stay in summary.csv and the JSON.
BRIEF_FIELDS = ("side", "why", "reason", "phase", "knob")


def marker_brief(markers: Iterable[Marker]) -> str:
    """Each distinct marker once, with only the fields that say what happened (for the
    tables people read: ``DEVICE_THROTTLED side=gems why=host_slow``)."""
    seen: List[str] = []
    for m in markers:
        text = format_marker(m.name, **{k: v for k, v in m.fields.items() if k in BRIEF_FIELDS})
        if text not in seen:
            seen.append(text)
    return "; ".join(seen)


def marker_text(markers: Iterable[Marker]) -> str:
    """Each distinct marker once, without the op/dtype/shape its row already shows."""
    seen: List[str] = []
    for m in markers:
        rest = {k: v for k, v in m.fields.items() if k not in ROW_FIELDS}
        text = format_marker(m.name, **rest)
        if text not in seen:
            seen.append(text)
    return "; ".join(seen)


_SIZE = re.compile(r"torch\.Size\(\[([^\]]*)\]\)")
_DICT_ITEM = re.compile(r"'([A-Za-z_][A-Za-z0-9_]*)':\s*")
_PAIRS = {"(": ")", "[": "]", "{": "}"}


def _wrapped(text: str) -> bool:
    """True when text is one bracketed group: "[...]" or "(...)" closing at its end."""
    if len(text) < 2 or text[0] not in "([" or text[-1] != _PAIRS[text[0]]:
        return False
    depth = 0
    for i, c in enumerate(text):
        if c in _PAIRS:
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth == 0 and i != len(text) - 1:
                return False
    return True


def _split_top(text: str) -> List[str]:
    parts, depth, start = [], 0, 0
    for i, c in enumerate(text):
        if c in _PAIRS:
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    parts.append(text[start:].strip())
    return [p for p in parts if p]


def compact_shape(text: str) -> str:
    """FlagGems' Size Detail as a person reads it: ``[torch.Size([64, 512, 512]), -0.5,
    0.5]`` -> ``64×512×512, -0.5, 0.5``; ``([torch.Size([64, 64])], {'dim': -1})`` ->
    ``64×64, dim=-1``. Display only: the row key, CSV and JSON keep the printed text."""
    out = _SIZE.sub(
        lambda m: "×".join(p.strip() for p in m.group(1).split(",") if p.strip()) or "scalar", text
    )
    out = out.strip()
    while _wrapped(out):
        out = out[1:-1].strip()
    parts = []
    for part in _split_top(out):
        if part.startswith("{") and part.endswith("}"):
            part = _DICT_ITEM.sub(lambda m: m.group(1) + "=", part[1:-1])
        elif _wrapped(part) and "×" in part:
            part = part[1:-1]
        parts.append(part)
    return ", ".join(parts) if parts else text


def terminal_width() -> int:
    """Columns to fit a text table in: $COLUMNS, the terminal's, else 160 (a pipe or a file:
    wide enough for every figure, narrow enough to read)."""
    return shutil.get_terminal_size((int(os.environ.get("COLUMNS") or 0) or 160, 24)).columns


ELLIPSIS = "…"
MIN_CUT = 12  # no text column is cut narrower than this


def _fit(widths: List[int], cut: Sequence[bool], limit: int) -> List[int]:
    """Narrow the cuttable columns, widest first, until the line fits ``limit``."""
    widths = list(widths)
    over = sum(widths) + 2 * (len(widths) - 1) - limit
    while over > 0:
        candidates = [i for i, w in enumerate(widths) if cut[i] and w > MIN_CUT]
        if not candidates:
            break
        i = max(candidates, key=lambda j: widths[j])
        others = [widths[j] for j in candidates if j != i]
        target = max(MIN_CUT, widths[i] - over, max(others, default=MIN_CUT))
        if target >= widths[i]:
            target = widths[i] - 1
        over -= widths[i] - target
        widths[i] = target
    return widths


def _cell(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + ELLIPSIS


class Cells:
    """The cells of each item, made again on every pass: a table over 200,000 rows
    reads its items twice (widths, then lines) without holding a copy of every cell."""

    def __init__(self, items: Sequence, cells: Callable[[Any], Sequence[str]]) -> None:
        self.items = items
        self.cells = cells

    def __iter__(self) -> Iterator[Sequence[str]]:
        return map(self.cells, self.items)

    def __len__(self) -> int:
        return len(self.items)


def text_table_lines(
    headers: Sequence[str],
    rows: Iterable[Sequence[str]],
    right: Sequence[bool],
    width: Optional[int] = None,
) -> Iterator[str]:
    """The lines of text_table, one at a time; ``rows`` is read twice (a list, or Cells)."""
    widths = [len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row):
            if len(cell) > widths[i]:
                widths[i] = len(cell)
    widths = _fit(widths, [not r for r in right], width or terminal_width())

    def line(cells: Sequence[str]) -> str:
        parts = [_cell(c, w).rjust(w) if r else _cell(c, w).ljust(w) for c, w, r in zip(cells, widths, right)]
        return "  ".join(parts).rstrip()

    yield line(headers)
    yield "  ".join("-" * w for w in widths)
    for row in rows:
        yield line(row)


def text_table(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    right: Sequence[bool],
    width: Optional[int] = None,
) -> str:
    """An aligned table at most ``width`` columns wide (default: the terminal's): long
    text cells (left-aligned columns) are cut with "…"; numbers are never cut. The full
    text is in the CSV and JSON."""
    return "\n".join(text_table_lines(headers, rows, right, width))


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|")


def markdown_table_lines(
    headers: Sequence[str], rows: Iterable[Sequence[str]], right: Sequence[bool]
) -> Iterator[str]:
    yield "| " + " | ".join(headers) + " |"
    yield "|" + "|".join("---:" if r else "---" for r in right) + "|"
    for row in rows:
        yield "| " + " | ".join(_md_cell(c) for c in row) + " |"


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[bool]) -> str:
    return "\n".join(markdown_table_lines(headers, rows, right))


def table_lines(
    style: str, headers: Sequence[str], rows: Iterable[Sequence[str]], right: Sequence[bool]
) -> Iterator[str]:
    """The lines of ``table``, one at a time: a caller that writes them as they come holds
    one line of the table, not the whole text."""
    if style == "markdown":
        return markdown_table_lines(headers, rows, right)
    return text_table_lines(headers, rows, right)


def table(style: str, headers: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[bool]) -> str:
    """``style`` is "table" (aligned text) or "markdown"."""
    return "\n".join(table_lines(style, headers, rows, right))


def heading(style: str, text: str) -> str:
    return f"### {text}" if style == "markdown" else f"{text}\n{'=' * len(text)}"

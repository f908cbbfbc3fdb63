"""Plain-text and markdown tables, and how numbers and markers are written in them."""

from __future__ import annotations

from typing import Iterable, List, Optional, Sequence

from zlbench.markers import Marker, format_marker
from zlbench.summary.rows import ROW_FIELDS


def fmt(value: Optional[float], digits: int = 6) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def fmt_pct(value: Optional[float], sign: bool = True) -> str:
    if value is None:
        return ""
    return f"{value * 100:+.1f}%" if sign else f"{value * 100:.1f}%"


def marker_text(markers: Iterable[Marker]) -> str:
    """Each distinct marker once, without the op/dtype/shape its row already shows."""
    seen: List[str] = []
    for m in markers:
        rest = {k: v for k, v in m.fields.items() if k not in ROW_FIELDS}
        text = format_marker(m.name, **rest)
        if text not in seen:
            seen.append(text)
    return "; ".join(seen)


def text_table(headers: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[bool]) -> str:
    widths = [len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row):
            if len(cell) > widths[i]:
                widths[i] = len(cell)

    def line(cells: Sequence[str]) -> str:
        parts = [c.rjust(w) if r else c.ljust(w) for c, w, r in zip(cells, widths, right)]
        return "  ".join(parts).rstrip()

    out = [line(headers), "  ".join("-" * w for w in widths)]
    out.extend(line(row) for row in rows)
    return "\n".join(out)


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|")


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[bool]) -> str:
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---:" if r else "---" for r in right) + "|"]
    out.extend("| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows)
    return "\n".join(out)


def table(style: str, headers: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[bool]) -> str:
    """``style`` is "table" (aligned text) or "markdown"."""
    maker = markdown_table if style == "markdown" else text_table
    return maker(headers, rows, right)


def heading(style: str, text: str) -> str:
    return f"### {text}" if style == "markdown" else f"{text}\n{'=' * len(text)}"

"""pytest plugin: a readable live terminal; nothing at all when output is a pipe.

On a terminal (``-s``, stdout a tty, ZL_RUN_DIR set, NO_COLOR unset) it filters stdout:
inputs that are identical in every row of a result table are folded into one legend
line under the table title, status words are coloured, and zlbench's marker and footer
lines are highlighted. ``zlbench run`` writes run.log from a pipe, so there this plugin
does nothing and FlagGems' text reaches the log unchanged.
"""

from __future__ import annotations

import os
import sys
from typing import List, Optional, Tuple

import pytest

from zlbench.corpus import table as fg_table
from zlbench.markers import parse_marker
from zlbench.plugins import run_dir

GREEN, RED, YELLOW, CYAN, DIM, RESET = (
    "\033[32m",
    "\033[31m",
    "\033[33m",
    "\033[36m",
    "\033[2m",
    "\033[0m",
)
_OPEN, _CLOSE = "([{", ")]}"


# --- pure text helpers -----------------------------------------------------------------


def split_top_level(text: str) -> Optional[List[str]]:
    """``[a, [b, c], 'x, y']`` -> ``['a', '[b, c]', "'x, y'"]``; None if not a list."""
    text = text.strip()
    if len(text) < 2 or text[0] != "[" or text[-1] != "]":
        return None
    items, depth, quote, start = [], 0, None, 1
    for i, ch in enumerate(text[1:-1], start=1):
        if quote:
            if ch == quote and text[i - 1] != "\\":
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch in _OPEN:
            depth += 1
        elif ch in _CLOSE:
            depth -= 1
        elif ch == "," and depth == 0:
            items.append(text[start:i].strip())
            start = i + 1
    last = text[start:-1].strip()
    if last or items:
        items.append(last)
    return items


def fold_shapes(shapes: List[str]) -> Tuple[List[str], Optional[str]]:
    """Drop list items that are equal in every row; return (new shapes, legend)."""
    parts = [split_top_level(s) for s in shapes]
    if len(shapes) < 2 or any(p is None for p in parts) or len({len(p) for p in parts}) != 1:
        return shapes, None
    width = len(parts[0])
    same = [i for i in range(width) if len({p[i] for p in parts}) == 1]
    if not same or len(same) == width:
        return shapes, None
    legend = "same in every row: " + ", ".join(f"#{i + 1}={parts[0][i]}" for i in same)
    kept = ["[" + ", ".join(p[i] for i in range(width) if i not in same) + "]" for p in parts]
    return kept, legend


def render_table(lines: List[str], colour: bool = True) -> List[str]:
    """A printed result table with shared inputs folded and status coloured."""
    rows = [(i, fg_table.well_formed_row(line)) for i, line in enumerate(lines)]
    rows = [(i, m) for i, m in rows if m]
    new_shapes, legend = fold_shapes([m["shape"] for _, m in rows])
    out = list(lines)
    for (i, m), shape in zip(rows, new_shapes):
        status = m["status"]
        if colour:
            status = (GREEN if status == "SUCCESS" else RED) + status + RESET
        out[i] = fg_table.format_row(status, m["cells"], shape)
    if legend:
        title = next((i for i, line in enumerate(out) if fg_table.TITLE_RE.match(line)), 0)
        out.insert(title + 1, (DIM + legend + RESET) if colour else legend)
    return out


def style_line(line: str) -> str:
    if "\033[" in line:
        return line
    if parse_marker(line) is not None:
        return YELLOW + line + RESET
    if line.startswith("zlbench["):
        return CYAN + line + RESET
    return line


# --- the stream filter -----------------------------------------------------------------


class PrettyStream:
    """Wraps stdout; buffers one result table at a time, passes the rest through."""

    def __init__(self, inner):
        self.inner = inner
        self.pending = ""
        self.table: Optional[List[str]] = None

    def write(self, text: str) -> int:
        self.pending += text
        while "\n" in self.pending:
            line, self.pending = self.pending.split("\n", 1)
            self._line(line)
        return len(text)

    def _line(self, line: str) -> None:
        if self.table is None:
            if fg_table.TITLE_RE.match(line):
                self.table = [line]
            else:
                self.inner.write(style_line(line) + "\n")
            return
        if line.strip() or len(self.table) < 2:
            self.table.append(line)
            return
        self._flush_table()
        self.inner.write("\n")

    def _flush_table(self) -> None:
        if self.table:
            self.inner.write("\n".join(render_table(self.table)) + "\n")
        self.table = None

    def flush(self) -> None:
        if self.table is None and self.pending:
            self.inner.write(self.pending)  # a progress prefix must show now
            self.pending = ""
        self.inner.flush()

    def close_out(self) -> None:
        self._flush_table()
        if self.pending:
            self.inner.write(self.pending)
            self.pending = ""
        self.inner.flush()

    def __getattr__(self, name):
        return getattr(self.inner, name)


def wants_pretty(config, stdout=None) -> bool:
    stdout = stdout or sys.stdout
    return (
        run_dir() is not None
        and not os.environ.get("NO_COLOR")
        and config.getoption("capture", None) == "no"
        and hasattr(stdout, "isatty")
        and stdout.isatty()
    )


STREAM = pytest.StashKey[PrettyStream]()


def pytest_configure(config):
    if wants_pretty(config):
        stream = PrettyStream(sys.stdout)
        config.stash[STREAM] = stream
        sys.stdout = stream


def pytest_unconfigure(config):
    stream = config.stash.get(STREAM, None)
    if stream is not None:
        stream.close_out()
        if sys.stdout is stream:
            sys.stdout = stream.inner
        del config.stash[STREAM]

"""What zlbench reads in pytest's own output, coded once: the closing summary line
(``=== 2 passed, 1 skipped in 3.10s ===``) and the short-summary lines
(``FAILED benchmark/test_abs.py::test_abs - ValueError: ...``). The batch classifies
attempts with them; summary reports them as issues."""

from __future__ import annotations

import re
from typing import Iterable, Optional

# In the closing line's text: "... in 3.10s".
IN_SECONDS_RE = re.compile(r" in [0-9.]+s\b")
# A short-summary line; "msg" is absent when pytest printed no reason.
FAILED_RE = re.compile(r"^(?P<kind>FAILED|ERROR) (?P<node>\S+)(?: - (?P<msg>.*))?$")


def session_end(line: str) -> Optional[str]:
    """The text of pytest's closing line (``=== 2 passed in 3.10s ===`` ->
    ``2 passed in 3.10s``), or None.

    String tests, not one regex: ``^=+ (.+ in [0-9.]+s.*?) =+$`` backtracks
    quadratically on a long line of repeated "in 1s " (172 s for 300 KB).
    """
    s = line.strip()
    if len(s) < 4 or s[0] != "=" or s[-1] != "=":
        return None
    inner = s.strip("=")
    if len(inner) < 3 or inner[0] != " " or inner[-1] != " ":
        return None
    inner = inner[1:-1]
    return inner if IN_SECONDS_RE.search(inner, 1) else None


def last_session_end(lines: Iterable[str]) -> str:
    """The last closing line's text in ``lines``; "" when pytest never got there."""
    for line in reversed(list(lines)):
        text = session_end(line.strip())
        if text is not None:
            return text
    return ""

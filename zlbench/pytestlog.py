"""What zlbench reads in pytest's own output, coded once: the closing summary line
(``=== 2 passed, 1 skipped in 3.10s ===``) and the short-summary lines
(``FAILED benchmark/test_abs.py::test_abs - ValueError: ...``). The batch classifies
attempts with them; summary reports them as issues."""

from __future__ import annotations

import re
from typing import Iterable, Optional

# The closing line; group "text" is what stands between the rules.
SESSION_END_RE = re.compile(r"^=+ (?P<text>.+ in [0-9.]+s\b.*?) =+$")
# A short-summary line; "msg" is absent when pytest printed no reason.
FAILED_RE = re.compile(r"^(?P<kind>FAILED|ERROR) (?P<node>\S+)(?: - (?P<msg>.*))?$")


def session_end(line: str) -> Optional[str]:
    """The text of pytest's closing line (``2 passed in 3.10s``), or None."""
    m = SESSION_END_RE.match(line)
    return m["text"] if m else None


def last_session_end(lines: Iterable[str]) -> str:
    """The last closing line's text in ``lines``; "" when pytest never got there."""
    for line in reversed(list(lines)):
        text = session_end(line.strip())
        if text is not None:
            return text
    return ""

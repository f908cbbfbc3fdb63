"""Marker lines: one line each, ``NAME key=value ...``, printed into run.log.

A marker says that something was measured differently from what was asked (a timer
fell back, a replay missed a key). Plugins print them, summary attaches them to rows.
Values without spaces or quotes are written bare; anything else is JSON-quoted, so a
shape such as ``[torch.Size([64, 64])]`` survives the round trip exactly.

Known names (keep in step with docs/design.md, "Marker lines"):
"""

from __future__ import annotations

import json
import re
from typing import Dict, NamedTuple, Optional

PREFLIGHT_FAILED = "PREFLIGHT_FAILED"
BENCHMARK_DIRECT_NO_CUDAGRAPH = "BENCHMARK_DIRECT_NO_CUDAGRAPH"
AUTOTUNE_REPLAY_FALLBACK = "AUTOTUNE_REPLAY_FALLBACK"
AUTOTUNE_REPLAY_NONE = "AUTOTUNE_REPLAY_NONE"
AUTOTUNE_REPLAY_MISMATCH = "AUTOTUNE_REPLAY_MISMATCH"
PARALLEL_WARMUP_REFUSED = "PARALLEL_WARMUP_REFUSED"
COMPAT_SKIP_REMOVED = "COMPAT_SKIP_REMOVED"
RUN_PHASE = "RUN_PHASE"
WORKER_FORK_REFUSED = "WORKER_FORK_REFUSED"
DEVICE_THROTTLED = "DEVICE_THROTTLED"
POWER_CAP_WINDOW = "POWER_CAP_WINDOW"
DIRECT_TIMER_HOST_CLOCK = "DIRECT_TIMER_HOST_CLOCK"
DIRECT_TIMER_UNTRACED = "DIRECT_TIMER_UNTRACED"
# Its ``kind``: the calls ran nothing on the device (a view), or device work not in the
# calls' ranges (launched from another thread, or under no op).
NO_DEVICE_WORK = "no_device_work"
OUTSIDE_RANGES = "outside_ranges"
NO_MEASUREMENT = "NO_MEASUREMENT"
OUTPUT_TRUNCATED = "OUTPUT_TRUNCATED"
# compile_<phase>_no_evict is a family: the phase is part of the name.
NO_EVICT_RE = re.compile(r"^compile_[a-z0-9_]+_no_evict$")

KNOWN = {
    PREFLIGHT_FAILED,
    BENCHMARK_DIRECT_NO_CUDAGRAPH,
    AUTOTUNE_REPLAY_FALLBACK,
    AUTOTUNE_REPLAY_NONE,
    AUTOTUNE_REPLAY_MISMATCH,
    PARALLEL_WARMUP_REFUSED,
    COMPAT_SKIP_REMOVED,
    RUN_PHASE,
    WORKER_FORK_REFUSED,
    DEVICE_THROTTLED,
    POWER_CAP_WINDOW,
    DIRECT_TIMER_HOST_CLOCK,
    DIRECT_TIMER_UNTRACED,
    NO_MEASUREMENT,
    OUTPUT_TRUNCATED,
}

_BARE = re.compile(r'^[^\s"=]+$')
_NAME = re.compile(r"^([A-Za-z][A-Za-z0-9_]*)(?:\s+(.*))?$")
_PAIR = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)=("(?:[^"\\]|\\.)*"|[^\s"]*)')


class Marker(NamedTuple):
    name: str
    fields: Dict[str, str]

    def get(self, key: str, default: Optional[str] = None) -> Optional[str]:
        return self.fields.get(key, default)


def is_marker_name(name: str) -> bool:
    return name in KNOWN or bool(NO_EVICT_RE.match(name))


def _quote(value: object) -> str:
    text = str(value)
    if text and _BARE.match(text):
        return text
    return json.dumps(text)


def format_marker(name: str, **fields: object) -> str:
    """``format_marker("X", op="abs", shape="[1, 2]")`` -> ``X op=abs shape="[1, 2]"``."""
    parts = [name] + [f"{k}={_quote(v)}" for k, v in fields.items() if v is not None]
    return " ".join(parts)


def parse_marker(line: str) -> Optional[Marker]:
    """The marker on this line, or None. Unknown names are not markers."""
    m = _NAME.match(line.strip())
    if not m or not is_marker_name(m.group(1)):
        return None
    fields: Dict[str, str] = {}
    rest = m.group(2) or ""
    pos = 0
    while pos < len(rest):
        pm = _PAIR.match(rest, pos)
        if not pm:
            break
        key, raw = pm.group(1), pm.group(2)
        fields[key] = json.loads(raw) if raw.startswith('"') else raw
        pos = pm.end()
    return Marker(m.group(1), fields)

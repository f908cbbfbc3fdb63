"""Per-row measurement records (``rundir.ROW_STATS``), one JSON line per timing.

The timer plugins append a line after every timing call (a killed run keeps the rows
it measured); summary joins them to the printed rows on (op, dtype, shape, side), the
n-th record of a key going with the n-th printed row of that key. A line:

    {"op": "abs", "dtype": "torch.float16", "shape": "[torch.Size([64])]",
     "side": "gems", "timer": "graph", "median_ms": 0.0011, "samples": 200,
     "spread": 0.0012, "stop": "noise", "device": {"before": {...}, "after": {...}},
     "throttled": null}

``spread`` is the relative half-width of the median's 95% confidence interval
(``zlbench.timing.relative_spread``); None where the timer had no samples of its own
(do_bench mode). ``throttled`` names why the device was slow during the row, or null.
Optional: ``clock`` (the direct timer's), ``placements`` (the graph timer's input
placements), ``autotune`` (``{"<kernel> <key>": config}`` from the autotune plugin), and
from the same plugin ``compile_s`` / ``tune_s``: seconds compiling kernels and
autotuning while the row was timed (absent when it did neither); ``cost_ms`` (the graph
timer's steps in ms and how they ended), ``gap_ms`` (the benchmark's own work since the
previous timing). A graph row's ``stop`` is ``noise`` (pinned after the first round of
replays) or ``budget`` (the caller's rep filled).
Nothing here imports torch.
"""

from __future__ import annotations

import math
from typing import Dict, Iterable, List, Optional, Tuple

from zlbench import rundir

Key = Tuple[Optional[str], Optional[str], Optional[str], Optional[str]]

# The file itself (name, append, read) belongs to zlbench.rundir.
ROW_STATS = rundir.ROW_STATS
append = rundir.append_row_stat
read = rundir.read_row_stats


def key_of(record: dict) -> Key:
    return (record.get("op"), record.get("dtype"), record.get("shape"), record.get("side"))


def by_key(records: Iterable[dict]) -> Dict[Key, List[dict]]:
    """Records per key, in the order they were written."""
    out: Dict[Key, List[dict]] = {}
    for rec in records:
        out.setdefault(key_of(rec), []).append(rec)
    return out


def finite(value) -> Optional[float]:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None

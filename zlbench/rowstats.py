"""Per-row measurement records: ``$ZL_RUN_DIR/row_stats.jsonl``, one JSON line per timing.

The timer plugins append a line after every timing call (a killed run keeps the rows
it measured); summary joins them to the printed rows on (op, dtype, shape, side), the
n-th record of a key going with the n-th printed row of that key. A line:

    {"op": "abs", "dtype": "torch.float16", "shape": "[torch.Size([64])]",
     "side": "gems", "timer": "graph", "median_ms": 0.0011, "samples": 200,
     "spread": 0.0012, "stop": "graph", "device": {"before": {...}, "after": {...}},
     "throttled": null}

``spread`` is the relative half-width of the median's 95% confidence interval
(``zlbench.timing.relative_spread``); None where the timer had no samples of its own
(do_bench mode). ``throttled`` names why the device was slow during the row, or null.
Nothing here imports torch.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Tuple

ROW_STATS = "row_stats.jsonl"

Key = Tuple[Optional[str], Optional[str], Optional[str], Optional[str]]


def append(run_dir: Path, record: dict) -> None:
    """One line, flushed: lines never interleave (one writer per run dir)."""
    with open(Path(run_dir) / ROW_STATS, "a", encoding="utf-8") as f:
        f.write(json.dumps(record, sort_keys=True, default=str) + "\n")


def key_of(record: dict) -> Key:
    return (record.get("op"), record.get("dtype"), record.get("shape"), record.get("side"))


def read(run_dir: Path) -> Tuple[List[dict], List[str]]:
    """(records, problems). A torn last line (the process was killed) is a problem,
    not an error."""
    path = Path(run_dir) / ROW_STATS
    if not path.is_file():
        return [], []
    records, problems = [], []
    with open(path, encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                problems.append(f"{path}:{lineno}: not a JSON line, skipped")
                continue
            if isinstance(rec, dict):
                records.append(rec)
    return records, problems


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

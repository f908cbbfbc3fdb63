"""Per-row measurement records (``rundir.ROW_STATS``), one JSON line per timing.

The timer plugins append a line after every timing call (a killed run keeps the rows
it measured); summary joins them to the printed rows on (op, dtype, shape, side), the
n-th record of a key going with the n-th printed row of that key. A line:

    {"op": "abs", "dtype": "torch.float16", "shape": "[torch.Size([64])]",
     "side": "gems", "timer": "graph", "median_ms": 0.0011, "samples": 200,
     "spread": 0.0012, "stop": "noise", "device": {"before": {...}, "after": {...}},
     "throttled": null}

``median_ms`` is the per-call median; a graph row timed at two placements or more (or
in two interleaved graphs) gives the trimmed mean of their own medians there
(``zlbench.timing.over_placements``). ``spread`` is the relative half-width of its 95%
confidence interval (``zlbench.timing.relative_spread``, or ``row_spread`` for such a
graph row); None where the timer had no samples of its own
(do_bench mode). ``throttled`` names why the device was slow during the row, or null.
Optional: ``clock`` (the direct timer's), ``placements`` (the graph timer's input
placements), ``autotune`` (``{"<kernel> <key>": config}`` from the autotune plugin), and
from the same plugin ``compile_s`` / ``tune_s``: seconds compiling kernels and
autotuning while the row was timed (absent when it did neither); ``cost_ms`` (the
timer's steps in ms and how they ended; docs/design.md lists both timers'), ``gap_ms``
(the benchmark's own work since the previous timing). A graph row's ``stop`` is
``noise`` (pinned within the caller's rep), ``budget`` (the caller's rep filled),
``placements`` (the input placements, not their replays, kept the median from being
pinned: ``timing.placements_dominate``) or ``power_cap`` (timed over a power-cap
window: ``cost_ms["power_cap"]``).
Each line carries ``format`` (rundir.ROW_STATS_FORMAT); a line without one is format 1.
This module is the record's one writer (``append``) and one reader (``read``); the
file's name is zlbench.rundir's. Nothing here imports torch.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple

from zlbench import rundir
from zlbench.safe_read import read_text_capped

Key = Tuple[Optional[str], Optional[str], Optional[str], Optional[str]]

ROW_STATS = rundir.ROW_STATS
FORMAT = rundir.ROW_STATS_FORMAT
# The fields a record may carry (the docstring above says what each means): the key
# that joins it to its printed row, then what the timer and the plugins add.
KEY_FIELDS = ("op", "dtype", "shape", "side")
FIELDS = frozenset(
    {
        *KEY_FIELDS,
        "timer",
        "median_ms",
        "samples",
        "spread",
        "stop",
        "throttled",
        "clock",
        "placements",
        "cost_ms",
        "gap_ms",
        "autotune",
        "compile_s",
        "tune_s",
        "device",
    }
)


def append(run_dir: Path, record: Mapping[str, Any]) -> None:
    """One JSON line, flushed at once: a killed run keeps every row it measured.
    Raises ValueError for a field the record does not have (a typo in a plugin)."""
    unknown = set(record) - FIELDS
    if unknown:
        raise ValueError(f"not a {ROW_STATS} field: {', '.join(sorted(unknown))}")
    line = json.dumps({rundir.FORMAT_KEY: FORMAT, **record}, sort_keys=True, default=str)
    with open(rundir.row_stats_path(Path(run_dir)), "a", encoding="utf-8") as f:
        f.write(line + "\n")


def read(run_dir: Path, strict: bool = False) -> "tuple[List[dict], List[str]]":
    """(records, problems): a torn last line (the process was killed), a line that is
    not a record or one of a newer format is a problem and left out. ``strict``: raise
    rundir.DocumentError at the first problem instead. Records come without ``format``."""
    path = rundir.row_stats_path(Path(run_dir))
    if not path.is_file():
        return [], []
    records: List[dict] = []
    bad: List[Tuple[str, str]] = []  # (where in the file, what is wrong)
    try:
        text, _ = read_text_capped(path)
    except OSError as e:
        bad.append(("", str(e)))
        text = ""
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            bad.append((f":{lineno}", "not a JSON line"))
            continue
        if not isinstance(rec, dict):
            continue
        problem = rundir.format_problem(rec, FORMAT, "row record")
        if problem:
            bad.append((f":{lineno}", problem))
            continue
        rec.pop(rundir.FORMAT_KEY, None)
        records.append(rec)
    if strict and bad:
        raise rundir.DocumentError(path, f"{bad[0][0]}: {bad[0][1]}")
    problems = [f"{path}{where}: {why}" + (", skipped" if where else "") for where, why in bad]
    return records, problems


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


def placement_medians(record: dict) -> Optional[List[float]]:
    """A graph row's own medians per input placement (``cost_ms["placement_ms"]``: each
    placement timed in a graph of its own), where it has two or more, each a positive
    finite number; else None (one placement, interleaved graphs, whose ``graph_ms`` each
    mix several placements, a power-cap window, the direct timer)."""
    cost = record.get("cost_ms")
    found = cost.get("placement_ms") if isinstance(cost, dict) else None
    if not isinstance(found, list) or len(found) < 2:
        return None
    medians = [finite(v) for v in found]
    kept = [m for m in medians if m is not None and m > 0]
    return kept if len(kept) == len(medians) else None

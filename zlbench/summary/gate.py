"""The A/B gate: which rows make `summary --ab --fail-on ... / --max-slowdown PCT` exit 1.

A nightly script gates on a verdict, never on a raw gain: a row trips only when its
verdict says so (UNKNOWN rows, throttled ones included, trip only under ``unknown``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

from zlbench.summary.ab import ABResult
from zlbench.summary.verdict import FASTER, SLOWER, UNKNOWN

# --fail-on choices: a verdict, or "missing" (a row of A that B did not measure).
FAIL_ON = ("slower", "faster", "unknown", "missing")
_VERDICT_OF = {"slower": SLOWER, "faster": FASTER, "unknown": UNKNOWN}


def parse_fail_on(text: Optional[str]) -> Tuple[str, ...]:
    """``slower,unknown`` -> ("slower", "unknown"); ValueError naming a bad word."""
    if not text:
        return ()
    words = [w.strip().lower() for w in text.split(",") if w.strip()]
    bad = [w for w in words if w not in FAIL_ON]
    if bad or not words:
        raise ValueError(
            f"{', '.join(bad) or repr(text)}: choose from {', '.join(FAIL_ON)} (comma-separated)"
        )
    return tuple(dict.fromkeys(words))


@dataclass
class Tripped:
    why: str  # "SLOWER", "SLOWER beyond --max-slowdown 5%", "missing in B: ..."
    op: str
    dtype: str
    shape: str
    change: Optional[float]  # B/A - 1 of the latency, where both were measured
    detail: str = ""


def tripped(result: ABResult, fail_on: Sequence[str], max_slowdown: Optional[float]) -> List[Tripped]:
    """The rows that trip the gate, real changes first. ``max_slowdown`` is a fraction:
    SLOWER rows whose slowdown exceeds it trip even without ``slower`` in ``fail_on``."""
    wanted = {_VERDICT_OF[w] for w in fail_on if w in _VERDICT_OF}
    out: List[Tripped] = []
    for p in result.pairs:
        v = p.verdict
        hit = v.status in wanted
        why = v.status
        if not hit and max_slowdown is not None and v.status == SLOWER and (v.change or 0) > max_slowdown:
            hit = True
            why = f"SLOWER beyond --max-slowdown {max_slowdown * 100:g}%"
        if hit:
            out.append(Tripped(why, p.a.op, p.a.dtype, p.a.shape, v.change, v.why))
    if "missing" in fail_on:
        for n in result.not_comparable:
            out.append(Tripped("missing", n.a.op, n.a.dtype, n.a.shape, None, f"not comparable: {n.reason}"))
        for r in result.only_a:
            out.append(Tripped("missing", r.op, r.dtype, r.shape, None, "only in A: B printed no such row"))
    return out

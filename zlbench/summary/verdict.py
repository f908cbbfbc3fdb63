"""Is a row's change between A and B real? One pure function, ``verdict``.

The rule, in the spirit of nvbench's compare script (which calls a change real when
it exceeds the smaller of the two rows' noise):

    change    = B ms / A ms - 1                     (positive: B is slower)
    threshold = floor + sqrt(spread_A^2 + spread_B^2)
    SAME      when |change| <= threshold
    SLOWER    when change > threshold
    FASTER    when change < -threshold
    UNKNOWN   when either row has no spread (a timer that kept no samples, an old
              run), a latency is missing, or A and B are the same run; and (judged in
              zlbench.summary.ab) when either side was measured while the machine was
              slowed down (DEVICE_THROTTLED: throttled, clocks down, the host slow), or
              one side's figure is sustained at the power cap and the other's is not
              (POWER_CAP_WINDOW), or
              the two sides were timed by different clocks, or one side's number is
              host time (its calls ran no device work); SAME without a threshold when
              neither side's calls ran device work (there is no device time to compare)

``spread`` is each row's relative half-width of its median's 95% confidence interval
(recorded by the timer, see zlbench.rowstats); the root of squares is the half-width
of the difference of two independent medians. ``floor`` is the A/A noise floor: what
two runs of the same build differ by beyond their own spreads (clock and thermal
drift between runs). Its default is the graph timer's A/A target (2%); pass what an
A/A pair of your own machine shows.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Optional

SAME, FASTER, SLOWER, UNKNOWN = "SAME", "FASTER", "SLOWER", "UNKNOWN"
VERDICTS = (SLOWER, FASTER, UNKNOWN, SAME)  # the order rows are listed in
# How the views name the UNKNOWN rows measured while the machine was slowed down.
THROTTLED_LABEL = "UNKNOWN (measured throttled)"
DEFAULT_NOISE_FLOOR = 0.02


class Verdict(NamedTuple):
    status: str
    change: Optional[float]  # B / A - 1 of the latency
    threshold: Optional[float]  # |change| above this is real
    why: str = ""  # for UNKNOWN: what is missing
    # For UNKNOWN: the row was measured while the machine was slowed down (either side).
    # Such rows are counted apart: their change is the machine's, not the build's.
    throttled: bool = False

    @property
    def real(self) -> bool:
        return self.status in (FASTER, SLOWER)


def _usable(ms: Optional[float]) -> bool:
    return ms is not None and math.isfinite(ms) and ms > 0


def verdict(
    a_ms: Optional[float],
    a_spread: Optional[float],
    b_ms: Optional[float],
    b_spread: Optional[float],
    floor: float = DEFAULT_NOISE_FLOOR,
    same_run: bool = False,
) -> Verdict:
    """SAME, FASTER, SLOWER or UNKNOWN for one row (rule in the module docstring)."""
    if not (_usable(a_ms) and _usable(b_ms)):
        return Verdict(UNKNOWN, None, None, "latency missing")
    change = b_ms / a_ms - 1.0
    if same_run:
        return Verdict(UNKNOWN, change, None, "A and B are the same run")
    missing = [
        side for side, s in (("A", a_spread), ("B", b_spread)) if s is None or not math.isfinite(s) or s < 0
    ]
    if missing:
        return Verdict(UNKNOWN, change, None, f"no spread recorded for {' and '.join(missing)}")
    threshold = floor + math.hypot(a_spread, b_spread)
    if abs(change) <= threshold:
        return Verdict(SAME, change, threshold)
    return Verdict(SLOWER if change > 0 else FASTER, change, threshold)

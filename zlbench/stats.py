"""Small statistics over ratios, shared by the summary aggregates and the A/B ranges."""

from __future__ import annotations

import math
from typing import Optional, Sequence


def geomean(values: Sequence[float]) -> Optional[float]:
    """Geometric mean of positive values; None for none."""
    if not values:
        return None
    return math.exp(math.fsum(math.log(v) for v in values) / len(values))


def quantile(values: Sequence[float], q: float) -> Optional[float]:
    """Linear-interpolated quantile (q in [0, 1]) of unsorted values; None for none."""
    if not values:
        return None
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    low = int(math.floor(pos))
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)

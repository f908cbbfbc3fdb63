"""Steps in one row's latency over nights: where it moved beyond the noise.

The model is asv's (airspeed-velocity, asv/step_detect.py, BSD-3-Clause): a series is
piecewise constant plus Laplace noise, each piece fitted by its median under an L1 cost,
and the number of pieces chosen by a Schwarz-type criterion,
``beta * pieces + ln(floor + cost)`` with asv's ``beta = 4 ln(n) / n``. This is a simpler
equivalent written here, not a port:

- asv solves the penalised fit (a Potts model) exactly for a range of penalties and picks
  the penalty by golden-section search; here binary segmentation adds the single best split
  while the criterion improves, O(n log n) per split with running medians, which is enough
  for 30,000 series of tens of nights.
- asv also fits an autocorrelation of the noise; here there is none.
- values are log latencies, so costs, the floor and the thresholds are all relative.

Then, like asv's ``detect_regressions``, a step is kept only when it is larger than the
threshold (5% by default, asv's default regression threshold), than the scatter inside
the pieces on either side (asv's error estimate), and than the rows' own measured spread
where they carry one. A single night away from a level it returns to is an outlier, not
a step; a single night at the end is a step that has one night so far.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

THRESHOLD = 0.05
# The least the fit can be credited for, per night, in log units (0.1%): asv's floor on
# the noise amplitude, which keeps a perfect fit of few points from looking infinitely good.
FLOOR_PER_NIGHT = 0.001


@dataclass(frozen=True)
class Step:
    # Position in the series of the first value after the step.
    index: int
    before: float  # median latency of the piece before
    after: float  # median latency of the piece after
    nights_after: int  # how many nights the new level has held so far

    @property
    def change(self) -> float:
        """after / before - 1: positive is slower."""
        return self.after / self.before - 1.0


def _costs(xs: Sequence[float]) -> List[float]:
    """cost[k] = sum |x - median(xs[:k])| over xs[:k], for k = 0..len(xs), by running
    medians in two heaps (asv's rolling_median_dev does the same)."""
    lower: List[float] = []  # max-heap of the lower half, negated
    upper: List[float] = []
    s_lo = s_up = 0.0
    out = [0.0]
    for x in xs:
        if lower and x > -lower[0]:
            heapq.heappush(upper, x)
            s_up += x
        else:
            heapq.heappush(lower, -x)
            s_lo += x
        if len(lower) > len(upper) + 1:
            v = -heapq.heappop(lower)
            s_lo -= v
            heapq.heappush(upper, v)
            s_up += v
        elif len(upper) > len(lower):
            v = heapq.heappop(upper)
            s_up -= v
            heapq.heappush(lower, -v)
            s_lo += v
        m = -lower[0]
        out.append(max(0.0, (s_up - m * len(upper)) + (m * len(lower) - s_lo)))
    return out


def _median(xs: Sequence[float]) -> float:
    s = sorted(xs)
    k = len(s) // 2
    return s[k] if len(s) % 2 else (s[k - 1] + s[k]) / 2


def _best_split(xs: Sequence[float], lo: int, hi: int) -> Tuple[float, int]:
    """(cost saved, split) of the best single split of xs[lo:hi]."""
    seg = xs[lo:hi]
    left = _costs(seg)
    right = _costs(seg[::-1])
    whole = left[-1]
    n = hi - lo
    gain, at = 0.0, -1
    for k in range(1, n):
        g = whole - (left[k] + right[n - k])
        if g > gain:
            gain, at = g, lo + k
    return gain, at


def _segment(xs: Sequence[float]) -> List[int]:
    """Boundaries (start of every piece but the first) chosen by the criterion."""
    n = len(xs)
    beta = 4 * math.log(n) / n
    floor = FLOOR_PER_NIGHT * n
    bounds: List[int] = []
    total = _costs(xs)[-1]
    while True:
        edges = [0] + bounds + [n]
        best = max((_best_split(xs, a, b) for a, b in zip(edges, edges[1:]) if b - a >= 2), default=(0.0, -1))
        gain, at = best
        if at < 0:
            break
        pieces = len(bounds) + 1
        if beta * (pieces + 1) + math.log(floor + total - gain) >= beta * pieces + math.log(floor + total):
            break
        bounds = sorted(bounds + [at])
        total -= gain
    return bounds


def _pieces(xs: Sequence[float], bounds: Sequence[int]) -> List[Tuple[int, int, float, float]]:
    """(start, end, median, mean |x - median|) of each piece."""
    edges = [0] + list(bounds) + [len(xs)]
    out = []
    for a, b in zip(edges, edges[1:]):
        m = _median(xs[a:b])
        out.append((a, b, m, sum(abs(x - m) for x in xs[a:b]) / (b - a)))
    return out


def _prune(xs: Sequence[float], bounds: List[int], least: float) -> List[int]:
    """Drop boundaries whose step is within the noise, and one-night excursions."""
    while True:
        pieces = _pieces(xs, bounds)
        drop: Optional[List[int]] = None
        for i in range(len(pieces) - 1):
            (_, _, m1, e1), (a2, b2, m2, e2) = pieces[i], pieces[i + 1]
            if abs(m2 - m1) <= max(least, e1, e2):
                drop = [a2]
                break
            if (
                b2 - a2 == 1
                and i + 2 < len(pieces)
                and abs(pieces[i + 2][2] - m1) <= max(least, e1, pieces[i + 2][3])
            ):
                drop = [a2, b2]  # up (or down) for one night, then back
                break
        if drop is None:
            return bounds
        bounds = [b for b in bounds if b not in drop]


def find_steps(
    values: Sequence[Optional[float]], threshold: float = THRESHOLD, spread: float = 0.0
) -> List[Step]:
    """Steps of a latency series (one value per night, None where the row was not
    measured). ``spread``: the rows' own relative spread, where measured."""
    index = [i for i, v in enumerate(values) if v is not None and v > 0 and math.isfinite(v)]
    if len(index) < 2:
        return []
    raw = [float(values[i]) for i in index]
    if max(raw) <= min(raw) * (1 + threshold):
        return []  # no two nights differ by the threshold: nothing can step
    xs = [math.log(v) for v in raw]
    least = max(math.log1p(threshold), math.log1p(spread))
    bounds = _prune(xs, _segment(xs), least)
    pieces = _pieces(xs, bounds)
    return [
        Step(index[a2], math.exp(m1), math.exp(m2), b2 - a2)
        for (_, _, m1, _), (a2, b2, m2, _) in zip(pieces, pieces[1:])
    ]

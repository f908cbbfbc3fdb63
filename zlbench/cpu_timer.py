"""A wall-clock ``do_bench`` with triton's signature, for hosts without triton.

The bundled sample corpus times through ``triton.testing.do_bench`` when triton imports
and through this function otherwise; both are looked up at call time, so the timer
plugins can replace either for a run. Like triton's, it runs ``fn`` for ``warmup`` ms,
then for ``rep`` ms, and reduces the per-call times (ms).
"""

from __future__ import annotations

import statistics
import time
from typing import Callable, List, Optional, Sequence, Union


def _reduce(times: List[float], quantiles: Optional[Sequence[float]], return_mode: str):
    if quantiles is not None:
        ordered = sorted(times)
        picks = [ordered[min(len(ordered) - 1, int(q * len(ordered)))] for q in quantiles]
        return picks[0] if len(picks) == 1 else picks
    if return_mode == "all":
        return times
    reducer = {
        "min": min,
        "max": max,
        "mean": statistics.fmean,
        "median": statistics.median,
    }[return_mode]
    return reducer(times)


def do_bench(
    fn: Callable[[], object],
    warmup: float = 25,
    rep: float = 100,
    grad_to_none=None,
    quantiles: Optional[Sequence[float]] = None,
    return_mode: str = "mean",
) -> Union[float, List[float]]:
    assert return_mode in ("min", "max", "mean", "median", "all")
    t0 = time.perf_counter()
    fn()
    first_ms = (time.perf_counter() - t0) * 1e3
    n_warmup = max(1, int(float(warmup) / max(first_ms, 1e-3)))
    n_repeat = max(1, int(float(rep) / max(first_ms, 1e-3)))
    for _ in range(min(n_warmup, 1000)):
        fn()
    times = []
    for _ in range(min(n_repeat, 1000)):
        if grad_to_none is not None:
            for x in grad_to_none:
                x.grad = None
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return _reduce(times, quantiles, return_mode)

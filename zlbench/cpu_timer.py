"""A wall-clock ``do_bench`` with triton's signature, for hosts without triton.

The bundled sample corpus times through ``triton.testing.do_bench`` when triton imports
and through this function otherwise; both are looked up at call time, so the timer
plugins can replace either for a run. It runs ``fn`` for ``warmup`` ms, then for ``rep``
ms, and reduces the per-call times (ms) with ``zlbench.timing.reduce_samples``, as the graph
timer does, so CPU and GPU numbers reduce alike.
"""

from __future__ import annotations

import time
from typing import Callable, List, Optional, Sequence, Union

from zlbench.timing import clear_grads, reduce_samples


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
        clear_grads(grad_to_none)
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return reduce_samples(times, quantiles, return_mode)

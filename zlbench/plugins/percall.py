"""The per-call direct timer: every call timed on its own, until the median is pinned.

After one call (JIT, autotuning) and ``warmup`` ms of calls, each call runs between
its own pair of device events (``torch.<device>.Event(enable_timing=True)``; the
host's perf_counter on cpu), in batches; after each batch the samples are checked
against ``timing.StopRule`` (nvbench's stopping criterion: enough samples, the
caller's ``rep`` budget spent, and the median's 95% CI within the noise target; or
the time cap). The L2 cache is not flushed between calls: rows are measured warm, as
the graph timer measures them (see docs/design.md, "Two timing calibers").
"""

from __future__ import annotations

import time
from typing import Any, Callable, List, Optional, Tuple

from zlbench.timing import StopRule, batch_calls, clear_grads

WARMUP_MAX_CALLS = 10_000


class HostClock:
    name = "host"

    def sync(self) -> None:
        pass

    def run(self, fn: Callable[[], Any], calls: int, grad_to_none) -> List[float]:
        times = []
        for _ in range(calls):
            clear_grads(grad_to_none)
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
        return times


class EventClock:
    """Device events around each call; one synchronisation per batch."""

    def __init__(self, module: Any, name: str):
        self.module = module
        self.name = name

    def sync(self) -> None:
        self.module.synchronize()

    def run(self, fn: Callable[[], Any], calls: int, grad_to_none) -> List[float]:
        event = self.module.Event
        pairs = [(event(enable_timing=True), event(enable_timing=True)) for _ in range(calls)]
        for start, end in pairs:
            clear_grads(grad_to_none)
            start.record()
            fn()
            end.record()
        pairs[-1][1].synchronize()
        return [start.elapsed_time(end) for start, end in pairs]


def choose_clock(torch_device: Optional[str]) -> Tuple[Any, Optional[str]]:
    """(clock, why the host clock stands in for the device's) for a backend."""
    if torch_device is None:
        return HostClock(), None
    try:
        import torch

        module = getattr(torch, torch_device, None)
        if module is None or not module.is_available():
            return HostClock(), f"torch.{torch_device} is not available in this process"
    except Exception as e:  # torch missing or broken: the benchmark fails on its own
        return HostClock(), f"torch.{torch_device}: {type(e).__name__}: {e}"
    return EventClock(module, f"torch.{torch_device}.Event"), None


def percall_bench(
    fn: Callable[[], Any],
    clock: Any,
    warmup_ms: float,
    rule: StopRule,
    grad_to_none=None,
    on_warm: Optional[Callable[[], None]] = None,
) -> Tuple[List[float], str]:
    """(per-call times in ms, why it stopped)."""
    clear_grads(grad_to_none)
    fn()  # JIT compilation and autotuning happen here, outside every sample
    clock.sync()
    begin = time.perf_counter()
    calls, warm = 1, []
    while True:
        warm = clock.run(fn, calls, grad_to_none)
        if (time.perf_counter() - begin) * 1e3 >= warmup_ms:
            break
        calls = min(calls * 2, WARMUP_MAX_CALLS)
    per_call = sorted(warm)[len(warm) // 2]
    if on_warm is not None:
        on_warm()
    samples: List[float] = []
    begin = time.perf_counter()
    elapsed = 0.0
    while True:
        samples += clock.run(fn, batch_calls(per_call, elapsed), grad_to_none)
        elapsed = (time.perf_counter() - begin) * 1e3
        stop = rule.verdict(sorted(samples), elapsed)
        if stop is not None:
            return samples, stop

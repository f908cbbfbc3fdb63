"""The per-call direct timer: every call timed on its own, until the median is pinned.

After one call (JIT, autotuning) and a warm-up (``timing.WarmupRule``: until per-call
time settles, the caller's ``warmup`` ms as the cap; or that budget at least), each call
is timed on its own by a clock, in batches. Two clocks on devices:

- ``TracedClock`` (mode ``kernels``): the device time of the kernels and copies the call
  ran, summed from the profiler's activity trace (torch.profiler: CUPTI on CUDA). The
  host's gaps between them (launch latency, the host sync of an operator whose output
  size depends on its data) are left out, as graph replay leaves them out. Measured on an
  H200: torch.nonzero over 2^20 halves traced at 10.51/10.51/10.52 us in three processes
  while events around the same calls read 38.8-41.7 us, and masked_select's events
  jumped from 73 to 120 us within one process: host time is the noise.
- ``EventClock`` (mode ``percall``): a pair of device events around each call
  (``torch.<device>.Event(enable_timing=True)``), host gaps included; the host's
  perf_counter on cpu.

After each batch the samples are checked
against ``timing.StopRule`` (nvbench's stopping criterion: enough samples, the
caller's ``rep`` budget spent, and the median's 95% CI within the noise target; or
the time cap). The L2 cache is not flushed between calls: rows are measured warm, as
the graph timer measures them (see docs/design.md, "Two timing calibers").
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable, List, Optional, Tuple

from zlbench.timing import StopRule, WarmupRule, batch_calls, clear_grads

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


class NothingTraced(Exception):
    """The trace shows no device work for the calls: time them with events instead."""


TRACE_MARK = "zlbench.call"


class TracedClock:
    """Per call, the device time of its kernels and copies from the profiler's trace;
    warm-up runs on the event clock (tracing costs host time, not device time)."""

    def __init__(self, module: Any, activity: str, events: EventClock):
        self.module = module
        self.activity = activity
        self.name = f"torch.profiler.{activity}"
        self.warmup_clock = events
        # Each batch is a profiler session. Tearing CUPTI down after each and starting it
        # again crashes once CUDA graphs were captured in the process (CUDA 11 and 12;
        # torch.profiler applies the same workaround under inductor's cudagraphs), and
        # the graph timer captures in this process.
        os.environ.setdefault("TEARDOWN_CUPTI", "0")

    def sync(self) -> None:
        self.module.synchronize()

    def run(self, fn: Callable[[], Any], calls: int, grad_to_none) -> List[float]:
        from torch.profiler import ProfilerActivity, profile, record_function

        # CPU: the marked ranges the device work is attributed to.
        activities = list(dict.fromkeys([ProfilerActivity.CPU, getattr(ProfilerActivity, self.activity)]))
        with profile(activities=activities) as prof:
            for _ in range(calls):
                clear_grads(grad_to_none)
                with record_function(TRACE_MARK):
                    fn()
            self.module.synchronize()
        # The host side of each range (the trace also projects each range onto the
        # device timeline as a second event of the same name): its device total sums
        # the kernels and copies its launches ran (us).
        from torch.autograd import DeviceType

        events = prof.events()
        on_host = [getattr(e, "device_type", DeviceType.CPU) == DeviceType.CPU for e in events]
        times = [_device_us(e) / 1000.0 for e, host in zip(events, on_host) if host and e.name == TRACE_MARK]
        if len(times) != calls or not any(times):
            raise NothingTraced(f"{len(times)} of {calls} calls traced, device time {sum(times):g} ms")
        # A range counts what its own thread launched; work launched from another thread
        # (autograd's device threads run backward) is in the trace but in no range.
        # Kernels, copies and fills; not a range's projection onto the device timeline.
        traced = (
            sum(
                _device_us(e)
                for e, host in zip(events, on_host)
                if not host and not getattr(e, "is_user_annotation", False)
            )
            / 1000.0
        )
        if traced > sum(times) * (1 + UNATTRIBUTED_MAX):
            raise NothingTraced(
                f"{traced - sum(times):.4g} of {traced:.4g} ms of device time ran outside the calls' "
                "ranges (launched from another thread)"
            )
        return times


# Device time in the trace that no call's range accounts for, as a share of what they
# account for, beyond which the traced clock gives up on the timing.
UNATTRIBUTED_MAX = 0.1


def _device_us(event: Any) -> float:
    total = getattr(event, "device_time_total", None)  # torch >= 2.4
    if total is None:
        total = getattr(event, "cuda_time_total", 0.0)
    return float(total or 0.0)


def choose_clock(torch_device: Optional[str], activity: Optional[str] = None) -> Tuple[Any, Optional[str]]:
    """(clock, why a lesser clock stands in) for a backend: with ``activity`` (the
    backend's profiler activity, mode ``kernels``) the traced clock where the profiler
    has it, else device events; the host clock where the device is not available."""
    if torch_device is None:
        return HostClock(), None
    try:
        import torch

        module = getattr(torch, torch_device, None)
        if module is None or not module.is_available():
            return HostClock(), f"torch.{torch_device} is not available in this process"
    except Exception as e:  # torch missing or broken: the benchmark fails on its own
        return HostClock(), f"torch.{torch_device}: {type(e).__name__}: {e}"
    events = EventClock(module, f"torch.{torch_device}.Event")
    if activity is None:
        return events, None
    try:
        from torch.profiler import ProfilerActivity

        if getattr(ProfilerActivity, activity, None) not in torch.profiler.supported_activities():
            return events, f"torch.profiler has no {activity} activity in this build"
    except Exception as e:  # noqa: BLE001 - no profiler: events stand in
        return events, f"torch.profiler: {type(e).__name__}: {e}"
    return TracedClock(module, activity, events), None


def percall_bench(
    fn: Callable[[], Any],
    clock: Any,
    warmup: WarmupRule,
    rule: StopRule,
    grad_to_none=None,
    on_warm: Optional[Callable[[], None]] = None,
    device_ready: Optional[Callable[[], bool]] = None,
) -> Tuple[List[float], str]:
    """(per-call times in ms, why it stopped); ``warmup`` ends by ``timing.WarmupRule``."""
    clear_grads(grad_to_none)
    fn()  # JIT compilation and autotuning happen here, outside every sample
    clock.sync()
    begin = time.perf_counter()
    calls, warm = 1, []
    batches: List[float] = []  # median per-call time of each warm-up batch
    warmup_clock = getattr(clock, "warmup_clock", clock)
    while True:
        warm = warmup_clock.run(fn, calls, grad_to_none)
        batches.append(sorted(warm)[len(warm) // 2])
        if warmup.verdict(batches, (time.perf_counter() - begin) * 1e3, device_ready) is not None:
            break
        calls = min(calls * 2, WARMUP_MAX_CALLS)
    per_call = sorted(warm)[len(warm) // 2]
    if warmup_clock is not clock:
        clock.run(fn, 1, grad_to_none)  # starts the tracer; NothingTraced says so now
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

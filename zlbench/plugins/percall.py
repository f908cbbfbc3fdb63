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
against ``timing.StopRule`` (nvbench's stopping criterion: enough samples, a tenth of
the caller's ``rep`` budget spent, and the median's 95% CI within the noise target; or
the time cap). The L2 cache is not flushed between calls: rows are measured warm, as
the graph timer measures them (see docs/design.md, "Two timing calibers").
"""

from __future__ import annotations

import bisect
import os
import time
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple

from zlbench.markers import NO_DEVICE_WORK, OUTSIDE_RANGES
from zlbench.plugins import print_line
from zlbench.timing import (
    Cost,
    StopRule,
    WarmupRule,
    batch_calls,
    budget_calls,
    clear_grads,
    direct_warmup_max_batches,
    first_session_calls,
    next_warmup_calls,
    warmup_batch_size,
)


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
    """The trace shows no device work for the calls: time them with events instead.
    ``kind``: NO_DEVICE_WORK or OUTSIDE_RANGES (launched from a thread the calls'
    ranges do not cover, or linked to no op)."""

    def __init__(self, message: str, kind: str = NO_DEVICE_WORK):
        super().__init__(message)
        self.kind = kind


TRACE_MARK = "zlbench.call"


class TracedClock:
    """Per call, the device time of its kernels and copies from the profiler's trace;
    warm-up runs on the event clock (tracing costs host time, not device time)."""

    def __init__(self, module: Any, activity: str, events: EventClock):
        self.module = module
        self.activity = activity
        self.name = f"torch.profiler.{activity}"
        self.warmup_clock = events
        self.parse_ms = 0.0  # reading the traces, over this clock's life
        self.readers: Dict[str, int] = {}  # sessions read by "raw" events or torch's "tree"
        self.raw_unavailable: Optional[str] = None  # why the raw events could not be read
        keep_cupti_up()

    def sync(self) -> None:
        self.module.synchronize()

    def run(self, fn: Callable[[], Any], calls: int, grad_to_none) -> List[float]:
        from torch.profiler import profile, record_function

        with profile(activities=session_activities(self.activity)) as prof:
            for _ in range(calls):
                clear_grads(grad_to_none)
                with record_function(TRACE_MARK):
                    fn()
            self.module.synchronize()
        begin = time.perf_counter()
        raw, why_not = raw_events(prof)
        if raw is not None:
            times, traced = device_ms_per_range(raw)
        else:
            if self.raw_unavailable is None:  # once: every later session reads the same way
                print_line(
                    f"zlbench direct timer: traces read through torch's event tree (slower): {why_not}"
                )
            self.raw_unavailable = why_not
            times, traced = _function_event_ranges(prof.events())
        reader = "raw" if raw is not None else "tree"
        self.readers[reader] = self.readers.get(reader, 0) + 1
        self.parse_ms += (time.perf_counter() - begin) * 1e3
        if len(times) != calls:
            raise NothingTraced(
                f"{len(times)} of {calls} calls traced, device time {sum(times):g} ms", OUTSIDE_RANGES
            )
        # A range counts what its own thread's ops launched; work launched from another
        # thread (autograd's device threads run backward), or linked to no op, is in the
        # trace but in no range.
        if traced > sum(times) * (1 + UNATTRIBUTED_MAX):
            raise NothingTraced(
                f"{traced - sum(times):.4g} of {traced:.4g} ms of device time ran outside the calls' "
                "ranges (launched from another thread, or by no op)",
                OUTSIDE_RANGES,
            )
        if not any(times):  # and nothing elsewhere: the calls ran nothing on the device
            raise NothingTraced(f"{calls} of {calls} calls traced, device time 0 ms", NO_DEVICE_WORK)
        return times


def keep_cupti_up() -> None:
    """Each traced batch is a profiler session. Tearing CUPTI down after each and starting
    it again crashes once CUDA graphs were captured in the process (CUDA 11 and 12;
    torch.profiler applies the same workaround under inductor's cudagraphs), and the
    graph timer captures in this process."""
    os.environ.setdefault("TEARDOWN_CUPTI", "0")


def session_activities(activity: str) -> list:
    """A traced session's activities: the backend's, and the CPU's for the marked ranges
    the device work is attributed to."""
    from torch.profiler import ProfilerActivity

    return list(dict.fromkeys([ProfilerActivity.CPU, getattr(ProfilerActivity, activity)]))


def start_tracer(environ=None, run_waiting: Optional[Callable[[], bool]] = None) -> Optional[str]:
    """Start the profiler's tracer once, in an empty session, where this benchmark
    process's direct timer would trace (ZL_DIRECT_TIMER=kernels, a backend with a
    profiler activity) and ZL_TRACER_PRESTART is on: its one-time start-up (CUPTI's;
    torch's import of torch._inductor, once most of it, the worker makes before forking)
    is then paid before the run, by a prestarted
    process while another operator runs, not inside the first traced timing. Not when
    ``run_waiting()`` says the run already waits for this process (then its first traced
    timing starts the tracer, as without a prestart). Returns the line to log, or None
    where nothing was to start."""
    from zlbench import benchenv, knobs
    from zlbench.backends import BACKENDS

    try:
        if (
            not knobs.env_value("tracer_prestart", environ)
            or knobs.env_value("direct_timer", environ) != "kernels"
        ):
            return None
    except knobs.KnobError as e:
        return f"zlbench worker: the profiler's tracer not started: {e}"
    backend = BACKENDS.get(benchenv.backend_name(environ) or "")
    activity = backend.profiler_activity if backend is not None else None
    if activity is None:
        return None
    if run_waiting is not None and run_waiting():
        return "zlbench worker: the profiler's tracer not started: the run was waiting"
    keep_cupti_up()
    begin = time.perf_counter()
    try:
        from torch.profiler import profile

        with profile(activities=session_activities(activity)):
            pass
    except Exception as e:  # noqa: BLE001 - the first traced timing starts it instead
        return f"zlbench worker: the profiler's tracer not started: {type(e).__name__}: {e}"
    return (
        f"zlbench worker: this benchmark process started the profiler's tracer "
        f"(torch.profiler.{activity}) in {time.perf_counter() - begin:.1f} s, before its run began"
    )


def raw_events(prof: Any) -> Tuple[Optional[list], Optional[str]]:
    """(the trace's raw events, None), where this torch exposes them with what
    ``device_ms_per_range`` reads (torch.profiler.profile's ``profiler.kineto_results``);
    else (None, why not): the reader then builds ``prof.events()``, torch's event tree,
    which costs far more (the timer's report names the reader and this reason)."""
    results = getattr(getattr(prof, "profiler", None), "kineto_results", None)
    if results is None:
        return None, "the profiler kept no kineto results"
    events = getattr(results, "events", None)
    if not callable(events):
        return None, f"{type(results).__name__} has no events()"
    raw = list(events())
    missing = [m for m in RAW_METHODS if raw and not hasattr(raw[0], m)]
    if raw and not any(hasattr(raw[0], m) for m in ("is_user_annotation", "activity_type")):
        missing.append("is_user_annotation or activity_type")  # a range's device projection
    if missing:
        return None, f"{type(raw[0]).__name__} has no {', '.join(missing)}"  # an older torch
    return raw, None


# What the raw reader asks of each event; activity_type (torch 2.11's events have none),
# is_async and is_user_annotation it does without where they are missing.
RAW_METHODS = (
    "device_type",
    "correlation_id",
    "linked_correlation_id",
    "start_thread_id",
    "start_ns",
    "end_ns",
    "duration_ns",
    "name",
)
# Host events that launch device work: torch ops and record_function ranges. Runtime and
# driver calls (cuda_runtime, cuda_driver) are numbered apart (CUPTI's ids), so one made
# outside every op (the closing synchronize) may carry an op's number: never a launcher.
LAUNCHERS = frozenset({"cpu_op", "user_annotation"})
# A range's projection onto the device timeline, where is_user_annotation is missing.
DEVICE_ANNOTATIONS = frozenset({"gpu_user_annotation", "user_annotation"})


def device_ms_per_range(events: Any) -> Tuple[List[float], float]:
    """(device ms of each call's range in order, device ms of all traced device work) from
    the trace's raw kineto events.

    A kernel, copy or fill names (``linked_correlation_id``) the torch op that launched
    it (FlagGems' kernels run inside the aten op they implement); the op's start, on the
    range's thread, places it in a range. What lands in none (another thread's launches,
    a launch under no op) counts only in the total. This is what ``prof.events()`` sums as a
    range's ``device_time_total``, without building its event tree: on a CPU host that
    tree cost 540 ms for 1,000 calls of masked_select, the raw events 8 ms.
    """
    from torch.autograd import DeviceType

    host = DeviceType.CPU
    # host event's correlation id -> [(thread, start ns)]: torch numbers its ops and CUPTI
    # its runtime calls apart, so one id may name both; a device event goes to the one of
    # them that lands in a call's range on its own thread, and to no range when two do.
    launchers: Dict[int, List[Tuple[int, int]]] = {}
    ranges: List[Tuple[int, int, int]] = []  # (start ns, end ns, thread) per call
    device: List[Tuple[int, int]] = []  # (launcher's correlation id, ns) per device event
    for e in events:
        if e.device_type() == host:
            # A runtime call inside an op links to it (skipped here); one outside every op
            # is known by its activity where torch names it (2.11 does not), else by
            # landing in no range (the launchers' lists).
            activity = getattr(e, "activity_type", None)
            is_async = getattr(e, "is_async", None)
            if (
                (activity is not None and activity() not in LAUNCHERS)
                or (is_async is not None and is_async())
                or e.linked_correlation_id() != 0
            ):
                continue
            thread = e.start_thread_id()
            if getattr(e, "end_thread_id", lambda: thread)() != thread:
                continue  # ended on another thread: async, as torch's tree counts it
            launchers.setdefault(e.correlation_id(), []).append((thread, e.start_ns()))
            if e.name() == TRACE_MARK:
                ranges.append((e.start_ns(), e.end_ns(), thread))
        elif not _user_annotation(e):  # not a range's projection onto the device timeline
            device.append((e.linked_correlation_id(), e.duration_ns()))
    ranges.sort()
    starts = [r[0] for r in ranges]
    per_range = [0] * len(ranges)
    total = 0
    for launcher, ns in device:
        total += ns
        found = set()
        for thread, start in launchers.get(launcher, ()) if launcher > 0 else ():
            i = bisect.bisect_right(starts, start) - 1
            if i >= 0 and start <= ranges[i][1] and ranges[i][2] == thread:
                found.add(i)
        if len(found) == 1:
            per_range[found.pop()] += ns
    return [ns / 1e6 for ns in per_range], total / 1e6


def _user_annotation(event: Any) -> bool:
    flag = getattr(event, "is_user_annotation", None)
    if flag is not None:
        return bool(flag())
    activity = getattr(event, "activity_type", None)
    return activity is not None and activity() in DEVICE_ANNOTATIONS


def _function_event_ranges(events: Any) -> Tuple[List[float], float]:
    """``device_ms_per_range`` read from ``prof.events()``, for a torch without raw events:
    the host side of each range (the trace also projects each range onto the device
    timeline as a second event of the same name) has the device total its launches ran."""
    from torch.autograd import DeviceType

    on_host = [getattr(e, "device_type", DeviceType.CPU) == DeviceType.CPU for e in events]
    times = [_device_us(e) / 1000.0 for e, host in zip(events, on_host) if host and e.name == TRACE_MARK]
    traced = (
        sum(
            _device_us(e)
            for e, host in zip(events, on_host)
            if not host and not getattr(e, "is_user_annotation", False)
        )
        / 1000.0
    )
    return times, traced


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


class PercallResult(NamedTuple):
    samples: List[float]  # per-call times, ms
    stop: str  # timing.StopRule's verdict
    cost: dict  # where the timing's own time went (the row record's cost_ms)


def percall_bench(
    fn: Callable[[], Any],
    clock: Any,
    warmup: WarmupRule,
    rule: StopRule,
    grad_to_none=None,
    on_warm: Optional[Callable[[], None]] = None,
    device_ready: Optional[Callable[[], Optional[bool]]] = None,
    fastest: bool = False,
    prewarmed_ms: Optional[float] = None,
) -> PercallResult:
    """Warm-up by ``timing.WarmupRule``, then batches timed by ``clock`` until ``rule``
    stops them.

    Under the traced clock (warm-up on the event clock standing in), and with ``fastest``
    (calls that run nothing on the device: the events time the host), each warm-up batch
    is judged by its fastest call: the events count the host's gaps, which the traced
    clock leaves out and which never settle for an operator that syncs with the host (on
    an H200 a tenth of transpose's host-time warm-ups waited for the cap). And each
    traced batch is a profiler session: the first spends the rule's minimum
    (``timing.MIN_TIME_SHARE`` of the caller's budget) at the warm-up's host time per
    call, and most timings stop after it, their median pinned; later ones grow with the
    time spent. Calls so slow that the rule's samples would outlast the budget need fewer
    (``StopRule.for_host_per_call``).

    ``prewarmed_ms``: the graph timer's warm-up of this function settled, a call costing
    that much wall time, before its capture failed; there is no first call, and one
    warm-up batch of about a millisecond (``timing.warmup_batch_size``, one call at
    least) sizes the timed ones. On an H200 such rows warmed up twice before
    (special_legendre_polynomial_p's largest 0.3-0.4 s each time, masked_select's about
    25 ms a timing). The direct timer passes none for a host-time timing, whose own
    warm-up costs less (``DirectTimer._bench``).
    """
    cost = Cost()
    if prewarmed_ms is None:
        clear_grads(grad_to_none)
        fn()  # JIT compilation and autotuning happen here, outside every sample
        clock.sync()
        cost.lap("first_call")
    begin = time.perf_counter()
    calls, warm = (1 if prewarmed_ms is None else warmup_batch_size(prewarmed_ms)), []
    batches: List[float] = []  # per-call time of each warm-up batch
    warmup_clock = getattr(clock, "warmup_clock", clock)
    traced = warmup_clock is not clock
    max_batches = direct_warmup_max_batches(warmup)
    while True:
        warm = sorted(warmup_clock.run(fn, calls, grad_to_none))
        batches.append(warm[0] if traced or fastest else warm[len(warm) // 2])
        if prewarmed_ms is not None:
            stopped = "prewarmed"
            break
        stopped = warmup.verdict(batches, (time.perf_counter() - begin) * 1e3, device_ready, max_batches)
        if stopped is not None:
            break
        calls = next_warmup_calls(calls, warm[len(warm) // 2])
    per_call = warm[len(warm) // 2]
    host_per_call = sum(warm) / len(warm)
    if prewarmed_ms is not None:
        # One batch, maybe one call, just after a failed capture: the settled warm-up's
        # own figure where it is lower, so one slow call sizes nothing.
        host_per_call = min(host_per_call, prewarmed_ms)
    slow = rule.for_host_per_call(host_per_call)
    if slow != rule:
        rule = slow
        cost.notes["min_samples"] = rule.min_samples
    cost.notes.update(warmup_stop=stopped, warmup_batches=len(batches), rep_ms=rule.budget)
    if traced:
        # Starts the tracer (its one-time start-up stays outside the samples), and
        # NothingTraced says so before the row's device state is read.
        clock.run(fn, 1, grad_to_none)
    parsed = getattr(clock, "parse_ms", 0.0)
    if on_warm is not None:
        on_warm()
    cost.lap("warmup")
    samples: List[float] = []
    begin = time.perf_counter()
    elapsed = 0.0
    timed_batches = 0
    # A traced batch is a profiler session, and in one a call costs far more than outside
    # (the profiler records every op and launch, and the trace is read: on an H200
    # masked_select's calls cost 340 us in a session, 50 us outside one). The first spends
    # the rule's minimum at the warm-up's host time per call (the rule's samples at least,
    # but only what fits in the time cap for a slow call, two at least); what it cost per
    # call sizes the next.
    if traced:
        calls = first_session_calls(host_per_call, rule)
    else:
        calls = batch_calls(per_call, elapsed)
    while True:
        samples += clock.run(fn, calls, grad_to_none)
        timed_batches += 1
        elapsed = (time.perf_counter() - begin) * 1e3
        stop = rule.verdict(sorted(samples), elapsed)
        if stop is not None:
            cost.lap("timed")
            cost.notes["batches"] = timed_batches
            if traced:
                cost.notes["parse"] = round(getattr(clock, "parse_ms", 0.0) - parsed, 3)
            return PercallResult(samples, stop, cost.report())
        if not traced:
            calls = batch_calls(per_call, elapsed)
            continue
        session_per_call = elapsed / len(samples)
        if elapsed < rule.min_ms:
            calls = budget_calls(session_per_call, rule, elapsed)
        else:
            calls = batch_calls(session_per_call, elapsed)

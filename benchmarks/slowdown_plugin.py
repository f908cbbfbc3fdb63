"""pytest plugin for verdict checks only: make one operator's gems side really slower.

Loaded into the benchmark process with ``PYTEST_ADDOPTS="-p slowdown_plugin"`` and this
directory on PYTHONPATH, by benchmarks/timing_noise.py and the CPU verdict test; never
by zlbench itself. With ZL_SLOW_OP=<printed operator name> and ZL_SLOW_PCT (default 5)
it wraps the timed function of that operator's gems rows so that every call does
calibrated extra work after the operator: a busy wait on the host clock (cpu), or
``torch.cuda._sleep`` cycles queued after it on the device (cuda). The extra time is
calibrated per row, measured the way the timer will measure (graph replay where the
call can be captured, per-call events or the host clock otherwise), and each row's
achieved slowdown goes to ``$ZL_RUN_DIR/slowdown.jsonl`` and one printed line, so the
check compares verdicts with what was really done, not with what was asked.
"""

from __future__ import annotations

import importlib
import json
import os
import statistics
import sys
import time
from pathlib import Path

import pytest

TARGETS = (("triton.testing", "do_bench"), ("zlbench.cpu_timer", "do_bench"))
CYCLES_PER_MS_GUESS = 1.98e6   # H200 boost clock; only the first probe uses it


def _settings():
    op = os.environ.get("ZL_SLOW_OP")
    return op, float(os.environ.get("ZL_SLOW_PCT", "5")) / 100.0


def _record(data: dict) -> None:
    print("\nzlbench[slowdown] " + " ".join(f"{k}={v}" for k, v in data.items()), flush=True)
    run_dir = os.environ.get("ZL_RUN_DIR")
    if run_dir:
        with open(Path(run_dir) / "slowdown.jsonl", "a") as f:
            f.write(json.dumps(data) + "\n")


# --- host -------------------------------------------------------------------------------

def _host_ms(*calls, n=101, warm_s=0.025):
    """Median per-call ms of each call, measured interleaved so that a change in the
    machine's load hits all of them alike."""
    end = time.perf_counter() + warm_s
    while time.perf_counter() < end:
        for call in calls:
            call()
    times = [[] for _ in calls]
    for _ in range(n):
        for call, out in zip(calls, times):
            t0 = time.perf_counter()
            call()
            out.append((time.perf_counter() - t0) * 1e3)
    return [statistics.median(t) for t in times]


def slow_on_host(fn, pct):
    delay = [0.0]

    def slowed():
        out = fn()
        end = time.perf_counter() + delay[0]
        while time.perf_counter() < end:
            pass
        return out

    (base,) = _host_ms(fn)
    delay[0] = pct * base / 1e3
    for _ in range(3):  # the machine's load moves both; correct toward pct of base
        base, after = _host_ms(fn, slowed)
        if after > base:
            delay[0] *= min(2.0, max(0.5, pct * base / (after - base)))
    base, after = _host_ms(fn, slowed)
    return slowed, base, after, {"delay_ms": round(delay[0] * 1e3, 6)}


# --- cuda -------------------------------------------------------------------------------

def _device_ms(torch, call) -> float:
    """Per-call device time as the graph timer sees it (a graph of about 1 ms of calls),
    else per-call events (the call cannot be captured)."""
    from zlbench.plugins import graph_timer
    from zlbench.plugins.percall import EventClock

    clock = EventClock(torch.cuda, "torch.cuda.Event")
    clock.run(call, 3, None)
    eager = statistics.median(clock.run(call, 11, None))
    stream = graph_timer.side_stream(torch)
    stream.wait_stream(torch.cuda.current_stream())
    try:
        calls = max(1, min(1000, round(1.0 / max(eager, 1e-6))))
        graph = graph_timer.capture(torch, call, calls, stream, None)
        times = graph_timer.time_replays(torch, graph, 25, stream)
        graph = None
        return statistics.median(times) / calls
    except Exception:
        torch.cuda.synchronize()
        return statistics.median(clock.run(call, 41, None))
    finally:
        torch.cuda.current_stream().wait_stream(stream)


def slow_on_device(fn, pct):
    import torch

    def with_sleep(cycles):
        def call():
            out = fn()
            torch.cuda._sleep(int(cycles))
            return out
        return call

    base = _device_ms(torch, fn)
    t0 = _device_ms(torch, with_sleep(0))      # the extra kernel alone
    probe = max(1000, int(pct * base * CYCLES_PER_MS_GUESS))
    t1 = _device_ms(torch, with_sleep(probe))
    slope = (t1 - t0) / probe if t1 > t0 else 1.0 / CYCLES_PER_MS_GUESS
    cycles = max(0, round((base * (1 + pct) - t0) / slope))
    slowed = with_sleep(cycles)
    after = _device_ms(torch, slowed)
    # The calibration's graphs leave their memory in the allocator's cache; the timer then
    # reads less free memory and may time fewer placements of a large row than the
    # unslowed batch did, which moves its median by more than the slowdown.
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    return slowed, base, after, {"cycles": cycles, "extra_kernel_ms": round(t0 - base, 6)}


def _slowed(fn, row, pct):
    """Calibrated for this timing call's own fn (its inputs are the row's)."""
    on_device = os.environ.get("ZL_BACKEND") not in (None, "", "cpu")
    slowed, base, after, extra = (slow_on_device if on_device else slow_on_host)(fn, pct)
    _record({"op": row.op, "dtype": row.dtype, "shape": json.dumps(row.shape),
             "base_ms": round(base, 6), "slowed_ms": round(after, 6),
             "achieved_pct": round((after / base - 1) * 100, 3), **extra})
    return slowed


def _wrap(timer, rows):
    op, pct = _settings()

    def do_bench(fn, *args, **kwargs):
        timing = rows.current() if rows is not None else None
        if timing is not None and timing.row.op == op and timing.row.side == "gems":
            fn = _slowed(fn, timing.row, pct)
        return timer(fn, *args, **kwargs)

    do_bench.__zl_timer__ = True
    return do_bench


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session):
    """After the timer plugin patched do_bench: wrap what it put there."""
    from zlbench.plugins.keys import ROW_CONTEXT

    op, _ = _settings()
    if not op:
        return
    rows = session.config.stash.get(ROW_CONTEXT, None)   # the timer plugin's row context
    for module_name, attr in TARGETS:
        try:
            module = sys.modules.get(module_name) or importlib.import_module(module_name)
        except Exception:
            continue
        timer = getattr(module, attr, None)
        if timer is not None:
            setattr(module, attr, _wrap(timer, rows))

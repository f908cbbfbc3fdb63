"""The host CPU. Its "devices" are worker slots (``--devices 0,1`` gives two), so that
the batch layer, its sharding and its process handling run on any machine.

Its thread count is pinned (ZL_CPU_THREADS, default 1): torch's default of one thread
per core makes two slots, or anything else on the machine, fight over the cores, and
the numbers move by tens of percent between identical runs. Freed memory stays in the
process (ZL_CPU_KEEP_MEMORY), and host samples read the core's speed (``host_speed``).
"""

import ctypes
import os
import resource
import time
from typing import Any, Dict, Mapping

from .base import TRITON_TIMER, Backend, DeviceState

THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
# glibc gives large freed blocks back to the kernel (mmap'd ones at once, the heap's top
# beyond an adaptive trim threshold), and the next call faults the pages in again: on
# this project's 2-core machine the sample's add (torch.sub(a, b.neg()) over 1024x1024
# halves) ran 992 page faults a call and 1.4-2.0 ms, against 0 and 0.39-0.41 ms with the
# blocks kept. Fixed thresholds keep them in the process (32 MiB is the largest mmap
# threshold glibc takes; larger blocks are still mapped per call). Set with mallopt in
# the benchmark process itself: environment variables would not reach a process the
# warm worker forks, whose malloc was set up before.
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)
KEEP_MMAP_THRESHOLD = 32 << 20
KEEP_TRIM_THRESHOLD = 1 << 30


def keep_freed_memory() -> bool:
    """Fix glibc's malloc thresholds in this process; False where there is no glibc
    ``mallopt`` (musl, macOS) or it refused."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    return bool(mallopt(M_MMAP_THRESHOLD, KEEP_MMAP_THRESHOLD)) and bool(
        mallopt(M_TRIM_THRESHOLD, KEEP_TRIM_THRESHOLD)
    )


def benchmark_env(knob_values: Mapping[str, object]) -> Dict[str, str]:
    """The thread variables of the benchmark process (OMP, MKL, ...); the knobs
    cpu_threads and cpu_keep_memory reach it too (``child_knobs``), and the timer plugin
    calls torch.set_num_threads and keep_freed_memory with them."""
    n = str(knob_values.get("cpu_threads") or 1)
    return {key: n for key in THREAD_VARIABLES}


REFERENCE_LOOP = 20_000  # iterations of the speed probe: about 1 ms on a 2020s core
REFERENCE_TRIES = 3  # the fastest of these is the reading: a preemption costs one try


def host_speed() -> float:
    """How fast this core runs right now: iterations per microsecond of a fixed
    interpreter loop, the fastest of a few tries. A virtual machine's core can run at
    two thirds of its speed for seconds at a time without any load, steal time or CPU
    share showing it (seen here: 1,000-1,500 loops a second, second to second); this
    reading is the CPU's answer to a GPU's SM clock."""
    best = float("inf")
    for _ in range(REFERENCE_TRIES):
        start = time.perf_counter()
        x = 0
        for _ in range(REFERENCE_LOOP):
            x += 1
        best = min(best, time.perf_counter() - start)
    return round(REFERENCE_LOOP / (best * 1e6), 3)


class HostState(DeviceState):
    """The CPU's answer to device state: how much of the wall time this process ran
    (the rest went to other processes on a shared machine), its involuntary context
    switches, the load average, and the core's speed on a reference loop."""

    source = "host"

    def __init__(self) -> None:
        super().__init__("")

    def available(self) -> bool:
        return True

    def sample(self, ending: bool = True) -> Dict[str, Any]:
        speed = host_speed()  # before the clocks: the probe's own run is outside the window
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return {
            "cpu_s": round(usage.ru_utime + usage.ru_stime, 6),
            "wall_s": round(time.monotonic(), 6),
            "nivcsw": usage.ru_nivcsw,
            "minflt": usage.ru_minflt,
            "load1": round(os.getloadavg()[0], 2),
            "host_speed": speed,
        }

    def describe(self) -> Dict[str, Any]:
        return {"source": self.source, "cpus": os.cpu_count(), "clocks_locked": "unknown"}


BACKEND = Backend(
    name="cpu",
    aliases=("host",),
    visible_key=None,
    gems_vendor=None,
    can_graph_capture=False,
    description="host CPU; devices are worker slots; direct timer; ZL_CPU_THREADS threads",
    slots_only=True,
    run_env=benchmark_env,
    child_knobs=("cpu_threads", "cpu_keep_memory"),
    device_state=HostState,
    # The sample corpus times through triton when it imports, else zlbench's stand-in.
    timer_targets=(TRITON_TIMER, ("zlbench.cpu_timer", "do_bench")),
)

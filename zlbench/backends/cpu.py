"""The host CPU. Its "devices" are worker slots (``--devices 0,1`` gives two), so that
the batch layer, its sharding and its process handling run on any machine.

Its thread count is pinned (ZL_CPU_THREADS, default 1): torch's default of one thread
per core makes two slots, or anything else on the machine, fight over the cores, and
the numbers move by tens of percent between identical runs.
"""

import os
import resource
import time
from typing import Any, Dict, Mapping

from .base import TRITON_TIMER, Backend, DeviceState

THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def pinned_threads_env(knob_values: Mapping[str, object]) -> Dict[str, str]:
    """The thread variables of the benchmark process; the timer plugin also calls
    torch.set_num_threads(ZL_CPU_THREADS) there."""
    n = str(knob_values.get("cpu_threads") or 1)
    return {"ZL_CPU_THREADS": n, **{key: n for key in THREAD_VARIABLES}}


class HostState(DeviceState):
    """The CPU's answer to device state: how much of the wall time this process ran
    (the rest went to other processes on a shared machine), its involuntary context
    switches and the load average."""

    source = "host"

    def __init__(self) -> None:
        super().__init__("")

    def available(self) -> bool:
        return True

    def sample(self) -> Dict[str, Any]:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return {
            "cpu_s": round(usage.ru_utime + usage.ru_stime, 6),
            "wall_s": round(time.monotonic(), 6),
            "nivcsw": usage.ru_nivcsw,
            "load1": round(os.getloadavg()[0], 2),
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
    run_env=pinned_threads_env,
    device_state=HostState,
    # The sample corpus times through triton when it imports, else zlbench's stand-in.
    timer_targets=(TRITON_TIMER, ("zlbench.cpu_timer", "do_bench")),
)

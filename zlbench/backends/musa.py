"""MThreads GPUs through MUSA (torch_musa; triton ships as flagtree).

Graph capture is not planned here: RNG seeding and capture-illegal stream ops make the
capture fail on the operators where timing noise matters most, so MUSA runs use the
direct timer (with ZL_DIRECT_REPEAT) everywhere.
"""

import re
from typing import List, Tuple

from . import cuda
from .base import TRITON_TIMER, Backend, torch_runtime_initialised


def parse_mthreads_gmi(text: str) -> List[Tuple[str, str]]:
    """mthreads-gmi -L prints ``GPU 0: MTT S5000 (UUID: ...)``."""
    rows = []
    for line in text.splitlines():
        m = re.match(r"\s*GPU\s+(\d+):\s*([^(]+)", line)
        if m:
            rows.append((m.group(1), m.group(2).strip()))
    return rows


BACKEND = Backend(
    name="musa",
    aliases=("mthreads", "moore", "mt"),
    visible_key="MUSA_VISIBLE_DEVICES",
    gems_vendor="mthreads",
    can_graph_capture=False,
    compat_plugins=("zlbench.plugins.compat_musa",),
    list_tool=("mthreads-gmi", "-L"),
    parse_tool_output=parse_mthreads_gmi,
    torch_extensions=("torch_musa",),
    runtime_initialised=torch_runtime_initialised("musa"),
    device_nodes=("/dev/mtgpu*",),
    description="MThreads GPUs (MUSA); direct timer",
    torch_device="musa",
    timer_targets=(TRITON_TIMER, ("triton.musa_testing", "do_bench")),
    fatal_texts=cuda.FATAL_TEXTS,  # MUSA reuses CUDA's wording
    error_enum_prefixes=("musaerror",),
    transient_patterns=("MUSA error",),
)

"""Huawei Ascend NPUs (torch_npu). FlagGems times them with do_bench_npu."""

import re
from typing import List, Tuple

from .base import TRITON_TIMER, Backend, torch_runtime_initialised


def parse_npu_smi(text: str) -> List[Tuple[str, str]]:
    """npu-smi info -l: ``NPU ID : 0`` followed by ``Product Name : ...``."""
    rows, current = [], None
    for line in text.splitlines():
        m = re.match(r"\s*NPU ID\s*:\s*(\d+)", line)
        if m:
            current = m.group(1)
            rows.append((current, "Ascend"))
            continue
        m = re.match(r"\s*Product Name\s*:\s*(.+)", line)
        if m and current is not None:
            rows[-1] = (current, m.group(1).strip())
    return rows


BACKEND = Backend(
    name="ascend",
    aliases=("npu", "huawei"),
    visible_key="ASCEND_RT_VISIBLE_DEVICES",
    gems_vendor="ascend",
    can_graph_capture=False,
    list_tool=("npu-smi", "info", "-l"),
    parse_tool_output=parse_npu_smi,
    torch_extensions=("torch_npu",),
    runtime_initialised=torch_runtime_initialised("npu"),
    device_nodes=("/dev/davinci[0-9]*",),
    description="Huawei Ascend NPUs; direct timer",
    torch_device="npu",
    timer_targets=(TRITON_TIMER, ("triton.backends.ascend.testing", "do_bench_npu")),
)

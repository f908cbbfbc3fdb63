"""AMD GPUs through ROCm/HIP. Direct timer until graph capture is proven there."""

import re
from typing import List, Tuple

from . import cuda
from .base import Backend, torch_runtime_initialised


def parse_rocm_smi(text: str) -> List[Tuple[str, str]]:
    """rocm-smi --showproductname --csv: ``card0,...,<Card series>,...``."""
    rows = []
    lines = text.splitlines()
    header = lines[0].split(",") if lines else []
    col = next((i for i, h in enumerate(header) if "Card series" in h or "Card Series" in h), None)
    for line in lines[1:]:
        m = re.match(r"card(\d+),", line)
        if m:
            parts = line.split(",")
            model = parts[col].strip() if col is not None and col < len(parts) else "unknown"
            rows.append((m.group(1), model))
    return rows


def probe_gems_vendor():
    """Hygon DCUs run the ROCm stack; FlagGems names them ``hygon``. Called inside the
    benchmark process only (it imports torch)."""
    import torch

    return "hygon" if hasattr(torch, "__hcu_version__") else "amd"


BACKEND = Backend(
    name="rocm",
    aliases=("amd", "hip"),
    visible_key="HIP_VISIBLE_DEVICES",
    gems_vendor="amd",
    gems_vendor_probe=probe_gems_vendor,
    can_graph_capture=False,
    list_tool=("rocm-smi", "--showproductname", "--csv"),
    parse_tool_output=parse_rocm_smi,
    runtime_initialised=torch_runtime_initialised("cuda"),
    device_nodes=("/dev/kfd",),
    description="AMD GPUs (ROCm/HIP); direct timer",
    torch_device="cuda",  # ROCm builds of torch speak torch.cuda
    profiler_activity="CUDA",  # roctracer, under torch.cuda's name
    fatal_texts=cuda.FATAL_TEXTS,  # HIP reuses CUDA's wording
    error_enum_prefixes=("hiperror",),
    transient_patterns=("HIP error",),
)

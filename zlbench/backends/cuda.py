"""NVIDIA GPUs through CUDA: graph capture available."""

from .base import Backend, parse_csv_index_name

BACKEND = Backend(
    name="cuda",
    aliases=("nvidia", "gpu"),
    visible_key="CUDA_VISIBLE_DEVICES",
    gems_vendor="nvidia",
    can_graph_capture=True,
    list_tool=("nvidia-smi", "--query-gpu=index,name", "--format=csv,noheader"),
    parse_tool_output=parse_csv_index_name,
    description="NVIDIA GPUs (CUDA); CUDA-graph timing",
)

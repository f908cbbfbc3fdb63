"""NVIDIA GPUs through CUDA: graph capture available; device state through NVML."""

from .base import Backend, DeviceState, parse_csv_index_name, torch_runtime_initialised


def open_device_state() -> DeviceState:
    from .nvml import open_state  # pynvml: benchmark process only

    return open_state()


BACKEND = Backend(
    name="cuda",
    aliases=("nvidia", "gpu"),
    visible_key="CUDA_VISIBLE_DEVICES",
    gems_vendor="nvidia",
    can_graph_capture=True,
    list_tool=("nvidia-smi", "--query-gpu=index,name", "--format=csv,noheader"),
    parse_tool_output=parse_csv_index_name,
    runtime_initialised=torch_runtime_initialised("cuda"),
    description="NVIDIA GPUs (CUDA); CUDA-graph timing",
    torch_device="cuda",
    device_state=open_device_state,
)

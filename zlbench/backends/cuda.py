"""NVIDIA GPUs through CUDA: graph capture available; device state through NVML."""

from .base import Backend, DeviceState, parse_csv_index_name, torch_runtime_initialised


def open_device_state() -> DeviceState:
    from .nvml import open_state  # pynvml: benchmark process only

    return open_state()


# Errors that leave the context unusable (sticky errors), in the runtime's own words
# (cudaGetErrorString / cuGetErrorString; HIP and MUSA reuse these wordings).
# torch appends "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions."
# to every CUDA error, so "device-side assert" alone must never count.
FATAL_TEXTS = (
    "an illegal memory access was encountered",
    "device-side assert triggered",
    "unspecified launch failure",
    "misaligned address",
    "an illegal instruction was encountered",
    "uncorrectable ecc error encountered",
    "uncorrectable nvlink error detected",
    "hardware stack error",
    "invalid program counter",
    "operation not supported on global/shared address space",
    "the launch timed out and was terminated",
    "context is destroyed",
)
# cudaError_t values of the same errors, for exceptions that carry ``error_code``.
FATAL_CODES = frozenset({214, 220, 700, 702, 709, 710, 714, 715, 716, 717, 718, 719})

# Errors that mean "this work cannot be captured", not "the work is broken".
CAPTURE_TEXTS = (
    "operation not permitted when stream is capturing",
    "operation failed due to a previous error during capture",
    "operation would make the legacy stream depend on a capturing blocking stream",
    "capture was not initiated in this stream",
    "capturing stream has unjoined work",
    "operation not permitted on an event last recorded in a capturing stream",
    "attempt to terminate a thread-local capture sequence from another thread",
    "during cuda graph capture",
    "offset increment outside graph capture",
    "not in capture mode",
    "the cuda graph is empty",
)

BACKEND = Backend(
    name="cuda",
    aliases=("nvidia", "gpu"),
    visible_key="CUDA_VISIBLE_DEVICES",
    gems_vendor="nvidia",
    can_graph_capture=True,
    list_tool=("nvidia-smi", "--query-gpu=index,name", "--format=csv,noheader"),
    parse_tool_output=parse_csv_index_name,
    runtime_initialised=torch_runtime_initialised("cuda"),
    device_nodes=("/dev/nvidia[0-9]*",),
    description="NVIDIA GPUs (CUDA); CUDA-graph timing",
    torch_device="cuda",
    profiler_activity="CUDA",  # CUPTI
    device_state=open_device_state,
    fatal_texts=FATAL_TEXTS,
    error_enum_prefixes=("cudaerror", "cuda_error_"),
    fatal_codes=FATAL_CODES,
    capture_texts=CAPTURE_TEXTS,
    transient_patterns=("CUDA error", "CUBLAS_STATUS", "cudaErrorLaunch", "NCCL error"),
)

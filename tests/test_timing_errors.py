"""Fatal-error classification, the fallback decision and the marker text.

Error texts are built exactly as torch builds them (c10/cuda/CUDAException.cpp:
"CUDA error: " + cudaGetErrorString, the "Search for `cudaErrorX'" help, the async
hint, then the device-side-assertion trailer that every CUDA error carries).
"""

import pytest
import torch

from zlbench import timing
from zlbench.markers import BENCHMARK_DIRECT_NO_CUDAGRAPH, parse_marker

ASYNC_HINT = (
    "\nCUDA kernel errors might be asynchronously reported at some other API call, "
    "so the stacktrace below might be incorrect.\nFor debugging consider passing "
    "CUDA_LAUNCH_BLOCKING=1"
)
DSA_TRAILER = "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n"


def cuda_error(runtime_text: str, enum: str) -> torch.AcceleratorError:
    message = (
        f"CUDA error: {runtime_text}\nSearch for `{enum}' in "
        "https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html for more "
        f"information.{ASYNC_HINT}\n{DSA_TRAILER}"
    )
    return torch.AcceleratorError(message)


FATAL = [
    ("an illegal memory access was encountered", "cudaErrorIllegalAddress"),
    ("device-side assert triggered", "cudaErrorAssert"),
    ("unspecified launch failure", "cudaErrorLaunchFailure"),
    ("misaligned address", "cudaErrorMisalignedAddress"),
    ("an illegal instruction was encountered", "cudaErrorIllegalInstruction"),
    ("uncorrectable ECC error encountered", "cudaErrorECCUncorrectable"),
]
CAPTURE = [
    ("operation not permitted when stream is capturing", "cudaErrorStreamCaptureUnsupported"),
    ("operation failed due to a previous error during capture", "cudaErrorStreamCaptureInvalidated"),
    ("operation would make the legacy stream depend on a capturing blocking stream",
     "cudaErrorStreamCaptureImplicit"),
    ("capturing stream has unjoined work", "cudaErrorStreamCaptureUnjoined"),
]


@pytest.mark.parametrize("text,enum", FATAL)
def test_sticky_cuda_errors_are_fatal(text, enum):
    exc = cuda_error(text, enum)
    assert timing.is_fatal_error(exc)
    decision = timing.fallback_decision("capture", exc)
    assert decision.fallback is False
    assert text in decision.reason


@pytest.mark.parametrize("text,enum", CAPTURE)
def test_capture_errors_fall_back_despite_the_dsa_trailer(text, enum):
    exc = cuda_error(text, enum)
    assert "enable device-side assertions" in str(exc)  # the trap: every error says it
    assert not timing.is_fatal_error(exc)
    assert any(sig in str(exc).lower() for sig in timing.CAPTURE_TEXTS)
    assert timing.fallback_decision("capture", exc).fallback is True


def test_fatal_is_found_by_enum_name_when_the_text_differs():
    exc = RuntimeError("HIP error: something new\nSearch for `hipErrorIllegalAddress' ...")
    assert timing.is_fatal_error(exc)
    assert timing.is_fatal_error(RuntimeError("Triton Error [CUDA]: misaligned address"))
    assert timing.is_fatal_error(RuntimeError("CUDA driver error: CUDA_ERROR_ILLEGAL_ADDRESS"))


def test_fatal_is_found_by_error_code():
    exc = RuntimeError("opaque")
    exc.error_code = 700  # cudaErrorIllegalAddress
    assert timing.is_fatal_error(exc)
    exc.error_code = 900  # cudaErrorStreamCaptureUnsupported
    assert not timing.is_fatal_error(exc)


def test_rng_errors_of_an_aborted_capture_are_not_fatal():
    # torch's generator-state checks (CUDAGeneratorImpl.cpp) during/after capture
    for text in (
        "Offset increment outside graph capture encountered unexpectedly.",
        "Attempt to increase offset for a CUDA generator not in capture mode.",
        "Cannot call CUDAGeneratorImpl::current_seed during CUDA graph capture. If you need "
        "this call to be captured, please file an issue. Current cudaStreamCaptureStatus: "
        "cudaStreamCaptureStatusActive",
    ):
        exc = RuntimeError(text)
        assert not timing.is_fatal_error(exc)
        assert any(sig in str(exc).lower() for sig in timing.CAPTURE_TEXTS)
        assert timing.fallback_decision("capture", exc).fallback


def test_a_fatal_error_anywhere_in_the_chain_wins():
    try:
        try:
            raise cuda_error("an illegal memory access was encountered", "cudaErrorIllegalAddress")
        except torch.AcceleratorError:
            raise cuda_error("operation failed due to a previous error during capture",
                             "cudaErrorStreamCaptureInvalidated")
    except torch.AcceleratorError as exc:
        assert timing.is_fatal_error(exc)
        assert not timing.fallback_decision("replay", exc).fallback


def test_interrupts_are_never_swallowed():
    assert not timing.fallback_decision("warmup", KeyboardInterrupt()).fallback


def test_other_errors_fall_back_in_every_phase():
    for phase in timing.PHASES:
        assert timing.fallback_decision(phase, ValueError("bad input")).fallback
    with pytest.raises(ValueError):
        timing.fallback_decision("measure", ValueError("x"))


def test_reason_names_the_original_capture_error_not_the_invalidation():
    try:
        try:
            raise cuda_error("operation not permitted when stream is capturing",
                             "cudaErrorStreamCaptureUnsupported")
        except torch.AcceleratorError:
            raise cuda_error("operation failed due to a previous error during capture",
                             "cudaErrorStreamCaptureInvalidated")
    except torch.AcceleratorError as exc:
        reason = timing.error_reason(exc)
    assert reason == "AcceleratorError: CUDA error: operation not permitted when stream is capturing"


def test_reason_is_one_bounded_line():
    reason = timing.error_reason(RuntimeError("x" * 500 + "\nsecond line"))
    assert "\n" not in reason and len(reason) <= 200 and reason.endswith("...")


def test_fallback_marker_round_trips_with_the_exact_size_detail():
    row = timing.TimedRow("nonzero", "torch.float16", "[torch.Size([64, 64])]", "gems")
    line = timing.fallback_marker("capture", 3, row, "AcceleratorError: CUDA error: x y")
    assert line.startswith("BENCHMARK_DIRECT_NO_CUDAGRAPH phase=capture repeat=3 ")
    marker = parse_marker(line)
    assert marker.name == BENCHMARK_DIRECT_NO_CUDAGRAPH
    assert marker.fields == {
        "phase": "capture", "repeat": "3", "op": "nonzero", "dtype": "torch.float16",
        "shape": "[torch.Size([64, 64])]", "side": "gems",
        "reason": "AcceleratorError: CUDA error: x y",
    }


def test_fallback_marker_says_when_the_dtype_was_guessed():
    row = timing.TimedRow("unique", "torch.int32", "[torch.Size([8])]", "torch", "guess")
    marker = parse_marker(timing.fallback_marker("warmup", 1, row, "r"))
    assert marker.get("dtype_source") == "guess"


def test_footer_is_one_line_of_scalars():
    line = timing.footer_line("graph_timer", {"timer": "graph", "rows_graph": 4, "fallbacks": [1]})
    assert line == "zlbench[graph_timer] timer=graph rows_graph=4"


def test_a_capture_at_moved_inputs_is_tried_again_after_one_eager_call_only_where_that_can_help():
    from zlbench.plugins.graph_timer import ContextNotClean, EmptyGraph, call_first

    # FlagGems' segment_reduce at a new address: its host check inside the capture.
    host = RuntimeError("Cannot copy between CPU and CUDA tensors during CUDA graph capture unless the CPU tensor is pinned.")
    assert call_first(torch, host)
    assert not call_first(torch, RuntimeError("CUDA error: an illegal memory access was encountered"))
    assert not call_first(torch, torch.cuda.OutOfMemoryError("CUDA out of memory"))
    assert not call_first(torch, EmptyGraph("The CUDA Graph is empty"))
    assert not call_first(torch, ContextNotClean("a CUDA stream is still capturing"))
    assert not call_first(torch, KeyboardInterrupt())

"""benchmarks/placement_frames.py: its copies and figures here; the timings need a CUDA device."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "placement_frames.py"


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("placement_frames", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_without_a_cuda_device_it_says_so_and_exits_2():
    proc = subprocess.run([sys.executable, str(SCRIPT), "--processes", "1"], capture_output=True, text=True,
                          timeout=120, env={"CUDA_VISIBLE_DEVICES": "", "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "needs a CUDA device" in proc.stderr


def test_each_copy_is_a_view_into_a_page_of_its_own_at_an_offset_of_its_own(script):
    torch = pytest.importorskip("torch")
    clone = script.frame_clone(torch)
    x = torch.arange(1024, dtype=torch.float16).reshape(32, 32)
    copies = [clone(x) for _ in range(4)]
    for c in copies:
        assert torch.equal(c, x) and c.shape == x.shape and c.dtype == x.dtype and c.is_contiguous()
        assert c.untyped_storage().nbytes() == script.FRAME  # the whole page is its storage
    pages = {c.untyped_storage().data_ptr() for c in copies}
    offsets = {c.data_ptr() - c.untyped_storage().data_ptr() for c in copies}
    assert len(pages) == 4 and len(offsets) == 4
    assert all(o % 512 == 0 and o + x.numel() * 2 <= script.FRAME for o in offsets)
    # A page or more (and half a page) is copied as before: its own storage, no wider.
    big = torch.zeros(script.FRAME // 2, dtype=torch.uint8)
    assert clone(big).untyped_storage().nbytes() == big.numel()


def test_offsets_stay_inside_the_page_for_any_size(script):
    for nbytes in (1, 512, 4096, script.FRAME // 2 - 1):
        for index in range(1, 50):
            start = script.frame_offset(index, nbytes)
            assert start % 512 == 0 and 0 <= start and start + nbytes <= script.FRAME


def test_between_process_figure_is_the_median_pairwise_difference(script):
    runs = {"default": [{"r": {"median_ms": m, "placement_spread": 0.001}} for m in (1.0, 1.01, 1.0)],
            "frames": [{"r": {"median_ms": m, "placement_spread": 0.004}} for m in (1.0, 1.0, 1.0)]
            + [{"r": {"error": "CaptureFailed: capture"}}]}
    table = script.summarise(runs)
    # pairs: 1.01/1.0 (1%), 1.0/1.0 (0), 1.01/1.0 (1%): median 1%
    assert table["r"]["default"] == {"processes": 3, "failed": 0, "between_pct": 1.0, "within_pct": 0.1}
    # A process where the row failed is counted apart, not as a median.
    assert table["r"]["frames"] == {"processes": 3, "failed": 1, "between_pct": 0.0, "within_pct": 0.4}

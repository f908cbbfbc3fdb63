"""benchmarks/capture_spread.py: the within- and between-process figures (the timings
themselves need a CUDA device)."""

import pytest
from conftest import load_script


def test_within_and_between_process_spreads_are_told_apart():
    cs = load_script("capture_spread")
    # Three processes, each repeating its own number to 0.1%, but 5% apart from each other.
    runs = [{"tiny": {"medians_ms": [m, m * 1.001, m], "interleaved": [True]}} for m in (1.0, 1.05, 1.0)]
    runs[0]["only_once"] = {"medians_ms": [1.0, 1.0], "interleaved": [False]}
    got = cs.summarise(runs)
    assert list(got) == ["tiny"]  # a case timed in one process alone says nothing between processes
    tiny = got["tiny"]
    assert tiny["processes"] == 3 and tiny["interleaved"] == [True]
    assert tiny["within_range_pct"] == pytest.approx(0.1, abs=1e-3)
    assert tiny["between"]["range_pct"] == pytest.approx(100 * 0.05 / (1.0 + 0.001 / 3), rel=1e-3)
    assert tiny["between"]["sd_pct"] > 10 * tiny["within_sd_pct"]


def test_cases_are_chosen_by_any_of_the_substrings_given():
    cs = load_script("capture_spread")
    assert cs.selected("gems log1p fp32 2^30", []) and cs.selected("torch cumsum bf16 256x256", [])
    assert cs.selected("gems log1p fp32 2^30", ["log1p"]) and not cs.selected("gems cumsum int32 256x256", ["log1p"])
    assert cs.selected("torch cumsum bf16 256x256", ["segment", "bf16"])
    assert not cs.selected("gems segment_reduce bf16 2^20 mean", ["torch"])

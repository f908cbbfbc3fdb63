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


def _run(mhz: float, clock_bound_ms: float, memory_ms: float) -> dict:
    # A clock-bound case takes cycles / MHz; a memory-bound one does not follow the clock.
    clocks = [{"effective_mhz": mhz, "nvml_mhz": 1980}] * 2
    return {"spin": {"medians_ms": [clock_bound_ms * 1980.0 / mhz] * 2, "interleaved": [False], "clocks": clocks},
            "copy": {"medians_ms": [memory_ms] * 2, "interleaved": [False], "clocks": clocks}}


def test_a_process_a_clock_step_lower_moves_a_clock_bound_case_and_its_cycles_agree():
    cs = load_script("capture_spread")
    got = cs.summarise([_run(1980.0, 0.1, 0.05), _run(1965.0, 0.1, 0.0495)])
    spin, copy = got["spin"], got["copy"]
    assert spin["between"]["range_pct"] == pytest.approx(100 * (1980 / 1965 - 1) / ((1 + 1980 / 1965) / 2), rel=1e-3)
    assert spin["between_cycles"]["range_pct"] == pytest.approx(0.0, abs=1e-9)
    assert spin["effective_mhz"] == [1980.0, 1965.0] and spin["nvml_mhz"] == [[1980], [1980]]
    # The memory-bound case moved 1% on its own, faster where the clock was lower: the
    # clock does not explain it, and its cycles lie further apart still.
    assert copy["between_cycles"]["range_pct"] > copy["between"]["range_pct"] > 0.9


def test_runs_without_clock_readings_have_no_cycles_figure():
    cs = load_script("capture_spread")
    runs = [_run(1980.0, 0.1, 0.05), _run(1980.0, 0.1, 0.05)]
    del runs[1]["spin"]["clocks"]
    got = cs.summarise(runs)
    assert "between_cycles" not in got["spin"] and "between_cycles" in got["copy"]

"""benchmarks/process_shift.py: the timings need a CUDA device (here, that it says so);
its figures from readings, without one."""

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import load_script

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "process_shift.py"


def test_without_a_cuda_device_it_says_so_and_fails():
    proc = subprocess.run([sys.executable, str(SCRIPT), "--processes", "2", "--rounds", "1"], capture_output=True,
                          text=True, timeout=120, env={"CUDA_VISIBLE_DEVICES": "", "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "needs a CUDA device" in proc.stderr
    assert "process 1" not in proc.stderr  # the first failure ends it


def _process(mhz: float, clock_bound_us: float, memory_us: float) -> dict:
    # A clock-bound case takes cycles / MHz; a memory-bound one does not follow the clock.
    rnd = {"eff_mhz_before": mhz, "eff_mhz_after": mhz,
           "us": {"spin": clock_bound_us * 1980.0 / mhz, "copy": memory_us}}
    return {"rounds": [rnd, dict(rnd)]}


def test_a_lower_clock_moves_the_clock_bound_case_and_the_adjustment_takes_it_out():
    ps = load_script("process_shift")
    figures = ps.summarize([_process(1980.0, 100.0, 50.0), _process(1965.0, 100.0, 49.5)])
    spin, copy = figures["spin"], figures["copy"]
    assert spin["between_pct"] == pytest.approx(100 * (1980 / 1965 - 1) / ((1 + 1980 / 1965) / 2), rel=1e-6)
    assert spin["clock_adjusted_between_pct"] == pytest.approx(0.0, abs=1e-9)
    assert spin["within_pct"] == 0.0
    # The memory-bound case moved 1% on its own, faster where the clock was lower: the
    # clock does not explain it, and scaling by it widens the gap.
    assert copy["between_pct"] == pytest.approx(100 * 0.5 / 49.75, rel=1e-6)
    assert copy["clock_adjusted_between_pct"] > copy["between_pct"]


def test_cases_a_process_did_not_time_are_left_out():
    ps = load_script("process_shift")
    a, b = _process(1980.0, 100.0, 50.0), _process(1980.0, 100.0, 50.0)
    del b["rounds"][1]["us"]["copy"]
    assert list(ps.summarize([a, b])) == ["spin"]

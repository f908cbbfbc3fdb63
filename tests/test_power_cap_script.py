"""benchmarks/power_cap.py's figures from a series, without a GPU."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import power_cap  # noqa: E402


def _series():
    # 0.1 s at the full clock, then the cap's 1500 MHz with a dip to 1300 at 1.0-1.2 s.
    out = []
    for i in range(300):
        t = i * 0.01
        mhz = 1980 if t < 0.1 else (1300 if 1.0 <= t < 1.2 else 1500)
        out.append({"t_s": t, "ms": 3.0 * 1500 / mhz, "sm_mhz": mhz, "power_w": 690.0,
                    "throttle": ["sw_power_cap"] if t >= 0.15 else []})
    return out


def test_the_figures_say_when_the_cap_came_and_how_far_a_dip_moves_a_window():
    args = argparse.Namespace(within=0.01, rep_ms=100.0)
    got = power_cap.describe(_series(), args)
    assert got["first_mhz"] == 1980 and got["final_mhz"] == 1500
    assert got["first_batch_vs_final"] == pytest.approx(1500 / 1980 - 1, abs=1e-4)
    assert got["capped_s"] == pytest.approx(0.15) and got["settled_s"] == pytest.approx(1.2)
    assert got["window_after_cap_vs_final"] == pytest.approx(0.0)
    # From the dip's end on, every 100 ms window reads the cap's level.
    assert got["settled_windows_max_dev"] == pytest.approx(0.0)
    assert power_cap.windows(_series(), 0.1, 0.95)[1] == pytest.approx(3.0 * 1500 / 1300)


def test_a_shape_that_is_not_four_dimensions_is_refused_by_name():
    assert power_cap.parse_shape("16x4096x4096x4096") == [16, 4096, 4096, 4096]
    with pytest.raises(SystemExit, match="--shapes"):
        power_cap.parse_shape("16x4096")


def test_window_lengths_say_how_far_a_dip_moves_a_timing_of_each_length(tmp_path, capsys):
    series = _series()
    spread = power_cap.window_spread(series, 0.15, (0.1, 0.5, 1.0))
    # A 100 ms window inside the dip reads the dip's whole slowdown; a 1 s window holding
    # the dip and the level reads the level (its median).
    assert spread["0.1s"] == pytest.approx(1500 / 1300 - 1, abs=1e-4)
    assert spread["1s"] == pytest.approx(0.0)
    saved = tmp_path / "power_cap.json"
    saved.write_text(json.dumps({"cases": [{"shape": "16x4096x4096x4096", "dtype": "float16",
                                            "series": series}]}))
    assert power_cap.main(["--from-json", str(saved)]) == 0
    line = capsys.readouterr().out
    assert line.startswith("16x4096x4096x4096 float16 ") and '"settled_s": 1.2' in line

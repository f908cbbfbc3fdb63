"""benchmarks/screen_throughput.py on CPU over the bundled sample: both modes side by
side, the figures it prints and their agreement with the batches' own records."""

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "screen_throughput.py"


@pytest.mark.slow
def test_both_modes_side_by_side_with_fixed_costs_gap_and_projection(tmp_path):
    env = {**os.environ}
    env.pop("FLAGGEMS_DIR", None)
    out = tmp_path / "st"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--backend", "cpu", "--ops", "abs,add",
                           "--dtypes", "float32", "--out", str(out),
                           "--json", str(tmp_path / "st.json")],
                          env=env, capture_output=True, text=True, timeout=300)
    figures = json.loads((tmp_path / "st.json").read_text())
    assert figures["operators"] == figures["ok_in_both"] == 2, proc.stdout + proc.stderr
    for mode in ("fresh", "worker"):
        with open(out / mode / "ops_status.csv", newline="") as f:
            rows = list(csv.DictReader(f))
        assert {r["run_mode"] for r in rows} == {mode}
        costs = sorted(float(r["overhead_s"]) for r in rows)
        assert figures[f"median_fixed_cost_{mode}_s"] == pytest.approx(sum(costs) / 2, abs=0.01)
    # The warm worker saves the interpreter and torch start-up that fresh pays per operator.
    assert figures["median_fixed_cost_worker_s"] < figures["median_fixed_cost_fresh_s"]
    assert figures["aa_graph_pairs"] == 0 and figures["aa_median_abs_gain"] is None   # no graph timer on CPU
    assert figures["corpus_operators"] == 11 and figures["projected_corpus_h_from_sample"] is not None
    assert "goal: median fixed cost per operator in worker mode <= 2 s" in proc.stdout
    assert "projected wall time of the whole corpus (11 operators)" in proc.stdout

"""A change within one side's own input placements is no verdict on the build."""

import json
import sys
from pathlib import Path

import pytest

from zlbench import rowstats
from zlbench.runlog import Row
from zlbench.summary.ab import PairedRow, judge
from zlbench.summary.verdict import FASTER, SAME, SLOWER, UNKNOWN

sys.path.insert(0, str(Path(__file__).parent))
from conftest import zlbench  # noqa: E402
from summary_logwriter import identity, op_log, write_run  # noqa: E402

# FlagGems' lerp_tensor bf16 64x512x512 on an H100: all 8 placements fast in one
# process, 7 of 8 slow in the next (each placement's replays within 0.2%).
FAST = [0.04483, 0.04482, 0.04488, 0.04479, 0.04482, 0.04481, 0.04488, 0.04478]
MIXED = [0.05263, 0.05248, 0.05255, 0.05264, 0.05251, 0.05243, 0.05265, 0.04477]


def _row(ms, spread, placements):
    r = Row("lerp_tensor", "torch.bfloat16", "kernel", "core", "[64, 512, 512]", "SUCCESS", 1)
    r.gems_ms, r.gems_spread, r.gems_placement_ms = ms, spread, placements
    return r


def _judge(a, b):
    return judge(PairedRow(a, b, a.gems_ms / b.gems_ms - 1, False), 0.02, False)


def test_a_side_whose_placements_reach_the_others_figure_gives_no_verdict():
    found = _judge(_row(0.044825, 0.0006, FAST), _row(0.05254, 0.0026, MIXED))
    assert found.status == UNKNOWN and found.placements and not found.throttled
    assert found.change == pytest.approx(0.05254 / 0.044825 - 1)
    # Compared on device time all the same: its threshold stays (an A/A floor counts it).
    assert found.threshold == pytest.approx(0.02 + (0.0006**2 + 0.0026**2) ** 0.5)
    assert found.why.startswith("placements: B's 8 read 0.04477-0.05265 ms, A's 0.04482 ms among them")
    # Either way round: A's placements may be the mixed ones.
    assert _judge(_row(0.05254, 0.0026, MIXED), _row(0.044825, 0.0006, FAST)).placements


def test_a_build_that_moves_every_placement_keeps_its_verdict():
    slower = [m * 1.05 for m in FAST]
    found = _judge(_row(0.044825, 0.0006, FAST), _row(0.044825 * 1.05, 0.0006, slower))
    assert found.status == SLOWER and not found.placements
    # A change just past the spans' reach keeps it too: the tolerance is the spreads, not the floor.
    faster = [m * 0.97 for m in FAST]
    assert _judge(_row(0.044825, 0.0006, FAST), _row(0.044825 * 0.97, 0.0006, faster)).status == FASTER


def test_rows_without_placement_medians_and_same_rows_are_judged_as_before():
    assert _judge(_row(1.0, 0.002, None), _row(1.1, 0.002, None)).status == SLOWER
    # A SAME row stays SAME, whatever its placements read.
    assert _judge(_row(1.0, 0.002, [0.9, 1.2]), _row(1.001, 0.002, [0.9, 1.2])).status == SAME


@pytest.mark.parametrize(
    "cost, medians",
    [
        ({"placement_ms": [0.1, 0.2]}, [0.1, 0.2]),
        ({"graph_ms": [0.1, 0.12]}, [0.1, 0.12]),  # interleaved graphs
        ({"placement_ms": [0.1]}, None),  # one placement: nothing to span
        ({"placement_ms": [0.1, "x"]}, None),
        ({"placement_ms": [0.1, 0.0]}, None),
        ({"placement_ms": [0.1, float("nan")]}, None),
        ({}, None),
        ("not a dict", None),
    ],
)
def test_placement_medians_read_a_records_placements_or_interleaved_graphs(cost, medians):
    assert rowstats.placement_medians({"cost_ms": cost}) == medians


def _run(root, gems_ms, placements):
    shape = "[torch.Size([64, 512, 512])]"
    log = op_log("lerp_tensor", ["torch.bfloat16"], [shape], lambda op, d, s: gems_ms)
    run_dir = write_run(root / "lerp_tensor", log, identity())
    for side, ms, spread, cost in (
        ("torch", 0.05, 0.001, {}),
        ("gems", gems_ms, 0.002, {"placement_ms": placements}),
    ):
        rowstats.append(run_dir, {"op": "lerp_tensor", "dtype": "torch.bfloat16", "shape": shape,
                                  "side": side, "samples": 24, "spread": spread, "median_ms": ms,
                                  "cost_ms": cost})
    return root


def test_summary_ab_names_the_rows_their_placements_explain(tmp_path):
    a = _run(tmp_path / "a", 0.0448, FAST)
    b = _run(tmp_path / "b", 0.0525, MIXED)
    doc = json.loads(zlbench("summary", "--ab", a, b, "--format", "json", check=True).stdout)
    (pair,) = doc["pairs"]
    assert (pair["verdict"], pair["placements_span"], pair["measured_throttled"]) == ("UNKNOWN", True, False)
    assert pair["why"].startswith("placements: B's 8 read")
    text = zlbench("summary", "--ab", a, b, check=True).stdout
    assert "1 of 1 rows UNKNOWN, their change within one side's own input placements" in text
    assert "runs measured before spreads" not in text  # not lumped with rows that lack a spread
    # The gate trips on it only where UNKNOWN is asked for.
    assert zlbench("summary", "--ab", a, b, "--fail-on", "slower").returncode == 0
    assert zlbench("summary", "--ab", a, b, "--fail-on", "unknown").returncode == 1


def test_an_aa_floor_counts_rows_that_moved_within_their_placements(tmp_path):
    # zlbench noise pairs at a zero floor, where a row that moved within its placements
    # is UNKNOWN: it must still count, or the floor leaves out the rows that moved most.
    a = _run(tmp_path / "a", 0.0448, FAST)
    b = _run(tmp_path / "b", 0.0525, MIXED)
    noise = zlbench("noise", "--from", a, "--from", b, "--db", tmp_path / "h.sqlite", "--quantile", "100")
    assert noise.returncode == 0, noise.stdout + noise.stderr
    assert "p100 of 1 A/A rows' change beyond their own spreads" in noise.stdout
    assert "noise floor 16.9% for machine" in noise.stdout  # 17.19% less hypot(0.2%, 0.2%)

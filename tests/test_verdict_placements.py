"""A SLOWER or FASTER row whose two sides share a placement level says so, and keeps its verdict."""

import json
import sys
from pathlib import Path

import pytest

from zlbench import rowstats
from zlbench.runlog import Row
from zlbench.summary.ab import PairedRow, judge, shared_placement_level
from zlbench.summary.verdict import SLOWER

sys.path.insert(0, str(Path(__file__).parent))
from conftest import zlbench  # noqa: E402
from summary_logwriter import identity, op_log, write_run  # noqa: E402

# FlagGems' lerp_tensor bf16 64x512x512 on an H100: all 8 placements fast in one
# process, 7 of 8 slow in the next (each placement's replays within 0.2%).
FAST = [0.04483, 0.04482, 0.04488, 0.04479, 0.04482, 0.04481, 0.04488, 0.04478]
MIXED = [0.05263, 0.05248, 0.05255, 0.05264, 0.05251, 0.05243, 0.05265, 0.04477]


def _row(ms, placements, spread=0.001):
    r = Row("lerp_tensor", "torch.bfloat16", "kernel", "core", "[64, 512, 512]", "SUCCESS", 1)
    r.gems_ms, r.gems_spread, r.gems_placement_ms = ms, spread, placements
    return r


def _pair(a, b):
    pair = PairedRow(a, b, a.gems_ms / b.gems_ms - 1, False)
    pair.verdict = judge(pair, 0.02, False)
    return pair


def test_a_level_both_sides_read_is_named_and_the_verdict_stands():
    pair = _pair(_row(0.044825, FAST), _row(0.05254, MIXED))
    assert pair.verdict.status == SLOWER  # the gate and the re-check still see it
    assert shared_placement_level(pair) == "A 0.04478 ms, B 0.04477 ms"
    # Either way round.
    assert shared_placement_level(_pair(_row(0.05254, MIXED), _row(0.044825, FAST))) == "A 0.04477 ms, B 0.04478 ms"


def test_a_build_that_moves_every_placement_shares_no_level_even_past_an_outlier():
    # A: seven placements at 1.00 and one 8% off (the trim drops it); B 5% slower at every
    # placement. B's figure lies within A's span, yet no placement of B reads one of A's.
    a = [1.0] * 7 + [1.08]
    b = [m * 1.05 for m in a]
    pair = _pair(_row(1.0, a), _row(1.05, b))
    assert pair.verdict.status == SLOWER and shared_placement_level(pair) == ""
    # Two placements 8% apart, a 15% change at both: no level shared either.
    pair = _pair(_row(1.04, [1.0, 1.08]), _row(1.196, [1.15, 1.242]))
    assert pair.verdict.real and shared_placement_level(pair) == ""


def test_placements_merely_spread_as_wide_as_the_change_share_no_level():
    # A's placements spread evenly over 1.00-1.03, B is A 3% slower at each: A's top
    # placement reads B's bottom one, but neither lies beyond the threshold from its own
    # side's figure, so neither side falls at two levels.
    a = [1.0 + 0.03 * i / 7 for i in range(8)]
    pair = _pair(_row(1.015, a, spread=0.0005), _row(1.015 * 1.03, [m * 1.03 for m in a], spread=0.0005))
    assert pair.verdict.status == SLOWER and shared_placement_level(pair) == ""
    # Were A's top placement beyond the threshold from A's figure (two levels), it would be named.
    a[-1] = 1.0609
    pair = _pair(_row(1.015, a, spread=0.0005), _row(1.06, [1.06] * 8, spread=0.0005))
    assert pair.verdict.status == SLOWER and shared_placement_level(pair) == "A 1.061 ms, B 1.06 ms"


def test_only_a_real_row_is_named_and_bad_medians_name_none():
    same = _pair(_row(1.0, [0.9, 1.2]), _row(1.001, [0.9, 1.2]))
    assert not same.verdict.real and shared_placement_level(same) == ""
    # Rows without placement medians (one placement, interleaved graphs, the direct timer,
    # old runs), or with a zero among them set by hand: no note, no error.
    assert shared_placement_level(_pair(_row(1.0, None), _row(1.1, FAST))) == ""
    assert shared_placement_level(_pair(_row(0.044825, [0.0, 0.04478]), _row(0.05254, MIXED))) == "A 0.04478 ms, B 0.04477 ms"


@pytest.mark.parametrize(
    "cost, medians",
    [
        ({"placement_ms": [0.1, 0.2]}, [0.1, 0.2]),
        # Interleaved graphs: each graph's median mixes several placements.
        ({"graph_ms": [0.1, 0.12]}, None),
        ({"placement_ms": None, "graph_ms": [0.1, 0.12]}, None),
        ({"placement_ms": [0.1]}, None),  # one placement: no level of its own
        ({"placement_ms": [0.1, "x"]}, None),
        ({"placement_ms": [0.1, 0.0]}, None),
        ({"placement_ms": [0.1, float("nan")]}, None),
        ({}, None),
        ("not a dict", None),
    ],
)
def test_placement_medians_read_a_records_own_graph_per_placement_only(cost, medians):
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


def test_summary_ab_notes_the_shared_level_beside_the_verdict_and_after_a_recheck(tmp_path):
    a = _run(tmp_path / "a", 0.0448, FAST)
    b = _run(tmp_path / "b", 0.0525, MIXED)
    doc = json.loads(zlbench("summary", "--ab", a, b, "--format", "json", check=True).stdout)
    (pair,) = doc["pairs"]
    assert (pair["verdict"], pair["placement_level"]) == ("SLOWER", "A 0.04478 ms, B 0.04477 ms")
    text = zlbench("summary", "--ab", a, b, check=True).stdout
    assert "a placement level both read (A 0.04478 ms, B 0.04477 ms)" in text
    assert ("1 row judged SLOWER or FASTER read a placement level both sides share (first: "
            "lerp_tensor torch.bfloat16, A 0.04478 ms, B 0.04477 ms): where the inputs lay may have "
            "moved them, not the build; a re-check in fresh processes tells (--recheck).") in text
    # The gate trips on the verdict as before.
    assert zlbench("summary", "--ab", a, b, "--fail-on", "slower").returncode == 1
    # A re-check in fresh processes that reads both at the fast level: SAME now, still named,
    # and the line no longer asks for a re-check.
    a2 = _run(tmp_path / "a2", 0.0448, FAST)
    b2 = _run(tmp_path / "b2", 0.0448, FAST)
    rechecked = zlbench("summary", "--ab", a, b, "--recheck", a2, b2, check=True).stdout
    assert "Rows: 0 SLOWER, 0 FASTER, 1 SAME" in rechecked
    assert "1 row judged SLOWER or FASTER read a placement level" in rechecked
    assert "moved them, not the build.\n" in rechecked and "(--recheck)" not in rechecked

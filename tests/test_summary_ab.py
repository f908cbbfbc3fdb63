"""Pairing two runs: gains, ranges, what did not pair, fallback notes, calibers."""

from pathlib import Path

import pytest

from summary_logwriter import identity, op_log, session_end, table_text, write_run
from zlbench.summary import compare_calibers, pair_runs, summarize
from zlbench.summary.ab import pair_summaries
from zlbench.summary.caliber import CaliberDiff
from zlbench.summary.render_ab import render_ab

LOGS = Path(__file__).parent / "fixtures" / "logs"
SHAPES = ["[torch.Size([64, 64])]", "[torch.Size([4096, 4096])]"]


def test_aa_pair_of_real_h200_logs_shows_the_kernel_mode_noise():
    result = pair_runs(LOGS / "h200" / "kernel-1.log", LOGS / "h200" / "kernel-2.log")
    assert len(result.pairs) == 45
    assert not result.only_a and not result.only_b and not result.not_comparable
    # The fixture's README: median 3.7%, up to 468% on small shapes.
    assert result.noise_median == pytest.approx(0.037, abs=0.001)
    assert result.overall.max == pytest.approx(0.039296 / 0.006912 - 1)
    assert [r.name for r in result.by_op] == ["abs", "softmax", "sum"]
    assert result.caliber.notes and not result.caliber.mismatch


def test_gain_is_a_over_b_minus_one_so_positive_means_b_faster(tmp_path):
    a = write_run(tmp_path / "a", op_log("abs", ["torch.float16"], SHAPES,
                                         lambda op, dt, s: 0.02), identity())
    b = write_run(tmp_path / "b", op_log("abs", ["torch.float16"], SHAPES,
                                         lambda op, dt, s: 0.01 if "64, 64" in s else 0.04),
                  identity())
    result = pair_runs(a, b)
    gains = {p.a.shape: p.gain for p in result.pairs}
    assert gains == {SHAPES[0]: pytest.approx(1.0), SHAPES[1]: pytest.approx(-0.5)}
    r = result.overall
    assert (r.count, r.min, r.max) == (2, pytest.approx(-0.5), pytest.approx(1.0))
    assert r.median == pytest.approx(0.25)
    # Geometric mean of the ratios 2 and 0.5 is 1: no gain overall.
    assert r.geomean == pytest.approx(0.0)
    assert result.noise_p95 == pytest.approx(0.5 + 0.95 * 0.5)


def _log(tables):
    return "".join(table_text(op, dt, rows) for op, dt, rows in tables) + session_end(1)


def test_unmatched_and_failed_rows_are_counted_not_ranged(tmp_path):
    row = lambda shape, ms, **kw: dict(shape=shape, torch_ms=0.01, gems_ms=ms, **kw)  # noqa
    a = _log([("abs", "torch.float16", [row("[1]", 0.01), row("[2]", 0.02), row("[3]", 0.03),
                                        row("[4]", 0.04)])])
    b = _log([("abs", "torch.float16", [row("[1]", 0.01), row("[2]", None, speedup=None),
                                        row("[3]", 0.03, status="FAILED"), row("[5]", 0.05)])])
    (tmp_path / "a.log").write_text(a)
    (tmp_path / "b.log").write_text(b)
    result = pair_runs(tmp_path / "a.log", tmp_path / "b.log")
    assert [p.a.shape for p in result.pairs] == ["[1]"]
    assert [r.shape for r in result.only_a] == ["[4]"]
    assert [r.shape for r in result.only_b] == ["[5]"]
    assert [(n.a.shape, n.reason) for n in result.not_comparable] == [
        ("[2]", "B gems latency N/A"), ("[3]", "B status FAILED")]
    text = render_ab(result, "markdown")
    assert "only in A: 1; only in B: 1; not comparable (failed or no latency): 2" in text
    assert "| only in B | abs | torch.float16 | 5 |" in text


def test_ranges_with_direct_timer_fallback_rows_are_annotated(tmp_path):
    fallback = LOGS / "fallback-run"
    result = pair_runs(fallback, fallback)
    [nonzero] = result.by_op
    assert nonzero.fallback_rows == 1 and result.overall.fallback_rows == 1
    assert [p.fallback for p in result.pairs].count(True) == 1
    assert "1 rows direct-timer fallback (different regime)" in render_ab(result, "table")
    assert result.noise_median == 0.0


def test_keys_printed_twice_pair_in_order_and_are_counted(tmp_path):
    rows = [dict(shape="[1]", torch_ms=0.01, gems_ms=0.01)]
    twice = _log([("mm", "torch.float16", rows), ("mm", "torch.float16",
                                                   [dict(rows[0], gems_ms=0.02)])])
    (tmp_path / "a.log").write_text(twice)
    (tmp_path / "b.log").write_text(twice)
    result = pair_runs(tmp_path / "a.log", tmp_path / "b.log")
    assert [p.a.gems_ms for p in result.pairs] == [0.01, 0.02]
    assert all(p.gain == 0 for p in result.pairs)
    assert result.duplicate_keys == 2


def test_a_recheck_judges_keys_printed_twice_by_the_same_printing_at_the_first_floor(tmp_path):
    from zlbench.summary.ab import apply_recheck

    def side(name, first_ms, second_ms, spread=0.001):
        rows = [dict(shape="[1]", torch_ms=0.01, gems_ms=first_ms)]
        (tmp_path / name).write_text(_log([("mm", "torch.float16", rows),
                                           ("mm", "torch.float16", [dict(rows[0], gems_ms=second_ms)])]))
        summary = summarize(tmp_path / name)
        for row in summary.rows:
            row.gems_spread = spread
        return summary

    # First pair: the first printing 30% slower in B, the second alike. The re-check reads
    # the first 30% slower again and the second 10% faster: the first printing's verdict
    # is reproduced (matched against the re-check's first printing, not its other one).
    first = pair_summaries(side("a", 0.01, 0.02), side("b", 0.013, 0.02))
    assert [p.verdict.status for p in sorted(first.pairs, key=lambda p: p.occurrence)] == ["SLOWER", "SAME"]
    again = pair_summaries(side("a2", 0.01, 0.02), side("b2", 0.013, 0.018))
    apply_recheck(first, again)
    by_print = sorted(first.pairs, key=lambda p: p.occurrence)
    assert by_print[0].verdict.status == "SLOWER" and by_print[0].recheck.startswith("reproduced (SLOWER")
    assert by_print[1].recheck is None
    # The re-check is judged at the first pair's floor (here 40%), not at its own default:
    # a 30% change under it does not reproduce a verdict the first pair gave at 2%.
    first = pair_summaries(side("a", 0.01, 0.02), side("b", 0.013, 0.02))
    first.noise_floor = 0.4
    again = pair_summaries(side("a2", 0.013, 0.02), side("b2", 0.0169, 0.02))
    assert next(p for p in again.pairs if p.occurrence == 0).verdict.status == "SLOWER"  # at 2%
    apply_recheck(first, again)
    assert next(p for p in first.pairs if p.occurrence == 0).recheck.startswith("not reproduced (SAME")


def test_a_rows_own_floor_is_found_by_its_printing_and_judges_its_recheck_too(tmp_path):
    from zlbench.summary.ab import NoiseFloor, apply_recheck

    def side(name, first_ms, second_ms):
        rows = [dict(shape="[1]", torch_ms=0.01, gems_ms=first_ms)]
        (tmp_path / name).write_text(_log([("mm", "torch.float16", rows),
                                           ("mm", "torch.float16", [dict(rows[0], gems_ms=second_ms)])]))
        summary = summarize(tmp_path / name)
        for row in summary.rows:
            row.gems_spread = 0.001
        return summary

    # The second printing of mm [1] alone has its own floor (50%), filed under its shape
    # as FlagGems' result files spell it. 30% slower in B: SLOWER at the machine's floor,
    # SAME at its own.
    a = side("a", 0.01, 0.02)
    floors = {a.rows[0].run_dir: NoiseFloor(0.02, "zlbench noise", {(("mm", "torch.float16", "[1]"), 1): 0.5})}
    first = pair_summaries(a, side("b", 0.013, 0.026), 0.02, "default", floors)
    by_print = sorted(first.pairs, key=lambda p: p.occurrence)
    assert [p.verdict.status for p in by_print] == ["SLOWER", "SAME"]
    assert [first.floor_for(p).value for p in by_print] == [0.02, 0.5]
    assert [(f.per_row, n) for f, n in first.floors_used()] == [(False, 1), (True, 1)]
    # 80% slower is beyond its own floor. The re-check reads both printings 30% slower: at
    # the first pair's floors the first is reproduced, the second (its own floor) is not.
    first = pair_summaries(a, side("b", 0.013, 0.036), 0.02, "default", floors)
    again = pair_summaries(side("a2", 0.01, 0.02), side("b2", 0.013, 0.026))
    assert {p.verdict.status for p in again.pairs} == {"SLOWER"}
    apply_recheck(first, again)
    by_print = sorted(first.pairs, key=lambda p: p.occurrence)
    assert by_print[0].recheck.startswith("reproduced (SLOWER")
    assert by_print[1].verdict.status == "SAME" and by_print[1].recheck.startswith("not reproduced (SAME")
    # No row judged (no spreads: every row UNKNOWN): the recorded floor is still the one named.
    bare = summarize(tmp_path / "a")
    none = pair_summaries(bare, summarize(tmp_path / "b"), 0.02, "default", floors)
    assert {p.verdict.status for p in none.pairs} == {"UNKNOWN"}
    assert [(f.source, n) for f, n in none.floors_used()] == [("zlbench noise", 0)]


def test_compare_calibers_names_each_difference_and_unknowns():
    a = identity()
    b = identity(level="comprehensive", device={"index": 3, "model": "NVIDIA H100"},
                 knobs={"ZL_ENABLE_CUDAGRAPH": "0", "USE_FLAGTUNE": "0", "NEW_KNOB": "x"})
    del b["tuner_cache"]
    assert compare_calibers(a, b) == [
        CaliberDiff("level", "core", "comprehensive"),
        CaliberDiff("tuner_cache", "isolated", "unknown"),
        CaliberDiff("device model", "NVIDIA H200", "NVIDIA H100"),
        CaliberDiff("knobs.NEW_KNOB", "unknown", "x"),
        CaliberDiff("knobs.ZL_ENABLE_CUDAGRAPH", "1", "0"),
    ]
    assert compare_calibers(a, dict(a, versions={"triton": "3.7.0"})) == []
    assert compare_calibers(a, dict(a, repeat=5)) == [CaliberDiff("repeat", "3", "5")]
    # An identity from an old run with none of these keys: all unknown, no crash.
    assert {d.b for d in compare_calibers(a, {})} == {"unknown"}
    assert compare_calibers(None, None) == []


def test_device_index_and_shared_cache_path_are_not_caliber():
    a = identity(tuner_cache="shared:/home/a/.flaggems/config_cache",
                 knobs={"ZL_DEVICE": "3", "BENCH_LEVEL": "core"})
    b = identity(tuner_cache="shared:/home/b/.flaggems/config_cache",
                 device={"index": 5, "model": "NVIDIA H200"},
                 knobs={"ZL_DEVICE": "5", "BENCH_LEVEL": "core"})
    assert compare_calibers(a, b) == []
    assert compare_calibers(a, dict(b, tuner_cache="isolated")) == [
        CaliberDiff("tuner_cache", "shared", "isolated")]


def _batch(root: Path, ops, ident_for):
    for op in ops:
        write_run(root / op, op_log(op, ["torch.float16"], SHAPES, lambda *_: 0.01),
                  ident_for(op))
    return root


def test_batch_differences_shared_by_all_ops_are_reported_once(tmp_path):
    ops = ["abs", "exp", "sum"]
    a = _batch(tmp_path / "a", ops, lambda op: identity())
    b = _batch(tmp_path / "b", ops, lambda op: identity(
        timer="direct", repeat=5 if op == "sum" else 3))
    report = pair_runs(a, b).caliber
    assert report.common == [CaliberDiff("timer", "graph", "direct")]
    assert report.per_run == {"sum": [CaliberDiff("repeat", "3", "5")]}
    assert report.mismatch


def test_calibers_follow_the_rows_even_when_run_dir_names_differ(tmp_path):
    # A batch against one timestamped `zlbench run` dir of one of its operators.
    a = _batch(tmp_path / "a", ["abs", "exp"], lambda op: identity())
    b = write_run(tmp_path / "runs" / "20261129-101500_exp",
                  op_log("exp", ["torch.float16"], SHAPES, lambda *_: 0.01),
                  identity(autotune_mode="replay"))
    result = pair_runs(a, b)
    assert len(result.pairs) == 2 and len(result.only_a) == 2
    assert result.caliber.common == [CaliberDiff("autotune_mode", "record", "replay")]


def test_identity_on_one_side_only_is_a_mismatch(tmp_path):
    a = write_run(tmp_path / "a", op_log("abs", ["torch.float16"], SHAPES, lambda *_: 0.01),
                  identity())
    b = write_run(tmp_path / "b", op_log("abs", ["torch.float16"], SHAPES, lambda *_: 0.01))
    report = pair_runs(a, b).caliber
    assert report.mismatch and report.common[0] == CaliberDiff("level", "core", "unknown")


def test_printed_mode_difference_is_a_mismatch_even_without_identities(tmp_path):
    rows = [dict(shape="[1]", torch_ms=0.01, gems_ms=0.01)]
    (tmp_path / "a.log").write_text(_log([("abs", "torch.float16", rows)]))
    (tmp_path / "b.log").write_text(
        table_text("abs", "torch.float16", rows, mode="cudagraph") + session_end(1))
    report = pair_runs(tmp_path / "a.log", tmp_path / "b.log").caliber
    assert report.common == [CaliberDiff("mode (printed in the tables)", "kernel", "cudagraph")]


def test_pair_summaries_accepts_already_parsed_inputs():
    a = summarize(LOGS / "h200" / "kernel-1.log")
    result = pair_summaries(a, a)
    assert len(result.pairs) == 45 and result.noise_p95 == 0.0


def test_plot_orders_operators_by_the_tabled_median_and_keeps_both_ends():
    from zlbench.summary.ab import GainRange
    from zlbench.summary.plot import _ops_to_draw

    ranges = [GainRange(op, 2, None, median, None, None, 0)
              for op, median in (("a", 0.3), ("b", -0.2), ("c", 0.0), ("d", 0.1))]
    assert _ops_to_draw(ranges, 10) == ["b", "c", "d", "a"]
    assert _ops_to_draw(ranges, 2) == ["b", "a"]

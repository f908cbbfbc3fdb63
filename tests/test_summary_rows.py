"""Rows of a run dir or batch dir: markers attached, timers set, run outcomes reported."""

import shutil
from pathlib import Path

import pytest

from summary_logwriter import identity, op_log, write_run
from zlbench.summary import SummaryInputError, summarize
from zlbench.summary.aggregate import aggregate

LOGS = Path(__file__).parent / "fixtures" / "logs"
SHAPES = ["[torch.Size([64, 64])]", "[torch.Size([4096, 4096])]"]


def by_key(summary):
    return {(r.op, r.dtype, r.shape): r for r in summary.rows}


def test_direct_timer_comes_from_the_rows_marker_and_graph_from_the_identity():
    rows = by_key(summarize(LOGS / "fallback-run"))
    fell_back = rows[("nonzero", "torch.float16", SHAPES[0])]
    assert fell_back.timer == "direct"
    assert rows[("nonzero", "torch.float16", SHAPES[1])].timer == "graph"
    assert rows[("nonzero", "torch.float32", SHAPES[0])].timer == "graph"
    assert fell_back.run_dir == str(LOGS / "fallback-run")


def test_markers_attach_to_a_row_an_op_dtype_or_the_whole_run():
    summary = summarize(LOGS / "fallback-run")
    rows = by_key(summary)

    def names(op, dtype, shape):
        return sorted(m.name for m in rows[(op, dtype, shape)].markers)

    assert names("nonzero", "torch.float16", SHAPES[0]) == [
        "BENCHMARK_DIRECT_NO_CUDAGRAPH", "compile_warmup_no_evict"]
    assert names("nonzero", "torch.float16", SHAPES[1]) == ["compile_warmup_no_evict"]
    for shape in SHAPES:
        assert names("nonzero", "torch.float32", shape) == [
            "AUTOTUNE_REPLAY_FALLBACK", "compile_warmup_no_evict"]
    # The bfloat16 marker names a table that never printed: reported, not dropped.
    [unattached] = [i for i in summary.issues if i.kind == "unattached_marker"]
    assert unattached.dtype == "torch.bfloat16" and unattached.line == 21


def test_a_run_marker_in_a_log_without_rows_is_reported(tmp_path):
    log = tmp_path / "run.log"
    log.write_text("PREFLIGHT_FAILED check=device reason=\"no cuda device\"\n")
    summary = summarize(log)
    assert summary.rows == []
    assert [(i.kind, i.message) for i in summary.issues] == [
        ("no_session_end", "log stops before pytest's closing summary line (process killed "
                           "or still running?)"),
        ("unattached_marker", "PREFLIGHT_FAILED is about the whole run, which printed no "
                              "rows: check=device reason=no cuda device"),
    ]


def test_a_bare_log_has_unknown_timer():
    summary = summarize(LOGS / "h200" / "kernel-1.log")
    assert {r.timer for r in summary.rows} == {"unknown"}
    assert summary.root == LOGS / "h200"


def test_missing_input_and_dir_without_logs_raise_clear_errors(tmp_path):
    with pytest.raises(SummaryInputError, match="does not exist"):
        summarize(tmp_path / "nope")
    (tmp_path / "empty" / "deeper").mkdir(parents=True)
    with pytest.raises(SummaryInputError, match="no run.log under .*empty"):
        summarize(tmp_path / "empty")


def test_batch_dir_is_searched_recursively_and_reports_unfinished_operators(tmp_path):
    batch = tmp_path / "batch"
    for op in ("abs", "exp"):
        write_run(batch / op, op_log(op, ["torch.float16"], SHAPES, lambda *_: 0.01),
                  identity())
    # A nested run dir, without .complete.
    write_run(batch / "sum" / "attempt-2",
              op_log("sum", ["torch.float16"], SHAPES, lambda *_: 0.02),
              identity(), complete=False)
    # Earlier attempts the batch set aside are not its result.
    write_run(batch / "set-aside" / "abs" / "1",
              op_log("abs", ["torch.float16"], SHAPES, lambda *_: 9.0), identity())
    # The columns zlbench batch writes (zlbench/batch/state.py).
    (batch / "ops_status.csv").write_text(
        "operator,status,attempts,dtype_level,reason,notes,run_dir\n"
        "abs,ok,2,default,,,abs\nexp,ok,1,default,,,exp\nsum,ok,1,default,,,sum\n"
        "nonzero,timeout,2,default,killed after 900 s,,nonzero\n"
        "fft,dismissed,0,,needs cuFFT,verified 2026-11,\n")
    summary = summarize(batch)
    assert [run.rel for run in summary.runs] == ["abs", "exp", str(Path("sum/attempt-2"))]
    assert len(summary.rows) == 6 and {r.gems_ms for r in summary.rows} == {0.01, 0.02}
    issues = {(i.kind, i.op) for i in summary.issues}
    assert issues == {("incomplete_run", None), ("op_timeout", "nonzero"),
                      ("op_dismissed", "fft")}
    status = next(i for i in summary.issues if i.kind == "op_timeout")
    assert status.message == "batch status timeout: killed after 900 s"


def test_ops_status_without_the_expected_columns_is_reported(tmp_path):
    write_run(tmp_path / "abs", op_log("abs", ["torch.float16"], SHAPES, lambda *_: 0.01))
    (tmp_path / "ops_status.csv").write_text("name,result\nabs,ok\n")
    summary = summarize(tmp_path)
    assert [i.kind for i in summary.issues] == ["bad_ops_status"]
    assert "found: name, result" in summary.issues[0].message


def test_unreadable_identity_is_reported_and_rows_still_come(tmp_path):
    run = write_run(tmp_path / "run", op_log("abs", ["torch.float16"], SHAPES,
                                             lambda *_: 0.01))
    (run / "run_identity.json").write_text("{not json")
    summary = summarize(run)
    assert len(summary.rows) == 2 and {r.timer for r in summary.rows} == {"unknown"}
    assert [i.kind for i in summary.issues] == ["bad_identity"]


def test_aggregates_count_geomean_min_max_and_direct_rows():
    summary = summarize(LOGS / "fallback-run")
    [nonzero] = aggregate(summary.rows, "op")
    assert (nonzero.count, nonzero.excluded, nonzero.direct_fallback) == (4, 0, 1)
    assert nonzero.min == 0.6 and nonzero.max == 1.286
    assert nonzero.geomean == pytest.approx((0.75 * 1.286 * 0.6 * 1.25) ** 0.25)
    by_dtype = {a.group: a for a in aggregate(summary.rows, "dtype")}
    assert by_dtype["torch.float32"].count == 2


def test_aggregates_leave_out_rows_without_a_speedup():
    summary = summarize(LOGS / "odd" / "columns.log")
    by_op = {a.group: a for a in aggregate(summary.rows, "op")}
    assert (by_op["layer_norm"].count, by_op["layer_norm"].excluded) == (2, 1)
    assert (by_op["index_put"].count, by_op["index_put"].excluded) == (2, 1)


def test_a_copied_fixture_dir_is_one_run_per_log_file(tmp_path):
    for name in ("kernel-1.log", "kernel-2.log"):
        shutil.copy(LOGS / "h200" / name, tmp_path / name)
    # Only files named run.log make a run dir; a directory of other logs has none.
    with pytest.raises(SummaryInputError):
        summarize(tmp_path)

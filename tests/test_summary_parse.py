"""Parsing FlagGems' printed tables, markers and failures out of one log."""

from pathlib import Path

import pytest

from summary_logwriter import SESSION_START, session_end, table_text
from zlbench.runlog import parse_log, parse_row

LOGS = Path(__file__).parent / "fixtures" / "logs"
H200 = LOGS / "h200"


def parse_file(path: Path):
    return parse_log(path.read_text(), str(path))


def kinds(parsed):
    return [i.kind for i in parsed.issues]


def test_h200_abs_log_gives_every_row_with_its_values():
    parsed = parse_file(H200 / "abs-head.log")
    assert len(parsed.rows) == 30
    assert parsed.issues == []
    assert parsed.session_end == "2 passed in 51.86s"
    assert {r.op for r in parsed.rows} == {"abs", "abs_"}
    first = parsed.rows[0]
    assert (first.op, first.dtype, first.mode, first.level) == (
        "abs", "torch.float16", "kernel", "core")
    assert first.shape == "[torch.Size([1073741824])]"
    assert (first.torch_ms, first.gems_ms, first.speedup, first.tflops) == (
        1.004192, 1.064736, 0.943, 1.008)
    assert first.torch_gbps is None and first.status == "SUCCESS"
    # The first abs_ table follows pytest's "." line for test_abs.
    inplace = [r for r in parsed.rows if r.op == "abs_"]
    assert inplace[1].shape == "[torch.Size([64, 64])]" and inplace[1].gems_ms == 0.073168


def test_h200_kernel_log_keeps_size_detail_with_trailing_arguments():
    parsed = parse_file(H200 / "kernel-1.log")
    assert len(parsed.rows) == 45
    softmax = [r for r in parsed.rows if r.op == "softmax"]
    assert softmax[1].shape == "[torch.Size([64, 64]), 1]"
    assert softmax[3].speedup == 11.979 and softmax[3].tflops is None
    assert parsed.session_end.startswith("3 passed, 6 warnings")


def test_capture_failure_log_reports_input_error_and_each_failed_test():
    parsed = parse_file(H200 / "capture-fail.log")
    assert parsed.rows == []
    assert kinds(parsed) == ["input_error", "pytest_failed", "pytest_failed", "pytest_failed"]
    bad_input = parsed.issues[0]
    assert bad_input.op == "masked_select" and bad_input.line == 9
    assert "printed no error text" in bad_input.message
    assert "test_unique.py::test_unique2" in parsed.issues[3].message


def test_optional_columns_follow_each_rows_cell_count_not_the_header():
    parsed = parse_file(LOGS / "odd" / "columns.log")
    norm = [r for r in parsed.rows if r.op == "layer_norm"]
    assert (norm[0].tflops, norm[0].torch_gbps, norm[0].gems_gbps) == (0.512, 401.2, 611.9)
    # Its tflops was 0, so FlagGems left the TFLOPS cell out under a TFLOPS header.
    assert (norm[1].tflops, norm[1].torch_gbps, norm[1].gems_gbps) == (None, 4.0, 3.3)
    assert norm[2].gems_ms is None and norm[2].speedup is None and norm[2].torch_ms == 0.081
    assert norm[0].shape == (
        "([torch.Size([1024, 1024]), torch.Size([1024]), torch.Size([1024])], {'eps': 1e-05})")
    # Header without TFLOPS (first row had none), later row with it.
    mm = [r for r in parsed.rows if r.op == "mm_self_transpose"]
    assert mm[0].tflops is None and mm[0].gems_gbps == 11.0
    assert (mm[1].tflops, mm[1].torch_gbps, mm[1].gems_gbps) == (305.4, 20.0, 21.5)


def test_kwargs_shapes_failed_rows_and_overflowing_values():
    parsed = parse_file(LOGS / "odd" / "columns.log")
    index_put = [r for r in parsed.rows if r.op == "index_put"]
    assert [r.shape for r in index_put] == [
        "{'inp': torch.Size([64, 64]), 'accumulate': False}",
        "{'inp': torch.Size([4096, 64]), 'accumulate': True}",
        "{'inp': torch.Size([8, 8]), 'accumulate': False}",
    ]
    # A latency wider than its 20 columns shifts the line; the token fallback reads it.
    assert index_put[1].torch_ms == pytest.approx(123456789012345.125)
    assert index_put[1].gems_ms == 0.5
    assert index_put[2].status == "FAILED" and index_put[2].gems_ms is None
    assert kinds(parsed) == ["input_error", "pytest_failed"]
    assert parsed.issues[0].op == "gather" and "out of bounds" in parsed.issues[0].message


def test_killed_log_reports_the_cut_row_the_open_table_and_the_missing_end():
    parsed = parse_file(LOGS / "odd" / "truncated.log")
    assert len(parsed.rows) == 4
    assert kinds(parsed) == ["partial_row", "truncated_table", "no_session_end"]
    assert parsed.issues[1].dtype == "torch.float32"
    assert "2 rows kept" in parsed.issues[1].message


def test_markers_are_found_after_progress_text_but_not_in_quoted_source():
    parsed = parse_file(LOGS / "fallback-run" / "run.log")
    names = [(m.name, m.get("dtype")) for _, m in parsed.markers]
    assert names == [
        ("BENCHMARK_DIRECT_NO_CUDAGRAPH", "torch.float16"),
        ("AUTOTUNE_REPLAY_FALLBACK", "torch.float32"),
        ("BENCHMARK_DIRECT_NO_CUDAGRAPH", "torch.bfloat16"),
        ("compile_warmup_no_evict", None),
    ]
    first = parsed.markers[0][1]
    assert first.get("shape") == "[torch.Size([64, 64])]" and first.get("side") == "gems"


def test_ansi_codes_and_carriage_returns_do_not_break_rows():
    rows = [{"shape": "[torch.Size([64, 64])]", "torch_ms": 0.01, "gems_ms": 0.02}]
    text = (SESSION_START.format(n=1) + "\x1b[32m" + table_text("abs", "torch.float16", rows)
            + "\x1b[0m" + session_end(1)).replace("\n", "\r\n")
    parsed = parse_log(text)
    assert [(r.op, r.shape, r.gems_ms) for r in parsed.rows] == [
        ("abs", "[torch.Size([64, 64])]", 0.02)]
    assert parsed.issues == []


def test_lines_that_break_a_table_are_reported_and_the_table_goes_on():
    rows = [{"shape": f"[torch.Size([{n}])]", "torch_ms": 0.01, "gems_ms": 0.02}
            for n in (1, 2)]
    table = table_text("abs", "torch.float16", rows).splitlines(keepends=True)
    table.insert(4, "UserWarning: something on stderr\n")
    table.insert(5, "SUCCESS   garbage\n")
    parsed = parse_log("".join(table) + session_end(1))
    assert len(parsed.rows) == 2
    assert kinds(parsed) == ["stray_line", "unreadable_row"]


def test_a_header_without_rows_is_reported():
    text = ("\nOperator: abs  Performance Test (dtype=torch.float16, mode=kernel,level=core)\n"
            "\nOperator: abs  Performance Test (dtype=torch.float32, mode=kernel,level=core)\n"
            "Status   Size Detail\n---\n\n" + session_end(1))
    parsed = parse_log(text)
    assert parsed.rows == []
    assert kinds(parsed) == ["empty_table", "empty_table"]


@pytest.mark.parametrize("line, cells", [
    ("SUCCESS" + " " * 3 + "%20s%20s%20s" % ("0.1", "0.2", "0.5") + " " * 10 + "N/A", 3),
    ("SUCCESS 0.1 0.2 0.5 N/A", 3),
    ("SUCCESS" + " " * 3 + "%20s%20s%20s%20s" % ("0.1", "0.2", "0.5", "1.0") + " " * 10
     + "[1, 2]", 4),
])
def test_a_shape_that_reads_like_a_value_stays_the_shape(line, cells):
    row = parse_row(line, "op", "dt", "kernel", "core", 1)
    assert row is not None
    assert row.shape == ("N/A" if cells == 3 else "[1, 2]")
    assert row.speedup == 0.5
    assert row.tflops == (1.0 if cells == 4 else None)

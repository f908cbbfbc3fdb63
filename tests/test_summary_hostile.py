"""The log parser and summary against hostile input: random and adversarial text,
catastrophic-backtracking lines, FIFOs, endless files, lying tables, binary state."""

import os
import re
import threading
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from summary_logwriter import identity, session_end, table_text, write_run
from zlbench.summary.aggregate import aggregate
from zlbench.runlog import ANSI_RE, parse_log
from zlbench.summary.rows import summarize

# Pieces of real FlagGems and pytest output, and of lines built to make a regex backtrack.
FRAGMENTS = [
    "Operator: abs  Performance Test (dtype=torch.float16, mode=kernel,level=core)",
    "Status       Torch Latency (ms)    Gems Latency (ms)         Gems Speedup          Size Detail",
    "-" * 40, "SUCCESS ", "FAILED ", "1.004192", "N/A", "inf", "-nan", "1e400", " " * 10,
    "[torch.Size([64, 64])]", "= ", " =", "in 1s ", "passed", "FAILED: Operator=a dtype=b err=<<<",
    ">>>", "BENCHMARK_DIRECT_NO_CUDAGRAPH", " op=", 'shape="[1', '\\"', "\\x", "PREFLIGHT_FAILED",
    "compile_x_no_evict", "FAILED benchmark/test_abs.py::test_abs - ", "\x1b[31m", "\x1b[",
    "\r", "\n", "\t", ".", "F", "\x00", "\ufffd", "=" * 30,
]
texts = st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=20)),
                 max_size=60).map("".join)


def _source_lines(text):
    if "\x1b" in text:
        text = ANSI_RE.sub("", text)
    return text.split("\n")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts)
def test_parser_never_raises_and_every_row_has_its_source_line(text):
    parsed = parse_log(text, "x.log")
    lines = _source_lines(text)
    for row in parsed.rows:
        assert 1 <= row.line <= len(lines)
        assert lines[row.line - 1].rstrip("\r") == row.text
        assert row.text.startswith(row.status)
    for issue in parsed.issues:
        assert issue.line is None or 1 <= issue.line <= max(len(lines), 1)


def _cpu_seconds(text):
    best = None
    for _ in range(3):
        start = time.process_time()
        parse_log(text, "x.log")
        spent = time.process_time() - start
        best = spent if best is None else min(best, spent)
    return max(best, 1e-4)


def _grows_linearly(make):
    """CPU time of 4x the input over 1x: about 4 when linear, about 16 when quadratic.
    process_time, not wall clock: other processes on a loaded machine do not count."""
    small, large = make(25_000), make(100_000)
    ratio = _cpu_seconds(large) / _cpu_seconds(small)
    assert ratio < 9, f"parse time grew {ratio:.1f}x for 4x the input"


@pytest.mark.parametrize("line", [
    "= " + "in 1s ",                           # pytest's closing line, never closed
    "FAILED: Operator=a dtype=b err=<<<",      # FlagGems' input error, never closed
    "SUCCESS " + "1.0 " * 3,                  # a row that never reaches its shape
    "BENCHMARK_DIRECT_NO_CUDAGRAPH op=" + '"',  # a marker with an open quote
    "Operator: a  Performance Test (dtype=",
])
def test_adversarial_lines_parse_in_linear_time(line):
    _grows_linearly(lambda size: (line * (size // len(line) + 1))[:size] + "\n")


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(FRAGMENTS), min_size=1, max_size=8).map("".join))
def test_any_repeated_fragment_parses_in_linear_time(piece):
    _grows_linearly(lambda size: (piece * (size // len(piece) + 1))[:size])


def test_300kb_of_in_1s_is_read_at_once():
    start = time.process_time()
    parsed = parse_log("= " + "in 1s " * 50_000 + "\n")
    assert time.process_time() - start < 5     # was 172 s
    assert parsed.session_end is None


def _good_table(op="abs", rows=None):
    rows = rows or [dict(shape="[torch.Size([64])]", torch_ms=0.02, gems_ms=0.01)]
    return table_text(op, "torch.float16", rows)


def _summary_of(tmp_path, log, op="abs"):
    write_run(tmp_path / "b" / op, log + "." + session_end(1), identity(op=op))
    return summarize(tmp_path / "b")


def test_a_table_naming_another_operator_is_not_counted_as_it(tmp_path):
    summary = _summary_of(tmp_path, _good_table("abs") + _good_table("mm") +
                          _good_table("abs_backward"))
    problems = {r.op: r.problem for r in summary.rows}
    assert problems["abs"] == "" and problems["abs_backward"] == ""
    assert problems["mm"] == "table names operator mm, but the run measured abs"
    assert [i.kind for i in summary.issues] == ["foreign_operator"]
    assert [a.group for a in aggregate(summary.rows, "op") if a.count] == ["abs", "abs_backward"]


def test_duplicate_keys_are_flagged(tmp_path):
    summary = _summary_of(tmp_path, _good_table() + _good_table())
    [dup] = summary.issues
    assert dup.kind == "duplicate_key" and "first at line" in dup.message


@pytest.mark.parametrize("row, why", [
    (dict(torch_ms=0.02, gems_ms=0.0, speedup=1.0), "gems latency 0 ms"),
    (dict(torch_ms=-0.02, gems_ms=0.01, speedup=2.0), "torch latency -0.02 ms"),
    (dict(torch_ms=float("inf"), gems_ms=0.01, speedup=2.0), "torch latency inf ms"),
    (dict(torch_ms=0.02, gems_ms=0.01, speedup=float("nan")), "speedup nan"),
    (dict(torch_ms=0.02, gems_ms=0.01, speedup=5.0), "speedup 5 contradicts the latencies"),
])
def test_impossible_numbers_are_issues_and_not_counted(tmp_path, row, why):
    summary = _summary_of(tmp_path, _good_table(rows=[dict(shape="[1]", **row)]))
    [r] = summary.rows
    assert why in r.problem
    assert [i.kind for i in summary.issues] == ["bad_values"]
    [agg] = aggregate(summary.rows, "op")
    assert agg.count == 0 and agg.excluded == 1


def test_rounded_but_honest_speedups_pass(tmp_path):
    # 0.001234 / 0.000987 = 1.2502...: printed with 6 and 3 decimals it must still agree.
    rows = [dict(shape="[1]", torch_ms=0.001234, gems_ms=0.000987),
            dict(shape="[2]", torch_ms=3.0, gems_ms=1.0, speedup=2.9996)]
    summary = _summary_of(tmp_path, _good_table(rows=rows))
    assert [r.problem for r in summary.rows] == ["", ""] and summary.issues == []


def _finishes(fn, seconds=20):
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("v", fn()), daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), "summary blocked"
    return out["v"]


def test_a_fifo_named_run_log_does_not_block(tmp_path):
    run = tmp_path / "b" / "abs"
    run.mkdir(parents=True)
    os.mkfifo(run / "run.log")
    os.mkfifo(run / "run_identity.json")
    summary = _finishes(lambda: summarize(tmp_path / "b"))
    kinds = {i.kind: i.message for i in summary.issues}
    assert "is a FIFO" in kinds["unreadable_log"] and "is a FIFO" in kinds["bad_identity"]


def test_run_log_linked_to_dev_zero_is_refused(tmp_path):
    run = tmp_path / "b" / "abs"
    run.mkdir(parents=True)
    (run / "run.log").symlink_to("/dev/zero")
    summary = _finishes(lambda: summarize(tmp_path / "b"))
    assert "is a device" in {i.kind: i.message for i in summary.issues}["unreadable_log"]


def test_binary_ops_status_is_an_issue_not_a_traceback(tmp_path):
    write_run(tmp_path / "b" / "abs", _good_table() + "." + session_end(1), identity(op="abs"))
    (tmp_path / "b" / "ops_status.csv").write_bytes(b"\xff\xfe\x00garbage\x00" * 100)
    summary = summarize(tmp_path / "b")
    assert "not text" in {i.kind: i.message for i in summary.issues}["bad_ops_status"]


def test_ab_of_a_run_with_itself_warns_that_it_is_no_noise_floor(tmp_path):
    import subprocess
    import sys

    write_run(tmp_path / "b" / "abs", _good_table() + "." + session_end(1), identity(op="abs"))
    link = tmp_path / "same"
    link.symlink_to(tmp_path / "b")
    for a, b in ((tmp_path / "b", tmp_path / "b"), (tmp_path / "b", link)):
        proc = subprocess.run([sys.executable, "-m", "zlbench", "summary", "--ab", str(a), str(b)],
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        assert "WARNING: A and B are the same run" in proc.stderr
        assert "not a noise floor" in proc.stdout and "these ranges are the noise floor" not in proc.stdout

"""`zlbench report`: the page of a real sample batch, opened in headless Chromium and
read as a person reads it (sorting, filtering, plots), plus the page's data for failures
and for a 30,000-row screen."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
from conftest import zlbench
from report_browser import browser_missing, open_page
from summary_logwriter import scale_gems
from zlbench.markers import DEVICE_THROTTLED, format_marker

pytest.importorskip("jinja2")
pytest.importorskip("matplotlib")


def _browser():
    missing = browser_missing()
    if missing:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must run the browser tests: {missing}")
        pytest.skip(missing)


def _artifacts(tmp_path) -> Path:
    """Where screenshots go: $ZL_TEST_ARTIFACTS (kept by CI) or the test's tmp dir."""
    path = Path(os.environ.get("ZL_TEST_ARTIFACTS") or tmp_path)
    path.mkdir(parents=True, exist_ok=True)
    return path


def _numbers(texts):
    return [float(t) for t in texts if t]


def _blob(html: str, table_id: str) -> dict:
    m = re.search(r'id="%s">.*?<script type="application/json" class="zl-data">(.*?)</script>'
                  % table_id, html, re.S)
    return json.loads(m[1])


def test_batch_report_in_a_browser(sample_screen, tmp_path):
    _browser()
    html = tmp_path / "report.html"
    proc = zlbench("report", sample_screen, "-o", html, check=True)
    assert f"wrote {html}" in proc.stderr
    text = html.read_text()
    # Self-contained: nothing is fetched from anywhere.
    assert not re.search(r'<(script|link|img)[^>]+(src|href)=', text)
    rows = _blob(text, "rows-table")["rows"]
    assert {r[0] for r in rows} == {"abs", "add", "mm", "softmax"}
    with open_page(html) as page:
        total = page.shown_rows("rows-table")
        assert total == len(rows) > 8
        # What the headline says a person can check against the batch.
        cards = page.driver.find_element("id", "headline").text
        assert "4\noperators ok" in cards and f"{total} of {total}\nrows measured" in cards

        # Click "gems ms": sorted descending (numbers first), click again: ascending.
        page.click_header("rows-table", "gems_ms")
        down = _numbers(page.column("rows-table", "gems_ms"))
        assert down == sorted(down, reverse=True) and len(down) == min(total, 100)
        page.click_header("rows-table", "gems_ms")
        up = _numbers(page.column("rows-table", "gems_ms"))
        assert up == sorted(up) and up[0] == min(r[5] for r in rows)
        page.click_header("rows-table", "op")
        ops = page.column("rows-table", "op")
        assert ops == sorted(ops)

        # Typing in the filter narrows the rows to what matches.
        page.type_filter("rows-table", "softmax")
        shown = page.shown_rows("rows-table")
        assert 0 < shown < total and shown == sum(1 for r in rows if r[0] == "softmax")
        assert set(page.column("rows-table", "op")) == {"softmax"}
        page.type_filter("rows-table", "family:blas")
        assert set(page.column("rows-table", "op")) == {"mm"}

        # The plot is drawn: an inline SVG with paths and a real size.
        sizes = page.plot_sizes()
        assert sizes and all(w > 300 and h > 100 for w, h in sizes)
        labels = page.driver.find_element("id", "distribution").text
        assert "Families: Benchmark classes scanned in" in labels
        page.type_filter("rows-table", "")
        page.screenshot(_artifacts(tmp_path) / "report-batch.png")
    assert (_artifacts(tmp_path) / "report-batch.png").stat().st_size > 20_000


def test_ab_report_in_a_browser(sample_screen, tmp_path):
    _browser()
    # A: the session's screen without its DEVICE_THROTTLED lines (a loaded VM marks some
    # rows at random), so that every row has its verdict; B: the same with mm made twice
    # as slow, so its rows must come first.
    a = tmp_path / "a"
    shutil.copytree(sample_screen, a)
    for log in a.glob("*/run.log"):
        log.write_text("".join(ln for ln in log.read_text().splitlines(True) if not ln.startswith("DEVICE_THROTTLED")))
    b = tmp_path / "b"
    shutil.copytree(a, b)
    log = b / "mm" / "run.log"
    log.write_text(scale_gems(log.read_text(), 2.0))
    # ... and one abs row of B measured throttled, on purpose: that row gets no verdict.
    first = json.loads((b / "abs" / "row_stats.jsonl").read_text().splitlines()[0])
    slowed = (first["dtype"], first["shape"])
    marker = format_marker(DEVICE_THROTTLED, op="abs", dtype=slowed[0], shape=slowed[1], side="gems",
                           why="host_slow")
    (b / "abs" / "run.log").write_text(marker + "\n" + (b / "abs" / "run.log").read_text())
    html = tmp_path / "ab.html"
    zlbench("report", a, "--ab", b, "-o", html, check=True)
    blob = _blob(html.read_text(), "rows-table")
    keys = [c["key"] for c in blob["columns"]]
    col = {k: i for i, k in enumerate(keys)}
    assert "band" not in keys            # one classification: the verdict
    verdicts = {}
    for r in blob["rows"]:
        verdicts[r[col["verdict"]]] = verdicts.get(r[col["verdict"]], 0) + 1
    # mm's rows are SLOWER, the throttled abs row UNKNOWN, every other row SAME.
    for r in blob["rows"]:
        throttled = r[col["why"]].startswith("measured throttled")
        assert not throttled or r[col["op"]] == "abs", r
        expected = "UNKNOWN" if throttled else ("SLOWER" if r[col["op"]] == "mm" else "SAME")
        assert r[col["verdict"]] == expected, r
    n_mm = sum(1 for r in blob["rows"] if r[col["op"]] == "mm")
    n_slowed = verdicts.get("UNKNOWN", 0)
    assert n_mm and n_slowed >= 1
    assert verdicts == {"SLOWER": n_mm, "UNKNOWN": n_slowed, "SAME": len(blob["rows"]) - n_mm - n_slowed}
    with open_page(html) as page:
        top = page.column("rows-table", "op")
        n_mm = sum(1 for r in blob["rows"] if r[col["op"]] == "mm")
        assert top[:n_mm] == ["mm"] * n_mm and set(top[n_mm:]) <= {"abs", "add", "softmax"}
        gains = page.column("rows-table", "gain")
        assert all(g == "-50.0%" for g in gains[:n_mm])
        assert all(g == "+0.0%" for g in gains[n_mm:])
        # The cards count exactly the table's verdicts, throttled UNKNOWN apart.
        cards = page.driver.find_element("id", "headline").text
        throttled = sum(1 for r in blob["rows"] if r[col["why"]].startswith("measured throttled"))
        assert f"{verdicts.get('SLOWER', 0)}\nverdict SLOWER" in cards
        assert f"{verdicts.get('SAME', 0)}\nverdict SAME" in cards
        assert f"{throttled}\nverdict UNKNOWN (measured throttled)" in cards
        assert "band" not in cards and "source: the default" in cards
        # Ranges per operator: the same verdict counts, mm's SLOWER rows first.
        assert int(page.column("ranges-table", "slower")[0]) == verdicts.get("SLOWER", 0)
        assert verdicts.get("SLOWER")
        assert page.column("ranges-table", "op")[0] == "mm"
        assert page.plot_sizes()
        page.screenshot(_artifacts(tmp_path) / "report-ab.png")


@pytest.mark.parametrize("sharded", [False, True])
def test_failures_show_the_tail_of_their_log(sample_screen, tmp_path, sharded):
    from zlbench.report.model import batch_page
    from zlbench.summary import summarize

    top = tmp_path / "screen"
    # A sharded screen (batch --shard K/N) keeps one batch dir per shard below DIR.
    batch = top / "shard-0-of-1" if sharded else top
    shutil.copytree(sample_screen, batch)
    status = (batch / "ops_status.csv").read_text().splitlines()
    status = [re.sub(r"^add,ok,", "add,crashed,", line) for line in status]
    (batch / "ops_status.csv").write_text("\n".join(status) + "\n")
    (batch / "logs" / "add" / "zz-a2-l0.log").write_text(
        "".join(f"line {i}\n" for i in range(100)) + "RuntimeError: CUDA error: boom\n")
    page = batch_page(summarize(top))
    (failure,) = page.failures
    assert failure.op == "add" and failure.status == "crashed"
    assert failure.tail.endswith("RuntimeError: CUDA error: boom") and "line 61" in failure.tail
    assert "line 60" not in failure.tail
    assert failure.log == ("shard-0-of-1/" if sharded else "") + "logs/add/zz-a2-l0.log"
    assert ("operators crashed", "1", "bad") in page.headline
    assert ("operators ok", "3", "ok") in page.headline
    assert len(page.table.rows) == len(summarize(sample_screen).rows)


def test_an_all_failed_batch_gets_its_page_and_an_unfinished_one_says_so(tmp_path):
    from zlbench import rundir
    from zlbench.report.model import batch_page
    from zlbench.summary import summarize

    root = tmp_path / "batch"
    root.mkdir()
    rundir.write_plan(root, {"ops": [{"op": op} for op in ("abs", "mm", "softmax")]})
    rundir.StatusFile(root).update([rundir.status_row("abs", "failed", attempts=2, reason="boom"),
                                    rundir.status_row("mm", "crashed", attempts=1, reason="SIGSEGV")])
    (root / "logs" / "abs").mkdir(parents=True)
    (root / "logs" / "abs" / "x-a2-l0.log").write_text("ImportError: no module named x\n")
    page = batch_page(summarize(root))
    assert [(f.op, f.status) for f in page.failures] == [("abs", "failed"), ("mm", "crashed")]
    assert page.failures[0].tail.endswith("ImportError: no module named x")
    assert ("operators not run", "1", "bad") in page.headline
    assert any(w.startswith("UNFINISHED: 1 operators not run: softmax") for w in page.warnings)
    assert any("No table rows" in w for w in page.warnings)
    html = tmp_path / "r.html"
    proc = zlbench("report", root, "-o", html, "--history-db", "none")
    assert proc.returncode == 0, proc.stderr
    text = html.read_text()
    assert "Failures (2)" in text and "UNFINISHED: 1 operators not run: softmax" in text


def test_missing_libraries_are_one_line(monkeypatch, tmp_path):
    import importlib.util

    from zlbench.report import ReportUnavailable, require

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "matplotlib" else real(name, *a))
    with pytest.raises(ReportUnavailable) as info:
        require()
    assert str(info.value) == ("zlbench report needs matplotlib, which is not installed: "
                               "pip install 'zlbench[report]'")


def test_bad_input_is_one_line(tmp_path):
    proc = zlbench("report", tmp_path / "nope", "-o", tmp_path / "r.html")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "does not exist" in proc.stderr


def test_an_ab_page_with_a_recheck_shows_the_verdicts_the_recheck_left(tmp_path):
    from test_summary_actionable import _batch

    a = _batch(tmp_path / "a", lambda op, d, s: 0.1)
    # B: abs's two rows 30% slower, sum's 4096 row 10%; the re-check reads abs alone slower.
    b = _batch(tmp_path / "b", lambda op, d, s: 0.13 if op == "abs" else (0.11 if "4096" in s else 0.1))
    a2 = _batch(tmp_path / "a2", lambda op, d, s: 0.1)
    b2 = _batch(tmp_path / "b2", lambda op, d, s: 0.13 if op == "abs" else 0.1)
    html = tmp_path / "ab.html"
    zlbench("report", a, "--ab", b, "--recheck", a2, b2, "-o", html, check=True)
    text = html.read_text()
    blob = _blob(text, "rows-table")
    col = {c["key"]: i for i, c in enumerate(blob["columns"])}
    got = {(r[col["op"]], r[col["shape"]]): (r[col["verdict"]], r[col["why"]]) for r in blob["rows"]}
    assert got[("abs", "64×64")][0] == got[("abs", "4096×4096")][0] == "SLOWER"
    verdict, why = got[("sum", "4096×4096")]
    assert verdict == "SAME" and why.startswith("SLOWER +10.00% not reproduced in fresh processes")
    assert "2 reproduced, 1 not reproduced (those 1 now SAME)" in text
    alone = zlbench("report", a, "--recheck", a2, b2, "-o", tmp_path / "r.html")
    assert alone.returncode == 2 and "--recheck need --ab" in alone.stderr

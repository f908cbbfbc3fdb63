"""`zlbench history`: steps over nights (pure), and real SQLite files filled from the
session's sample batch and copies of it with one operator made slower."""

from __future__ import annotations

import json
import re
import shutil
import sqlite3

import pytest
from conftest import zlbench
from summary_logwriter import night_copy

from zlbench.history.steps import find_steps

# -- step detection --------------------------------------------------------------------

def test_a_clear_step_is_found_where_it_happened():
    quiet = [1.00, 1.01, 0.99, 1.00, 1.02, 0.98, 1.00]
    (step,) = find_steps(quiet + [1.30, 1.31, 1.29, 1.30])
    assert step.index == 7 and step.nights_after == 4
    assert step.change == pytest.approx(0.30, abs=0.01)


def test_noise_below_the_threshold_is_no_step():
    assert find_steps([1.00, 1.03, 0.98, 1.02, 0.97, 1.01, 1.03, 0.99]) == []


def test_one_night_away_and_back_is_an_outlier_not_a_step():
    assert find_steps([1.0, 1.01, 0.99, 1.0, 1.6, 1.0, 1.01, 0.99]) == []


def test_a_step_on_the_latest_night_is_reported():
    (step,) = find_steps([1.0, 1.01, 0.99, 1.0, 1.0, 1.25])
    assert (step.index, step.nights_after) == (5, 1) and step.change == pytest.approx(0.25)


def test_two_nights_step_when_beyond_the_threshold():
    assert [s.index for s in find_steps([2.0, 3.0])] == [1]
    assert find_steps([2.0, 2.08]) == []             # 4% < 5%
    assert find_steps([2.0, 2.08], threshold=0.02)   # but not < 2%


def test_scatter_inside_the_pieces_raises_the_bar():
    # +-15% scatter on both sides: a 10% shift of the level is not beyond it.
    noisy = [1.0, 1.15, 0.85, 1.0, 1.15, 0.85, 1.1, 1.25, 0.95, 1.1, 1.25, 0.95]
    assert find_steps(noisy) == []


def test_measured_spread_raises_the_bar():
    series = [1.0, 1.0, 1.0, 1.12, 1.12, 1.12]
    assert find_steps(series) and find_steps(series, spread=0.2) == []


def test_nights_without_the_row_are_skipped():
    (step,) = find_steps([1.0, None, 1.0, 2.0, None, 2.0])
    assert step.index == 3 and step.change == pytest.approx(1.0)


# -- the database ----------------------------------------------------------------------

def _screens(db) -> int:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT COUNT(*) FROM screens").fetchone()[0]


def test_two_nights_a_step_and_the_same_night_counted_once(nights, tmp_path):
    one, two = nights
    db = tmp_path / "history.sqlite"
    first = zlbench("history", "add", one, "--db", db, check=True)
    assert "recorded night '2026-11-29 02:00 night1'" in first.stdout
    again = zlbench("history", "add", one, "--db", db, check=True)
    assert "already recorded" in again.stdout and _screens(db) == 1
    # A copy of a recorded screen is the same screen.
    copy = tmp_path / "copy-of-night1"
    shutil.copytree(one, copy)
    assert "already recorded" in zlbench("history", "add", copy, "--db", db, check=True).stdout
    zlbench("history", "add", two, "--db", db, check=True)
    assert _screens(db) == 2

    shown = zlbench("history", "show", "--db", db, check=True).stdout
    stepped = [line.split()[0] for line in shown.splitlines()
               if re.match(r"\s+\S+\s+\S+\s+\d+\s+\d+\s+[+-]", line)]
    assert stepped == ["mm"], shown
    mm_rows = len([ln for ln in (one / "mm" / "run.log").read_text().splitlines()
                   if ln.startswith("SUCCESS ")])
    assert re.search(rf"\bmm\s+Blas\s+{mm_rows}\s+{mm_rows}\s+.*night 2: {mm_rows} rows, median "
                     r"\+50\.0%", shown), shown
    assert "1 operators stepped beyond the noise (threshold 5%); 3 did not" in shown

    per_row = zlbench("history", "show", "--db", db, "--op", "mm", check=True).stdout
    assert per_row.count("STEP night 2: +50.0%") == mm_rows
    # A misspelt operator is a usage error with the near names, not an empty answer.
    typo = zlbench("history", "show", "--db", db, "--op", "softmx")
    assert typo.returncode == 2 and "--op softmx (did you mean softmax?)" in typo.stderr, typo.stderr

    # The gate: mm stepped slower on the latest night; exit 1 naming each row.
    gate = zlbench("history", "show", "--db", db, "--fail-on-step")
    assert gate.returncode == 1, gate.stdout + gate.stderr
    assert f"GATE: {mm_rows} rows stepped slower on the latest night" in gate.stderr
    assert gate.stderr.count("  mm torch.float32 ") == mm_rows and "+50.0%" in gate.stderr
    assert zlbench("history", "show", "--db", db, "--op", "abs", "--fail-on-step").returncode == 0


def test_a_step_that_is_no_longer_the_latest_night_does_not_trip_the_gate(nights, sample_screen,
                                                                          tmp_path):
    one, two = nights
    three = night_copy(sample_screen, tmp_path, "night3", "2026-12-01T02:00:00+0000", slower=("mm", 1.51))
    db = tmp_path / "history.sqlite"
    for night in (one, two, three):
        zlbench("history", "add", night, "--db", db, check=True)
    gate = zlbench("history", "show", "--db", db, "--fail-on-step")
    assert gate.returncode == 0 and "GATE: passed" in gate.stderr, gate.stdout + gate.stderr


def test_screens_of_another_caliber_are_another_series(nights, sample_screen, tmp_path):
    from zlbench.history.store import calibers, open_db

    one, two = nights
    other = night_copy(sample_screen, tmp_path, "comprehensive", "2026-12-01T02:00:00+0000",
                   slower=("abs", 3.0), level="comprehensive")
    db = tmp_path / "history.sqlite"
    for night in (one, two, other):
        zlbench("history", "add", night, "--db", db, check=True)
    cals = calibers(open_db(str(db)))
    assert sorted(len(c.nights) for c in cals) == [1, 2]
    core = next(c for c in cals if c.fields["level"] == "core")
    assert [n.label.split()[-1] for n in core.nights] == ["night1", "night2"]
    shown = zlbench("history", "show", "--db", db, check=True).stdout
    assert shown.count("caliber ") == 2 and "level=comprehensive" in shown
    # abs tripled in the other caliber only: no line joins it to the core nights.
    assert "one night so far" in shown
    assert not re.search(r"^\s+abs\s", shown, re.M)


def test_report_shows_the_nights_of_its_caliber(nights, tmp_path):
    one, two = nights
    db = tmp_path / "history.sqlite"
    for night in (one, two):
        zlbench("history", "add", night, "--db", db, check=True)
    html = tmp_path / "report.html"
    zlbench("report", two, "-o", html, "--history-db", db, check=True)
    text = html.read_text()
    section = text[text.index('<section id="history">'):text.index('<section id="rows">')]
    assert "2 nights of caliber" in section and "This screen is night &#39;2026-11-30 02:00 night2" in section
    assert section.count("<svg") == 1     # one picture: the one operator that stepped
    blob = json.loads(re.search(r'class="zl-data">(.*?)</script>', section, re.S)[1])
    assert {r[0] for r in blob["rows"]} == {"mm"}
    assert all(r[7] == pytest.approx(0.5, abs=1e-4) for r in blob["rows"])
    assert {r[1] for r in blob["rows"]} == {"Blas"}  # the family, as recorded by history add
    # Without a database (or with 'none') the page has no history section.
    zlbench("report", two, "-o", html, "--history-db", "none", check=True)
    assert 'id="history"' not in html.read_text()


def test_the_database_path_is_a_knob(nights, tmp_path):
    one, _ = nights
    db = tmp_path / "from-env.sqlite"
    zlbench("history", "add", one, env={"ZL_HISTORY_DB": str(db)}, check=True)
    assert _screens(db) == 1
    home = tmp_path / "data"
    zlbench("history", "add", one, env={"XDG_DATA_HOME": str(home)}, check=True)
    assert _screens(home / "zlbench" / "history.sqlite") == 1


def test_unfinished_screens_are_refused(sample_screen, tmp_path):
    out = tmp_path / "unfinished"
    shutil.copytree(sample_screen, out)
    status = (out / "ops_status.csv").read_text().splitlines()
    kept = [line for line in status if not line.startswith("mm,")]
    (out / "ops_status.csv").write_text("\n".join(kept) + "\n")
    proc = zlbench("history", "add", out, "--db", tmp_path / "h.sqlite")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "not a finished screen (1 operators not run" in proc.stderr
    assert "zlbench batch --resume --out" in proc.stderr


def test_show_on_a_missing_database_says_what_to_do_and_creates_nothing(tmp_path):
    proc = zlbench("history", "show", "--db", tmp_path / "empty.sqlite")
    assert proc.returncode == 2 and "zlbench history add DIR" in proc.stderr
    assert "no history database at" in proc.stderr
    assert not (tmp_path / "empty.sqlite").exists()
    nested = tmp_path / "no" / "such" / "dir" / "h.sqlite"
    assert zlbench("history", "show", "--db", nested).returncode == 2
    assert not (tmp_path / "no").exists()

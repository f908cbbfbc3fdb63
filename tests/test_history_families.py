"""`zlbench history`: each screen's operator families (FlagGems' kind, else the class
scan, else the inventory) recorded when it is added, shown and filtered by `history show`
and the report's nights section; a schema-1 database migrated in place by a writer and
read unchanged by readers."""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
from pathlib import Path

from conftest import zlbench
from summary_logwriter import night_copy

FIXTURES = Path(__file__).parent / "fixtures"

# Schema 1, as zlbench wrote it before families were recorded (verbatim).
SCHEMA_1 = """
CREATE TABLE IF NOT EXISTS screens (
    id          INTEGER PRIMARY KEY,
    content_key TEXT NOT NULL UNIQUE,
    path        TEXT NOT NULL,
    started     TEXT NOT NULL,
    added       TEXT NOT NULL,
    label       TEXT NOT NULL,
    versions    TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS calibers (
    id     INTEGER PRIMARY KEY,
    key    TEXT NOT NULL UNIQUE,
    fields TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS rows (
    screen  INTEGER NOT NULL REFERENCES screens(id),
    caliber INTEGER NOT NULL REFERENCES calibers(id),
    op      TEXT NOT NULL,
    dtype   TEXT NOT NULL,
    shape   TEXT NOT NULL,
    status  TEXT NOT NULL,
    timer   TEXT NOT NULL,
    gems_ms REAL,
    torch_ms REAL,
    spread  REAL
);
CREATE INDEX IF NOT EXISTS rows_by_series ON rows (caliber, op, dtype, shape);
"""


def _schema_1_db(path, *screens):
    """A database as schema 1 wrote it: the same rows `history add` recorded then."""
    from zlbench.history import store
    from zlbench.summary.rows import summarize

    conn = sqlite3.connect(path)
    conn.executescript(SCHEMA_1)
    conn.execute("PRAGMA user_version = 1")
    for screen in screens:
        summary = summarize(str(screen))
        content, records, calibers = store._records(summary)
        started = store._started(summary.runs, summary.root)
        label = f"{started[:16].replace('T', ' ')} {summary.root.name}"
        store._insert(conn, summary, content, started, label, records, calibers)
    conn.commit()
    conn.close()


def _digest(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _query(db, sql):
    with sqlite3.connect(db) as conn:
        return conn.execute(sql).fetchall()


def _listed(shown: str):
    """(operator, family) of each line of show's operator list."""
    return [tuple(line.split()[:2]) for line in shown.splitlines()
            if re.match(r"\s+\S+\s+\S+\s+\d+\s+\d+\s+([+-]|not measured)", line)]


def test_a_schema_1_database_is_read_as_it_is_and_migrated_in_place_by_a_writer(nights, tmp_path):
    one, two = nights
    db = tmp_path / "old.sqlite"
    _schema_1_db(db, one, two)
    before = _digest(db)

    # Readers: show, the report's section and `noise --list` read it, say no families are recorded, and
    # leave the file as it was (no table added, schema version unchanged).
    shown = zlbench("history", "show", "--db", db, "--all", check=True).stdout
    assert "families: none recorded for these operators" in shown
    assert ("mm", "-") in _listed(shown)
    family = zlbench("history", "show", "--db", db, "--family", "Blas")
    assert family.returncode == 2 and "--family Blas: no families recorded in" in family.stderr
    assert "zlbench history add DIR records a screen's" in family.stderr
    html = tmp_path / "r.html"
    zlbench("report", two, "-o", html, "--history-db", db, check=True)
    assert "Families: none recorded in the database" in html.read_text()
    listed = zlbench("noise", "--list", "--db", db)
    assert listed.returncode == 1 and "no noise floor recorded" in listed.stderr
    assert _digest(db) == before
    assert _query(db, "PRAGMA user_version") == [(1,)]

    # A writer migrates it in place: the nights and rows stay, the table is added, and a
    # screen recorded already gets its families when it is added again.
    rows = _query(db, "SELECT COUNT(*) FROM rows")
    again = zlbench("history", "add", one, "--db", db, check=True).stdout
    assert "already recorded as night '2026-11-29 02:00 night1'" in again
    assert "its operators' families recorded now (Benchmark classes scanned in" in again
    assert _query(db, "PRAGMA user_version") == [(2,)]
    assert _query(db, "SELECT COUNT(*) FROM rows") == rows
    assert _query(db, "SELECT COUNT(*) FROM screens") == [(2,)]
    assert _query(db, "SELECT family, origin FROM families WHERE op = 'mm'") == [("Blas", "class scan")]
    # A third add of it changes nothing.
    assert "nothing added to" in zlbench("history", "add", one, "--db", db, check=True).stdout
    shown = zlbench("history", "show", "--db", db, check=True).stdout
    assert _listed(shown) == [("mm", "Blas")], shown
    assert "families: Benchmark classes scanned in" in shown


def test_add_records_kind_where_the_corpus_has_operators_yaml_and_the_newest_night_counts(
        sample_screen, staged_tree, tmp_path):
    from zlbench.history.store import op_families, open_db

    scanned = night_copy(sample_screen, tmp_path, "scanned", "2026-11-29T02:00:00+0000")
    kinds = night_copy(sample_screen, tmp_path, "kinds", "2026-11-30T02:00:00+0000", slower=("mm", 1.5),
                   corpus_root=staged_tree)
    db = tmp_path / "h.sqlite"
    # Added newest first: the family shown is the latest night's, not the last added.
    added = zlbench("history", "add", kinds, "--db", db, check=True).stdout
    assert f"families: kind in {staged_tree / 'conf' / 'operators.yaml'} (2 operators)" in added
    zlbench("history", "add", scanned, "--db", db, check=True)
    by_screen = dict(_query(db, "SELECT s.label, COUNT(*) FROM families f JOIN screens s ON s.id = f.screen "
                                "GROUP BY s.id"))
    assert by_screen == {"2026-11-30 02:00 kinds": 2, "2026-11-29 02:00 scanned": 4}
    fams = op_families(open_db(str(db), readonly=True))
    assert (fams["mm"].name, fams["mm"].origin) == ("BLAS", "kind")
    assert (fams["abs"].name, fams["abs"].origin) == ("Math", "kind")
    # add and softmax are not in this operators.yaml: the older night's class scan stands.
    assert fams["add"].origin == "class scan"

    shown = zlbench("history", "show", "--db", db, "--all", check=True).stdout
    assert ("mm", "BLAS") in _listed(shown) and ("abs", "Math") in _listed(shown)
    assert "kind in" in shown and "(2 operators)" in shown
    per_op = zlbench("history", "show", "--db", db, "--op", "mm", check=True).stdout
    assert "mm (family BLAS, kind): gems ms per night" in per_op

    # The report's nights section: the family column and where the names came from.
    html = tmp_path / "r.html"
    zlbench("report", kinds, "-o", html, "--history-db", db, check=True)
    text = html.read_text()
    section = text[text.index('<section id="history">'):text.index('<section id="rows">')]
    assert "Families: kind in" in section
    blob = json.loads(re.search(r'class="zl-data">(.*?)</script>', section, re.S)[1])
    assert {(r[0], r[1]) for r in blob["rows"]} == {("mm", "BLAS")}
    assert "mm (BLAS)" in section  # the picture's title


def test_show_filters_by_family_with_did_you_mean(nights, tmp_path):
    one, two = nights
    db = tmp_path / "h.sqlite"
    for night in (one, two):
        zlbench("history", "add", night, "--db", db, check=True)
    fams = dict(_query(db, "SELECT op, family FROM families"))
    other = fams["abs"]
    assert fams["mm"] == "Blas" and other != "Blas"

    blas = zlbench("history", "show", "--db", db, "--family", "Blas", "--all", check=True).stdout
    assert _listed(blas) == [("mm", "Blas")]
    assert "1 operators of family Blas stepped beyond the noise" in blas
    theirs = zlbench("history", "show", "--db", db, "--family", other, "--all", check=True).stdout
    assert ("abs", other) in _listed(theirs) and "mm" not in dict(_listed(theirs))
    assert f"0 operators of family {other} stepped" in theirs

    # Misspelt (or in the wrong case): exit 2, the near names, every family listed.
    typo = zlbench("history", "show", "--db", db, "--family", "blas")
    assert typo.returncode == 2 and "--family blas (did you mean Blas?)" in typo.stderr, typo.stderr
    none = zlbench("history", "show", "--db", db, "--family", "Quantum")
    assert none.returncode == 2 and "--family Quantum: no operator of it" in none.stderr
    assert "Blas" in none.stderr and "did you mean" not in none.stderr
    wrong = zlbench("history", "show", "--db", db, "--op", "mm", "--family", other)
    assert wrong.returncode == 2 and f"--op mm is in family Blas, not {other}" in wrong.stderr

    # The gate looks at the family's operators only: mm stepped, abs's family did not.
    assert zlbench("history", "show", "--db", db, "--family", other, "--fail-on-step").returncode == 0
    assert zlbench("history", "show", "--db", db, "--family", "Blas", "--fail-on-step").returncode == 1

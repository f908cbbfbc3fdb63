"""The history database: finished screens and their rows in one SQLite file.

A screen is recorded once: its content key is a hash of every row it holds (with each
row's caliber), so adding the same screen twice, or a copy of it, changes nothing.
Every row is stored under the caliber of the run that measured it, and a series, the
latency of one (op, dtype, shape) over nights, never crosses calibers.

The row's dtype is part of its key, so the DTYPES knob (which a dtype fallback changes
per operator) is left out of the caliber a series is keyed by; every other field that
`summary --ab` compares is in it.

Each screen also records its operators' families, as summary and the report find them
when it is added (FlagGems' ``kind`` where the corpus has conf/operators.yaml, else the
Benchmark class scan, else the inventory), and which of the three said so: the corpus
may be gone or changed by the time the nights are read.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

from zlbench.corpus.families import OTHER, Families
from zlbench.safe_read import missing_reason
from zlbench.summary.caliber import CALIBER_FIELDS, caliber_values
from zlbench.summary.rows import Summary, summary_families
from zlbench.summary.sources import RunLog

# 1: screens, calibers, rows. 2: families (a writer adds the table to a schema-1 file;
# its screens have no families until they are added again).
SCHEMA_VERSION = 2
SCHEMA = """
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
CREATE TABLE IF NOT EXISTS families (
    screen  INTEGER NOT NULL REFERENCES screens(id),
    op      TEXT NOT NULL,
    family  TEXT NOT NULL,
    origin  TEXT NOT NULL,
    source  TEXT NOT NULL,
    PRIMARY KEY (screen, op)
);
"""
# Not part of a series' caliber: the row key carries the dtype.
SERIES_EXCLUDED = {"knobs.DTYPES"}
VERSION_KEYS = ("flag_gems", "triton", "torch")


class HistoryError(Exception):
    """A database or screen that cannot be used; the message says what to do."""


def series_caliber(identity: Optional[dict]) -> Dict[str, str]:
    return {k: v for k, v in caliber_values(identity).items() if k not in SERIES_EXCLUDED}


def caliber_key(fields: Dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:12]


def caliber_label(fields: Dict[str, str]) -> str:
    """The fields people tell calibers apart by (the knobs are in the key, not shown)."""
    main = [f"{label}={fields.get(label, '?')}" for label, _ in CALIBER_FIELDS]
    return " ".join(main)


@dataclass
class Night:
    id: int
    label: str
    started: str
    path: str
    versions: Dict[str, str]


@dataclass
class Caliber:
    id: int
    key: str
    fields: Dict[str, str]
    nights: List[Night] = field(default_factory=list)

    @property
    def label(self) -> str:
        return caliber_label(self.fields)


@dataclass
class Added:
    added: bool
    night: Night
    rows: int
    calibers: List[str]
    # Operators whose family was recorded by this add (for a screen recorded before
    # families were: its families alone).
    families: int = 0


@dataclass(frozen=True)
class Family:
    name: str
    origin: str  # "kind", "class scan" or "inventory"
    source: str  # where exactly: the operators.yaml, the scanned corpus, the inventory file


def open_db(path: str, readonly: bool = False) -> sqlite3.Connection:
    """Open (creating) the database; errors name the file and the knob.

    ``readonly``: for readers (history show, the report's section). An existing file is
    opened read-only and never written (its schema not touched), so a database on a
    read-only mount or in someone else's dir can be read."""
    if os.path.lexists(path) and not os.path.exists(path):
        raise HistoryError(
            f"the history database {path} {missing_reason(path)}; fix the link, or choose "
            "another file with --db FILE or ZL_HISTORY_DB"
        )
    if readonly and os.path.isfile(path):
        return _open_readonly(path)
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(path)
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise HistoryError(
                f"{path} was written by a newer zlbench (schema {version}); "
                "upgrade zlbench or choose another file with --db / ZL_HISTORY_DB"
            )
        conn.executescript(SCHEMA)
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.commit()
    except (OSError, sqlite3.DatabaseError) as e:
        raise HistoryError(
            f"cannot use the history database {path}: {e}; choose another "
            "file with --db FILE or ZL_HISTORY_DB"
        ) from None
    return conn


def operators(conn: sqlite3.Connection) -> List[str]:
    """Every operator with a recorded row, sorted."""
    return [r[0] for r in conn.execute("SELECT DISTINCT op FROM rows ORDER BY op")]


def has_table(conn: sqlite3.Connection, name: str) -> bool:
    """Whether the database has this table (an older file opened by a reader may lack a
    newer one: readers never change the file)."""
    return (
        conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)).fetchone()
        is not None
    )


def op_families(conn: sqlite3.Connection) -> Dict[str, Family]:
    """Each operator's family as its latest recorded screen has it (an operator's kind
    may change between nights: the newest word counts); {} where none are recorded."""
    if not has_table(conn, "families"):
        return {}
    out: Dict[str, Family] = {}
    for op, name, origin, source in conn.execute(
        "SELECT f.op, f.family, f.origin, f.source FROM families f JOIN screens s ON s.id = f.screen "
        "ORDER BY s.started, s.id"
    ):
        out[op] = Family(name, origin, source)
    return out


def night_families(conn: sqlite3.Connection, screen: int) -> Dict[str, Family]:
    """The families recorded with one screen."""
    if not has_table(conn, "families"):
        return {}
    return {
        op: Family(name, origin, source)
        for op, name, origin, source in conn.execute(
            "SELECT op, family, origin, source FROM families WHERE screen = ?", (screen,)
        )
    }


def family_sources(families: Dict[str, Family], ops: Sequence[str]) -> List[str]:
    """'kind in .../operators.yaml (4 operators)', one per source among ``ops``."""
    counts: Dict[Tuple[str, str], int] = {}
    for op in ops:
        f = families.get(op)
        if f is not None:
            counts[(f.origin, f.source)] = counts.get((f.origin, f.source), 0) + 1
    return [f"{source} ({n} operators)" for (_, source), n in sorted(counts.items(), key=lambda kv: -kv[1])]


def _open_readonly(path: str) -> sqlite3.Connection:
    try:
        conn = sqlite3.connect(f"{Path(path).resolve().as_uri()}?mode=ro", uri=True)
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except (OSError, sqlite3.DatabaseError) as e:
        raise HistoryError(
            f"cannot read the history database {path}: {e}; choose another file with --db FILE or ZL_HISTORY_DB"
        ) from None
    if version > SCHEMA_VERSION:
        conn.close()
        raise HistoryError(
            f"{path} was written by a newer zlbench (schema {version}); "
            "upgrade zlbench or choose another file with --db / ZL_HISTORY_DB"
        )
    missing = {"screens", "calibers", "rows"} - tables
    if missing:
        conn.close()
        raise HistoryError(
            f"{path} is not a zlbench history database (no {', '.join(sorted(missing))} table); "
            "record a screen with zlbench history add DIR, or choose another file with --db FILE"
        )
    return conn


def _started(runs: Sequence[RunLog], root: Path) -> str:
    stamps = sorted(str(r.identity["started"]) for r in runs if r.identity and r.identity.get("started"))
    if stamps:
        return stamps[0]
    return time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(root.stat().st_mtime))


def _versions(runs: Sequence[RunLog]) -> Dict[str, str]:
    out: Dict[str, List[str]] = {}
    for run in runs:
        for key in VERSION_KEYS:
            value = ((run.identity or {}).get("versions") or {}).get(key)
            if value and str(value) not in out.setdefault(key, []):
                out[key].append(str(value))
    return {k: ",".join(v) for k, v in out.items()}


def _finite(v: Optional[float]) -> Optional[float]:
    return v if v is not None and math.isfinite(v) else None


def _records(summary: Summary) -> Tuple[str, List[tuple], Dict[str, Dict[str, str]]]:
    """(content key, row records, calibers by key) of a summarised screen."""
    by_run = {str(r.run_dir): r for r in summary.runs}
    calibers: Dict[str, Dict[str, str]] = {}
    records = []
    for row in summary.rows:
        run = by_run.get(row.run_dir)
        fields = series_caliber(run.identity if run else None)
        key = caliber_key(fields)
        calibers[key] = fields
        records.append(
            (
                key,
                row.op,
                row.dtype,
                row.shape,
                row.status,
                row.timer,
                _finite(row.gems_ms),
                _finite(row.torch_ms),
                _finite(row.gems_spread),
            )
        )
    records.sort(key=lambda r: tuple("" if v is None else str(v) for v in r))
    content = hashlib.sha256("\n".join(json.dumps(r) for r in records).encode()).hexdigest()
    return content, records, calibers


def recorded(conn: sqlite3.Connection, summary: Summary) -> Optional[Night]:
    """The night this screen was recorded as, if it was."""
    content = _records(summary)[0]
    existing = conn.execute("SELECT id FROM screens WHERE content_key = ?", (content,)).fetchone()
    return night(conn, existing[0]) if existing else None


def screen_calibers(summary: Summary) -> List[str]:
    return sorted(_records(summary)[2])


def add_screen(conn: sqlite3.Connection, summary: Summary) -> Added:
    """Record a summarised screen; a screen already recorded (same rows) is a no-op but
    for its families, recorded where it has none (a screen added before they were)."""
    content, records, calibers = _records(summary)
    if not records:
        raise HistoryError(f"{summary.input} holds no table rows: nothing to record")
    started = _started(summary.runs, summary.root)
    label = f"{started[:16].replace('T', ' ')} {summary.root.name}"
    families = summary_families(summary)
    # The check and the insert are one write transaction: of two `history add` of one
    # screen at once, the second waits for the first, then finds it recorded.
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as e:
        raise HistoryError(
            f"cannot write the history database: {e}; try again, or choose another --db"
        ) from None
    try:
        existing = conn.execute("SELECT id FROM screens WHERE content_key = ?", (content,)).fetchone()
        if existing:
            done = _fill_families(conn, existing[0], records, families)
            conn.commit()
            return Added(False, night(conn, existing[0]), len(records), sorted(calibers), done)
        screen = _insert(conn, summary, content, started, label, records, calibers)
        done = _fill_families(conn, screen, records, families)
        conn.commit()
    except sqlite3.IntegrityError:
        # Another writer that did not take the lock first (an older zlbench) got there.
        conn.rollback()
        existing = conn.execute("SELECT id FROM screens WHERE content_key = ?", (content,)).fetchone()
        if not existing:
            raise
        return Added(False, night(conn, existing[0]), len(records), sorted(calibers))
    except BaseException:
        conn.rollback()
        raise
    return Added(True, night(conn, screen), len(records), sorted(calibers), done)


def _fill_families(conn: sqlite3.Connection, screen: int, records: List[tuple], found: Families) -> int:
    """Record the families of the screen's operators unless it has some already; how many."""
    if conn.execute("SELECT 1 FROM families WHERE screen = ? LIMIT 1", (screen,)).fetchone():
        return 0
    known = [
        (screen, op, found.get(op), found.origin, found.source)
        for op in sorted({r[1] for r in records})
        if found.get(op) != OTHER
    ]
    conn.executemany(
        "INSERT INTO families (screen, op, family, origin, source) VALUES (?, ?, ?, ?, ?)", known
    )
    return len(known)


def _insert(
    conn: sqlite3.Connection,
    summary: Summary,
    content: str,
    started: str,
    label: str,
    records: List[tuple],
    calibers: Dict[str, Dict[str, str]],
) -> int:
    """The screen's rows, inside the caller's transaction; its screen id."""
    cur = conn.execute(
        "INSERT INTO screens (content_key, path, started, added, label, versions) VALUES (?, ?, ?, ?, ?, ?)",
        (
            content,
            str(summary.root.resolve()),
            started,
            time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            label,
            json.dumps(_versions(summary.runs)),
        ),
    )
    screen = cur.lastrowid
    ids = {}
    for key, fields in calibers.items():
        conn.execute(
            "INSERT OR IGNORE INTO calibers (key, fields) VALUES (?, ?)",
            (key, json.dumps(fields, sort_keys=True)),
        )
        ids[key] = conn.execute("SELECT id FROM calibers WHERE key = ?", (key,)).fetchone()[0]
    conn.executemany(
        "INSERT INTO rows (screen, caliber, op, dtype, shape, status, timer, gems_ms, "
        "torch_ms, spread) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [(screen, ids[r[0]]) + r[1:] for r in records],
    )
    return screen


def night(conn: sqlite3.Connection, screen: int) -> Night:
    sid, label, started, path, versions = conn.execute(
        "SELECT id, label, started, path, versions FROM screens WHERE id = ?", (screen,)
    ).fetchone()
    return Night(sid, label, started, path, json.loads(versions))


def calibers(conn: sqlite3.Connection) -> List[Caliber]:
    """Every caliber with the nights that have rows of it, oldest night first."""
    out = []
    for cid, key, fields in conn.execute("SELECT id, key, fields FROM calibers ORDER BY id"):
        cal = Caliber(cid, key, json.loads(fields))
        for (sid,) in conn.execute(
            "SELECT DISTINCT s.id FROM screens s JOIN rows r ON r.screen = s.id "
            "WHERE r.caliber = ? ORDER BY s.started, s.id",
            (cid,),
        ).fetchall():
            cal.nights.append(night(conn, sid))
        out.append(cal)
    return out


SeriesKey = Tuple[str, str, str]


def series(
    conn: sqlite3.Connection, cal: Caliber, op: Optional[str] = None
) -> Iterator[Tuple[SeriesKey, List[Optional[float]], float]]:
    """(op, dtype, shape), gems latency per night of ``cal`` (None where not measured),
    and the largest spread recorded for the row (0 where none)."""
    position = {n.id: i for i, n in enumerate(cal.nights)}
    query = (
        "SELECT op, dtype, shape, screen, status, gems_ms, spread FROM rows "
        "WHERE caliber = ?" + (" AND op = ?" if op else "") + " ORDER BY op, dtype, shape"
    )
    current: Optional[SeriesKey] = None
    values: List[Optional[float]] = []
    spread = 0.0
    for o, d, s, screen, status, gems, sp in conn.execute(query, (cal.id, op) if op else (cal.id,)):
        key = (o, d, s)
        if key != current:
            if current is not None:
                yield current, values, spread
            current, values, spread = key, [None] * len(cal.nights), 0.0
        if status == "SUCCESS" and gems is not None and gems > 0:
            values[position[screen]] = gems
        spread = max(spread, sp or 0.0)
    if current is not None:
        yield current, values, spread


def db_exists(path: str) -> bool:
    return os.path.isfile(path)

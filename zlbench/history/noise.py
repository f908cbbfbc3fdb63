"""A/A noise floors in the history database: one per machine and caliber.

`zlbench noise` records what two batches of the same build differ by on this machine
(beyond their rows' own spreads); `summary --ab` looks the floor of A's runs up here
when no --noise-floor is given. The table is additive to the history schema (older
zlbench versions ignore it), created on first use.
"""

from __future__ import annotations

import json
import socket
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from zlbench.history.store import HistoryError, caliber_key, db_exists, has_table, open_db, series_caliber
from zlbench.rundir import read_plan
from zlbench.summary.ab import NoiseFloor, RowSpot
from zlbench.summary.rows import Summary

TABLE = """
CREATE TABLE IF NOT EXISTS noise_floors (
    id        INTEGER PRIMARY KEY,
    machine   TEXT NOT NULL,
    caliber   TEXT NOT NULL,
    fields    TEXT NOT NULL,
    floor     REAL NOT NULL,
    quantile  REAL NOT NULL,
    rows      INTEGER NOT NULL,
    excluded  INTEGER NOT NULL,
    median    REAL,
    p90       REAL,
    batches   TEXT NOT NULL,
    pairs     INTEGER NOT NULL,
    measured  TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS noise_floors_by_key ON noise_floors (machine, caliber);
CREATE TABLE IF NOT EXISTS row_floors (
    floor_id    INTEGER NOT NULL REFERENCES noise_floors (id),
    op          TEXT NOT NULL,
    dtype       TEXT NOT NULL,
    shape       TEXT NOT NULL,
    occurrence  INTEGER NOT NULL,
    floor       REAL NOT NULL,
    seen        REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS row_floors_by_floor ON row_floors (floor_id);
"""
# A row that moved beyond the machine's floor in its A/A pairs keeps its own: this many
# times the largest excess they showed, for three pairs are few draws of how far a row
# moves between processes. benchmarks/row_floors.py over H100 batches of FlagGems HEAD
# (the screen's 24 operators, four batches of one build): floors taken from three and
# judged on the pairs with the fourth left 1, 6, 2 and 21 A/A rows of about 1,575 SLOWER
# or FASTER where the machine's floor alone left 10, 16, 9 and 32, and of the rows a 5%
# slowdown of every row made SLOWER they kept all but 0.4-0.7%.
ROW_FLOOR_FACTOR = 1.5


@dataclass
class FloorRecord:
    machine: str
    caliber: str
    fields: Dict[str, str]
    floor: float  # fraction
    quantile: float  # of the rows' excess over their spreads, 0..1
    rows: int  # A/A rows the floor was taken over (every pair of batches pooled)
    excluded: int  # rows left out: measured throttled on either side
    median: Optional[float]  # median |B/A - 1| of those rows
    p90: Optional[float]
    batches: List[str]  # the batch dirs, every pair of which was compared
    pairs: int
    measured: str = ""
    # rows left out for want of a threshold to judge by (no spread, two clocks, host
    # time): said when the floor is taken, not stored
    unjudged: int = 0
    # The rows whose own A/A moved beyond ``floor``: row_spot -> (their floor, the
    # largest excess seen: ROW_FLOOR_FACTOR apart).
    row_floors: Dict[RowSpot, Tuple[float, float]] = field(default_factory=dict)

    def batches_text(self) -> str:
        return " vs ".join(self.batches) if len(self.batches) == 2 else ", ".join(self.batches)

    def source(self, db: str) -> str:
        """Where a verdict's floor came from, in one line."""
        return (
            f"zlbench noise of {self.batches_text()} on {self.machine}, {self.measured[:16]}, "
            f"p{self.quantile * 100:g} over {self.rows} rows of {self.pairs} A/A pairs (history db {db})"
        )


def machine_of(summary: Summary) -> Tuple[str, bool]:
    """(the host that measured a batch: plan.json's last session, or a shard's, else this
    host for a run dir or a plan without sessions; whether plan.json named it), reading
    the plans once."""
    recorded = recorded_machine(summary)
    return recorded or socket.gethostname(), recorded is not None


def recorded_machine(summary: Summary) -> Optional[str]:
    """The host plan.json says measured the batch, or None."""
    roots = [summary.root]
    if summary.screen is not None:
        roots = [s.path for s in summary.screen.shards.values()]
    for root in roots:
        try:
            plan = read_plan(Path(root)) or {}
        except (OSError, ValueError):
            continue
        sessions = plan.get("sessions") if isinstance(plan, dict) else None
        if isinstance(sessions, list) and sessions and isinstance(sessions[-1], dict):
            host = sessions[-1].get("host")
            if isinstance(host, str) and host:
                return host
    return None


def run_calibers(summary: Summary) -> Dict[str, str]:
    """A's run dir -> the caliber key its rows are stored under (history's series caliber)."""
    return {str(r.run_dir): caliber_key(series_caliber(r.identity)) for r in summary.runs}


def _ensure(conn: sqlite3.Connection) -> None:
    conn.executescript(TABLE)


def record_floor(conn: sqlite3.Connection, rec: FloorRecord) -> FloorRecord:
    _ensure(conn)
    rec.measured = rec.measured or time.strftime("%Y-%m-%dT%H:%M:%S%z")
    with conn:
        conn.execute(
            "INSERT INTO noise_floors (machine, caliber, fields, floor, quantile, rows, excluded, "
            "median, p90, batches, pairs, measured) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                rec.machine,
                rec.caliber,
                json.dumps(rec.fields, sort_keys=True),
                rec.floor,
                rec.quantile,
                rec.rows,
                rec.excluded,
                rec.median,
                rec.p90,
                json.dumps(rec.batches),
                rec.pairs,
                rec.measured,
            ),
        )
        floor_id = conn.execute("SELECT last_insert_rowid()").fetchone()[0]
        # An id can be used again after its floor was deleted by hand: none of its rows stay.
        conn.execute("DELETE FROM row_floors WHERE floor_id = ?", (floor_id,))
        conn.executemany(
            "INSERT INTO row_floors (floor_id, op, dtype, shape, occurrence, floor, seen) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            [
                (floor_id, *key, occurrence, own, seen)
                for (key, occurrence), (own, seen) in sorted(rec.row_floors.items())
            ],
        )
    return rec


def latest_floor(conn: sqlite3.Connection, machine: str, caliber: str) -> Optional[FloorRecord]:
    """The floor recorded last for this machine and caliber, or None (a reader: nothing
    is created, so a read-only database can be asked)."""
    if not has_table(conn, "noise_floors"):
        return None
    row = conn.execute(
        "SELECT id, machine, caliber, fields, floor, quantile, rows, excluded, median, p90, batches, "
        "pairs, measured FROM noise_floors WHERE machine = ? AND caliber = ? ORDER BY id DESC LIMIT 1",
        (machine, caliber),
    ).fetchone()
    if row is None:
        return None
    floor_id = row[0]
    machine_, caliber_, fields, floor, q, rows, excluded, median, p90, batches, pairs, measured = row[1:]
    own: Dict[RowSpot, Tuple[float, float]] = {}
    if has_table(conn, "row_floors"):  # a floor recorded before rows had their own has none
        for op, dtype, shape, occurrence, value, seen in conn.execute(
            "SELECT op, dtype, shape, occurrence, floor, seen FROM row_floors WHERE floor_id = ?", (floor_id,)
        ):
            own[((op, dtype, shape), occurrence)] = (value, seen)
    return FloorRecord(
        machine_,
        caliber_,
        json.loads(fields),
        floor,
        q,
        rows,
        excluded,
        median,
        p90,
        json.loads(batches),
        pairs,
        measured,
        row_floors=own,
    )


def floors(conn: sqlite3.Connection) -> List[FloorRecord]:
    """The latest floor of every machine and caliber (a reader: nothing is created)."""
    if not has_table(conn, "noise_floors"):
        return []
    keys = conn.execute(
        "SELECT DISTINCT machine, caliber FROM noise_floors ORDER BY machine, caliber"
    ).fetchall()
    return [f for m, c in keys if (f := latest_floor(conn, m, c)) is not None]


def floors_for(summary: Summary, db: str) -> Dict[str, NoiseFloor]:
    """A's run dir -> the recorded floor of its machine and caliber, for the runs that have
    one. An absent database has none (nothing is created by looking)."""
    if not db_exists(db):
        return {}
    conn = open_db(db, readonly=True)
    try:
        machine, recorded = machine_of(summary)
        assumed = "" if recorded else " (A names no host: taken as this one)"
        found: Dict[str, Optional[NoiseFloor]] = {}
        out: Dict[str, NoiseFloor] = {}
        for run_dir, cal in run_calibers(summary).items():
            if cal not in found:
                rec = latest_floor(conn, machine, cal)
                found[cal] = (
                    None
                    if rec is None
                    else NoiseFloor(
                        rec.floor,
                        rec.source(db) + assumed,
                        {spot: own for spot, (own, _) in rec.row_floors.items()},
                    )
                )
            floor = found[cal]
            if floor is not None:
                out[run_dir] = floor
        return out
    except sqlite3.DatabaseError as e:
        raise HistoryError(f"cannot read noise floors from {db}: {e}") from None
    finally:
        conn.close()

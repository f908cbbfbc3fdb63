"""The files a run and a batch leave: their names, and the reading and writing of them.

This is the contract between run, batch, summary and ab (docs/design.md, "Files a run
leaves"); no other module spells these names.

A run dir::

    run.log              pytest's output, ANSI stripped
    run_identity.json    how the run was measured (written first, rewritten at the end)
    shapes.yaml          the shape set actually used
    autotune_records/    configs chosen per kernel (record mode), read by replay
    warmup/              parallel warmup: shard-<i>/{shard.log, shapes.yaml, ...}, merged/
    plugins/<name>.json  run-level counts of each plugin
    row_stats.jsonl      one line per timing: samples, spread, device state (rowstats.py)
    .complete            written last, only when the run succeeded

A batch dir::

    plan.json            the plan this batch ran (ops, device per op, settings)
    ops_status.csv       one row per operator, rewritten atomically as each finishes
    attempts.jsonl       one line per attempt started / finished (resume reads it)
    <op>/                the run dir of the attempt that produced the op's status
    logs/<op>/...        stdout+stderr of every attempt of ``zlbench run``
    set-aside/<op>/...   run dirs of earlier attempts and of interrupted drivers
    batch.log            the driver's own event lines (markers included)
    driver.json          who holds the batch (pid, host), beside the .driver.lock

A sharded screen (``--shard K/N --out OUT``) is one such batch dir per host shard,
``OUT/shard-K-of-N/``, and ``OUT/slurm/`` when Slurm ran it (``zlbench slurm``).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import re
import shutil
import stat
import threading
import time
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional

from .atomic import write_atomic, write_json_atomic
from .safe_read import read_text_capped

# --- a run dir -------------------------------------------------------------------------
RUN_LOG = "run.log"
IDENTITY = "run_identity.json"
COMPLETE = ".complete"
SHAPES = "shapes.yaml"
RECORDS_DIR = "autotune_records"
PLUGINS_DIR = "plugins"
PARALLEL_WARMUP_DIR = "warmup"
MERGED_DIR = "merged"
SHARD_LOG = "shard.log"
ROW_STATS = "row_stats.jsonl"

# --- a batch dir -----------------------------------------------------------------------
STATUS_FILE = "ops_status.csv"
JOURNAL_FILE = "attempts.jsonl"
PLAN_FILE = "plan.json"
SET_ASIDE_DIR = "set-aside"
LOGS_DIR = "logs"
BATCH_LOG = "batch.log"
DRIVER_LOCK = ".driver.lock"
DRIVER_INFO = "driver.json"
# Names inside a batch dir that are not operator run dirs.
RESERVED = frozenset({SET_ASIDE_DIR, LOGS_DIR})

# --- a sharded screen ------------------------------------------------------------------
# A sharded screen run by Slurm keeps its scheduler files in <screen>/slurm/.
SLURM_DIR = "slurm"
SLURM_SCRIPT = "array.sbatch"  # the job script, rewritten by each submission
SLURM_SUBMISSIONS = "submissions.jsonl"  # one line per sbatch: job id, array indices, argv
SLURM_SCREEN = "screen.json"  # shard count and settings of the first submission
SLURM_TASK_LOG = "shard-%a-job-%A.out"  # sbatch's --output pattern: one log per task
SHARD_DIR_RE = re.compile(r"^shard-(\d+)-of-(\d+)$")

# --- what summary and ab add -----------------------------------------------------------
SUMMARY_CSV = "summary.csv"
AB_JSON = "ab.json"
# FlagGems' own result files (tools/run_tests.py): a batch writes summary.json in its
# format, and each run dir keeps the benchmark's `--record json` output under the name
# run_tests.py gives it, so FlagGems' tools (psum_text, psum_html, psum_web) read both.
FG_SUMMARY = "summary.json"
FG_PERF_RESULT = "performance_result.json"

# Every name the batch (and summary, ab) write at a batch dir's top level: no operator
# may take one, nor one of their lock files (a run dir named plan.json would corrupt the
# batch). Shard dirs (SHARD_DIR_RE) are refused too.
BATCH_NAMES = RESERVED | {
    STATUS_FILE,
    JOURNAL_FILE,
    PLAN_FILE,
    BATCH_LOG,
    DRIVER_INFO,
    DRIVER_LOCK.lstrip("."),
    SLURM_DIR,
    SUMMARY_CSV,
    AB_JSON,
    FG_SUMMARY,
}


# --- run dir ---------------------------------------------------------------------------


def is_complete(run_dir: Path) -> bool:
    return (run_dir / COMPLETE).is_file()


def mark_complete(run_dir: Path, stamp: str) -> None:
    """Written last, atomically, only when the run succeeded."""
    write_atomic(run_dir / COMPLETE, stamp + "\n")


def read_identity(run_dir: Path) -> dict:
    """run_identity.json as a dict; {} when absent or unreadable."""
    return _read_json(run_dir / IDENTITY)


def write_identity(run_dir: Path, data: Mapping[str, Any]) -> None:
    write_json_atomic(run_dir / IDENTITY, dict(data))


def identity_paths(root: Path) -> List[Path]:
    """Every run_identity.json below ``root`` (set-aside attempts included), sorted."""
    return sorted(root.rglob(IDENTITY))


def run_log_path(run_dir: Path) -> Path:
    return run_dir / RUN_LOG


def shapes_path(run_dir: Path) -> Path:
    return run_dir / SHAPES


def perf_result_path(run_dir: Path) -> Path:
    """The benchmark's own ``--record json`` output (FlagGems' format) in a run dir or,
    for a run_tests.py output dir, in ``<dir>/<op>/``."""
    return Path(run_dir) / FG_PERF_RESULT


def fg_summary_path(batch_dir: Path) -> Path:
    return Path(batch_dir) / FG_SUMMARY


def row_stats_path(run_dir: Path) -> Path:
    return run_dir / ROW_STATS


def records_dir(run_dir: Path) -> Path:
    return run_dir / RECORDS_DIR


def replay_records(path: Path) -> Path:
    """The autotune_records/ dir a replay reads: ``path`` itself, or the one in a run dir."""
    return records_dir(path) if records_dir(path).is_dir() else path


def plugin_report_path(run_dir: Path, plugin: str) -> Path:
    return run_dir / PLUGINS_DIR / f"{plugin}.json"


def write_plugin_report(run_dir: Path, plugin: str, data: Mapping[str, Any]) -> Path:
    path = plugin_report_path(run_dir, plugin)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(data, indent=2) + "\n")
    return path


def read_plugin_reports(run_dir: Path) -> Dict[str, Any]:
    """Every plugins/<plugin>.json folded into one mapping (unreadable ones say why)."""
    out: Dict[str, Any] = {}
    for path in sorted((run_dir / PLUGINS_DIR).glob("*.json")):
        try:
            out[path.stem] = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            out[path.stem] = {"unreadable": str(e)}
    return out


def parallel_warmup_dir(run_dir: Path) -> Path:
    return run_dir / PARALLEL_WARMUP_DIR


def shard_dir(warm_dir: Path, index: int) -> Path:
    return warm_dir / f"shard-{index}"


def merged_dir(warm_dir: Path) -> Path:
    return warm_dir / MERGED_DIR


def shard_dir_name(index: int, count: int) -> str:
    """``shard-K-of-N``: host shard K's batch dir inside a sharded screen's dir."""
    return f"shard-{index}-of-{count}"


def parse_shard_dir_name(name: str) -> Optional[tuple]:
    """(K, N) of a ``shard-K-of-N`` name, else None."""
    m = SHARD_DIR_RE.match(name)
    return (int(m.group(1)), int(m.group(2))) if m else None


# --- batch dir -------------------------------------------------------------------------

COLUMNS = [
    "operator",
    "status",
    "attempts",
    "dtype_level",
    "dtypes",
    "backend",
    "device",
    "timer",
    "duration_s",
    "total_s",
    "exit_code",
    "reason",
    "notes",
    "run_dir",
    # How the last attempt ran and where its time went (batch.activity.split_phases).
    "run_mode",
    "timeout_kind",
    "startup_s",
    "collect_s",
    "first_call_s",
    "measure_s",
    "overhead_s",
    # Of first_call_s + measure_s: compiling kernels, and tuning (autotune plugin's clock).
    "compile_s",
    "tune_s",
]


def status_row(operator: str, status: str, **cells: object) -> Dict[str, object]:
    """One ops_status.csv row; cells not given stay empty. ``dtypes`` is the list tried
    (None: the corpus' default)."""
    unknown = set(cells) - set(COLUMNS)
    if unknown:
        raise ValueError(f"not an ops_status.csv column: {', '.join(sorted(unknown))}")
    if "dtypes" in cells:
        dtypes = cells["dtypes"]
        cells["dtypes"] = ",".join(dtypes) if dtypes else "default"  # type: ignore[arg-type]
    return {"operator": operator, "status": status, **cells}


class StatusFile:
    """ops_status.csv. One writer per batch dir: the driver (its DriverLock keeps a second
    driver out), whose device threads share this object under a thread lock; the file
    lock orders its writes with other processes' reads of the file (filelock is
    re-entrant within one process, hence the thread lock)."""

    def __init__(self, batch_dir: Path):
        from filelock import FileLock  # the batch's; plugins import this module too

        self.path = batch_dir / STATUS_FILE
        self._file_lock = FileLock(str(self.path) + ".lock")
        self._thread_lock = threading.Lock()
        # Once this object writes, its own rows are the truth: the file is rewritten from
        # them, never read back (an operator's process may have garbled it meanwhile).
        self._rows: Optional[Dict[str, Dict[str, str]]] = None

    def read(self) -> Dict[str, Dict[str, str]]:
        if self._rows is not None:
            return {op: dict(row) for op, row in self._rows.items()}
        return self.read_file()

    def read_file(self) -> Dict[str, Dict[str, str]]:
        """The rows by operator in the file; lines that are not rows (a garbled or binary file) are
        left out, never raised: resume re-runs what has no trustworthy row."""
        try:
            text, _ = read_text_capped(self.path)
        except OSError:
            return {}
        rows: Dict[str, Dict[str, str]] = {}
        try:
            for row in csv.DictReader(io.StringIO(text.replace("\0", ""), newline="")):
                op = row.get("operator")
                if (
                    isinstance(op, str)
                    and op
                    and all(isinstance(v, str) or v is None for k, v in row.items() if k is not None)
                ):
                    rows[op] = row
        except csv.Error:
            pass
        return rows

    def update(self, rows: Iterable[Mapping[str, object]]) -> None:
        rows = list(rows)
        if not rows:
            return
        with self._thread_lock, self._file_lock:
            if self._rows is None:
                self._rows = self.read_file()
            for row in rows:
                self._rows[str(row["operator"])] = {c: _cell(row.get(c)) for c in COLUMNS}
            write_atomic(self.path, format_status(self._rows))

    def rewrite(self) -> bool:
        """Write the rows again if the file no longer holds them (an operator's process
        wrote into it after the last update). True when it had to."""
        if self._rows is None:
            return False
        text = format_status(self._rows)
        try:
            same = read_text_capped(self.path)[0] == text
        except OSError:
            same = False
        if not same:
            with self._thread_lock, self._file_lock:
                write_atomic(self.path, text)
        return not same


def format_status(rows: Mapping[str, Mapping[str, object]]) -> str:
    """ops_status.csv's text: the header, then one row per operator in name order."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=COLUMNS, extrasaction="ignore")
    writer.writeheader()
    for op in sorted(rows):
        writer.writerow({c: rows[op].get(c, "") for c in COLUMNS})
    return out.getvalue()


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


def status_path(batch_dir: Path) -> Path:
    return batch_dir / STATUS_FILE


class Journal:
    """attempts.jsonl: append-only, one JSON object per line, written by the batch
    driver. Nothing in it is secret: what resume may believe of it is in
    ``accepted_runs`` (docs/design.md, "What the batch does not believe")."""

    def __init__(self, batch_dir: Path, session: str):
        self.path = batch_dir / JOURNAL_FILE
        self.session = session
        self._lock = threading.Lock()

    def record(self, event: str, **fields: object) -> None:
        doc = {"t": round(time.time(), 3), "session": self.session, "event": event, **fields}
        line = json.dumps(doc, default=str) + "\n"
        with self._lock:
            # One write() of one line with O_APPEND: a killed driver leaves whole lines.
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, line.encode())
            finally:
                os.close(fd)


def read_journal(batch_dir: Path) -> Iterator[dict]:
    """The events of a batch's attempts.jsonl (lines cut by a crash are skipped)."""
    try:
        text, _ = read_text_capped(batch_dir / JOURNAL_FILE)
    except OSError:
        return iter(())
    out = []
    for line in text.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue  # a line cut by a crash, or not a journal line at all
        if isinstance(event, dict):
            out.append(event)
    return iter(out)


# --- what a batch proves about its own run dirs ----------------------------------------

# The files of a run dir that summary and ab read: the driver records their digests
# in an ok attempt's "result" line (after every process of the attempt is stopped), and
# resume keeps the run dir only while they are still those files.
PROOF_FILES = (COMPLETE, IDENTITY, RUN_LOG, ROW_STATS)
_NOT_A_FILE = "not a regular file"


def _file_digest(path: Path) -> Optional[str]:
    """SHA-256 of a regular file (hex); None when absent. A FIFO or a device is never
    opened for reading (O_NONBLOCK, fstat first)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        return None
    except OSError:
        return _NOT_A_FILE
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return _NOT_A_FILE
        digest = hashlib.sha256()
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return digest.hexdigest()
            digest.update(chunk)
    except OSError:
        return _NOT_A_FILE
    finally:
        os.close(fd)


def run_proof(run_dir: Path) -> Dict[str, Optional[str]]:
    """{file name: sha256 or None when absent} of a run dir's PROOF_FILES."""
    return {name: _file_digest(Path(run_dir) / name) for name in PROOF_FILES}


def accepted_runs(events: Iterable[Mapping[str, Any]]) -> Dict[str, Mapping[str, Any]]:
    """Per operator whose last result says ok, that "result" event. Only a result
    naming an attempt that an "attempt" event of the same session started before it
    counts. The run dir it accepted is still that run when ``proof_mismatch`` finds
    nothing."""
    started = set()
    last: Dict[str, Mapping[str, Any]] = {}
    for ev in events:
        key = (ev.get("session"), ev.get("op"), ev.get("attempt"))
        if ev.get("event") == "attempt":
            started.add(key)
        elif ev.get("event") == "result" and isinstance(ev.get("op"), str) and key in started:
            last[ev["op"]] = ev  # a result no attempt line started is not the driver's
    return {op: ev for op, ev in last.items() if ev.get("status") == "ok"}


def proof_mismatch(run_dir: Path, result: Optional[Mapping[str, Any]]) -> Optional[str]:
    """Why the run dir is not the run the journal's accepted ``result`` (see
    ``accepted_runs``) recorded; None when it is."""
    if not result:
        return "no attempt of this batch ended ok for it"
    proof = result.get("proof")
    if not isinstance(proof, dict) or set(proof) != set(PROOF_FILES):
        return "its accepted result records no digests of its files (a journal of an older zlbench)"
    now = run_proof(run_dir)
    changed = [name for name in PROOF_FILES if now[name] != proof[name]]
    if changed:
        return f"{', '.join(changed)} changed since its attempt was accepted"
    return None


def plan_path(batch_dir: Path) -> Path:
    return batch_dir / PLAN_FILE


def read_plan(batch_dir: Path) -> Optional[dict]:
    """plan.json, or None when the batch has none yet. Raises ValueError when unreadable."""
    path = plan_path(batch_dir)
    if not path.is_file():
        return None
    return json.loads(path.read_text(encoding="utf-8"))


def write_plan(batch_dir: Path, doc: Mapping[str, Any]) -> None:
    write_atomic(plan_path(batch_dir), json.dumps(doc, indent=2) + "\n")


def batch_log_path(batch_dir: Path) -> Path:
    return batch_dir / BATCH_LOG


def attempt_log_path(batch_dir: Path, op: str, session: str, number: int, level: int) -> Path:
    """logs/<op>/<session>-a<attempt>-l<dtype level>.log"""
    return batch_dir / LOGS_DIR / op / f"{session}-a{number}-l{level}.log"


def worker_log_dir(batch_dir: Path) -> Path:
    """logs/workers/: each warm worker's own log."""
    return batch_dir / LOGS_DIR / "workers"


def attempt_logs(batch_dir: Path, op: str) -> List[Path]:
    """Every attempt log of ``op`` under logs/, oldest first; none for a name that
    cannot be a dir's (a refused corpus mark longer than a file name, say)."""

    def mtime(path: Path) -> float:
        try:
            return path.stat().st_mtime
        except OSError:
            return 0.0

    try:
        return sorted((batch_dir / LOGS_DIR / op).glob("*.log"), key=mtime)
    except OSError:
        return []


def set_aside(batch_dir: Path, op: str, label: str) -> Optional[Path]:
    """Move ``<batch>/<op>`` to ``<batch>/set-aside/<op>/<label>`` (never deleted).
    Returns where it went, or None when there was nothing to move."""
    src = batch_dir / op
    if not src.exists():
        return None
    parent = batch_dir / SET_ASIDE_DIR / op
    parent.mkdir(parents=True, exist_ok=True)
    dest = parent / label
    n = 2
    while dest.exists():
        dest = parent / f"{label}-{n}"
        n += 1
    try:
        os.rename(src, dest)
    except OSError:
        shutil.move(str(src), str(dest))
    return dest


def driver_lock_path(batch_dir: Path) -> Path:
    return batch_dir / DRIVER_LOCK


def read_driver_info(batch_dir: Path) -> dict:
    return _read_json(batch_dir / DRIVER_INFO)


def write_driver_info(batch_dir: Path, info: Mapping[str, Any]) -> None:
    write_atomic(batch_dir / DRIVER_INFO, json.dumps(dict(info)) + "\n")


def _read_json(path: Path) -> dict:
    """A JSON object; {} when absent, unreadable, not regular (a FIFO) or not an object."""
    try:
        doc = json.loads(read_text_capped(path, 16 * 1024 * 1024)[0])
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


# --- per-row measurement records (the record's fields: zlbench/rowstats.py) ----------


def append_row_stat(run_dir: Path, record: Mapping[str, Any]) -> None:
    """One JSON line, flushed at once: a killed run keeps every row it measured."""
    with open(Path(run_dir) / ROW_STATS, "a", encoding="utf-8") as f:
        f.write(json.dumps(record, sort_keys=True, default=str) + "\n")


def read_row_stats(run_dir: Path) -> "tuple[List[dict], List[str]]":
    """(records, problems); a torn last line (the process was killed) is a problem."""
    path = Path(run_dir) / ROW_STATS
    if not path.is_file():
        return [], []
    records: List[dict] = []
    problems: List[str] = []
    try:
        text, _ = read_text_capped(path)
    except OSError as e:
        return [], [f"{path}: {e}"]
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            problems.append(f"{path}:{lineno}: not a JSON line, skipped")
            continue
        if isinstance(rec, dict):
            records.append(rec)
    return records, problems

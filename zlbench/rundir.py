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
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional

from .atomic import write_atomic, write_json_atomic
from .safe_read import describe_error, read_bytes_capped, read_text_capped, resolve_path


class DocumentError(ValueError):
    """A run or batch file that cannot be read as its document: unreadable, not JSON,
    not the document's shape, or written in a format this zlbench does not read. The
    reader raises it; its caller decides what that means (refuse to go on, or an issue
    in a summary). ``str()`` names the file and what is wrong with it."""

    def __init__(self, path: Path, why: str):
        super().__init__(f"{path}{why}")
        self.path = Path(path)
        self.why = why


# Each document carries its format in "format" (plan.json, run_identity.json) or in
# each record (row_stats.jsonl): a reader refuses a format newer than it knows. Files
# from before formats were recorded have none and read as format 1.
PLAN_FORMAT = 1
IDENTITY_FORMAT = 1
ROW_STATS_FORMAT = 1
STATUS_FORMAT = 1  # ops_status.csv: the last column of every row
FORMAT_KEY = "format"


def _with_format(doc: Mapping[str, Any], version: int) -> Dict[str, Any]:
    """``doc`` with the writer's format, first: the writer, not its caller, says it."""
    return {FORMAT_KEY: version, **{k: v for k, v in doc.items() if k != FORMAT_KEY}}


def format_problem(doc: Mapping[str, Any], known: int, what: str) -> str:
    """Why ``doc``'s format cannot be read ("" when it can: absent means 1)."""
    version = doc.get(FORMAT_KEY, 1)
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        return f"its {what} format is {version!r}, not a format number"
    if version > known:
        return (
            f"it is {what} format {version}, written by a newer zlbench (this one reads "
            f"format {known} and older); read it with that zlbench"
        )
    return ""


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


IDENTITY_LIMIT = 16 * 1024 * 1024


def load_identity(run_dir: Path) -> Optional[dict]:
    """run_identity.json; None when the run dir has none. Raises DocumentError when it
    cannot be read as one (unreadable, a FIFO, not a JSON object, a newer format)."""
    path = Path(run_dir) / IDENTITY
    if not os.path.lexists(path):
        return None
    try:
        doc = json.loads(read_text_capped(path, IDENTITY_LIMIT)[0])
    except OSError as e:
        raise DocumentError(path, f": cannot read it ({describe_error(e)})") from None
    except ValueError as e:
        raise DocumentError(path, f" is not valid JSON ({e})") from None
    if not isinstance(doc, dict):
        raise DocumentError(path, " is not a JSON object")
    problem = format_problem(doc, IDENTITY_FORMAT, "run identity")
    if problem:
        raise DocumentError(path, f": {problem}")
    return doc


def read_identity(run_dir: Path) -> dict:
    """run_identity.json as a dict; {} when absent or not readable as one (load_identity
    says why)."""
    try:
        return load_identity(run_dir) or {}
    except DocumentError:
        return {}


def write_identity(run_dir: Path, data: Mapping[str, Any]) -> None:
    write_json_atomic(run_dir / IDENTITY, _with_format(data, IDENTITY_FORMAT))


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

# Exit codes of ``zlbench run`` (docs/design.md, "Exit codes of zlbench run"): what the
# batch records in ops_status.csv's exit_code and reads its status from. pytest's own
# 2/4/5 pass through; a run killed by signal N shows as -N (or 128+N: its pytest was).
EXIT_OK = 0
EXIT_FAILED = 1
EXIT_PREFLIGHT = 3
EXIT_NO_TESTS = 5

# ops_status.csv's status column: every status an operator's row may hold.
OK, FAILED, TIMEOUT, CRASHED, SKIPPED, DISMISSED = (
    "ok",
    "failed",
    "timeout",
    "crashed",
    "skipped",
    "dismissed",
)
STATUSES = (OK, FAILED, TIMEOUT, CRASHED, SKIPPED, DISMISSED)
# Statuses that make a batch exit 1; an operator without a row yet is "not run".
BAD = (FAILED, TIMEOUT, CRASHED)
NOT_RUN = "not run"


def count_statuses(rows: Mapping[str, Mapping[str, str]], planned: Iterable[str]) -> Dict[str, int]:
    """How many planned operators hold each status (NOT_RUN: no row yet)."""
    counts: Dict[str, int] = {}
    for op in planned:
        status = rows.get(op, {}).get("status") or NOT_RUN
        counts[status] = counts.get(status, 0) + 1
    return counts


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
    # STATUS_FORMAT, written by format_status; a file without the column is format 1.
    FORMAT_KEY,
]
STATUS_LIMIT = 64 * 1024 * 1024


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
                    and not _row_format_problem(row)
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
        writer.writerow({**{c: rows[op].get(c, "") for c in COLUMNS}, FORMAT_KEY: STATUS_FORMAT})
    return out.getvalue()


def _row_format_problem(row: Mapping[str, Optional[str]]) -> str:
    """Why an ops_status.csv row's format cannot be read ("" when it can; none: 1)."""
    version = (row.get(FORMAT_KEY) or "").strip()
    stamped = {FORMAT_KEY: int(version) if version.isdigit() else version} if version else {}
    return format_problem(stamped, STATUS_FORMAT, "status row")


def read_status_rows(batch_dir: Path) -> Optional[List[tuple]]:
    """ops_status.csv's rows as (line number, row), in file order; None when the batch
    has none. Raises DocumentError when it cannot be read as one (unreadable, not text,
    no operator and status columns, not CSV, a row of a newer format).

    The other way in, StatusFile.read_file, is lenient: a garbled row (or one of a newer
    format) is left out; the driver re-runs its operator, the status counts and the
    screen merge count what they can. Summary's per-operator issues read through here,
    so that a file it cannot read is said."""
    path = status_path(Path(batch_dir))
    if not os.path.lexists(path):
        return None
    try:
        text, _ = read_text_capped(path, STATUS_LIMIT)
    except OSError as e:
        raise DocumentError(path, f": cannot read it ({describe_error(e)})") from None
    if "\0" in text or "\ufffd" in text:
        raise DocumentError(path, " is not text (binary or not UTF-8)")
    try:
        reader = csv.DictReader(io.StringIO(text, newline=""))
        fields = reader.fieldnames or []
        if "operator" not in fields or "status" not in fields:
            raise DocumentError(
                path, f" has no 'operator' and 'status' columns (found: {', '.join(fields) or 'none'})"
            )
        rows = []
        for lineno, row in enumerate(reader, 2):
            problem = _row_format_problem(row)
            if problem:
                raise DocumentError(path, f":{lineno}: {problem}")
            rows.append((lineno, row))
        return rows
    except csv.Error as e:
        raise DocumentError(path, f" is not valid CSV ({e})") from None


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


PLAN_LIMIT = 64 * 1024 * 1024
# Plan keys that define what a number means: a resumed batch, or another shard of a
# screen, must not change them.
SAME_ON_RESUME = ("settings", "backend", "extra_env", "shard")


def read_plan(batch_dir: Path) -> Optional[dict]:
    """plan.json, or None when the batch has none yet. Raises DocumentError when it is
    not a plan this zlbench reads (unreadable, not JSON, not a plan's shape, a newer
    format); the message names the file and what is wrong."""
    path = plan_path(Path(batch_dir))
    if not os.path.lexists(path):
        return None
    try:
        doc = json.loads(read_bytes_capped(path, PLAN_LIMIT)[0].decode("utf-8"))
    except OSError as e:
        raise DocumentError(path, f": cannot read it ({describe_error(e)})") from None
    except ValueError as e:
        raise DocumentError(path, f" is not valid JSON ({e})") from None
    problem = plan_problem(doc)
    if problem:
        raise DocumentError(path, f" is not a zlbench batch plan ({problem})")
    problem = format_problem(doc, PLAN_FORMAT, "plan")
    if problem:
        raise DocumentError(path, f": {problem}")
    return doc


def write_plan(batch_dir: Path, doc: Mapping[str, Any]) -> None:
    write_atomic(plan_path(batch_dir), json.dumps(_with_format(doc, PLAN_FORMAT), indent=2) + "\n")


def _json_type(value: object) -> str:
    return {
        dict: "object",
        list: "array",
        str: "string",
        bool: "boolean",
        int: "number",
        float: "number",
        type(None): "null",
    }.get(type(value), type(value).__name__)


def plan_problem(doc: object) -> str:
    """What makes ``doc`` unusable as a plan ("" when nothing)."""
    if not isinstance(doc, dict):
        return f"a JSON {_json_type(doc)}, not an object"
    kinds = {
        "ops": list,
        "settings": dict,
        "devices": list,
        "dismissed": dict,
        "op_timeouts": dict,
        "extra_env": dict,
        "sessions": list,
        "fallback_dtypes": list,
    }
    for key, kind in kinds.items():
        if key in doc and not isinstance(doc[key], kind):
            return f"{key} is a JSON {_json_type(doc[key])}"
    if "ops" not in doc:
        return "no ops"
    for item in doc["ops"]:
        if not isinstance(item, dict) or not isinstance(item.get("op"), str):
            return "an ops entry without an operator name"
    if not all(isinstance(d, str) for d in doc.get("devices", [])):
        return "devices are not names"
    return ""


def plan_settings(values: Mapping[str, Any]) -> Dict[str, object]:
    """Settings (name -> value) as plan.json records them: sorted, tuples as lists."""
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in sorted(values.items())}


# Settings that name a path: plan.json records them absolute, so that the children and a
# later --resume find them from any cwd.
PATH_SETTINGS = ("shape_file", "flaggems_dir", "replay_from")


def absolute_settings(settings):
    """``settings`` (knobs.Settings) with its PATH_SETTINGS absolute. Raises ValueError
    naming the flag when a path cannot be resolved (a symlink loop, say)."""
    changes = {}
    for name in PATH_SETTINGS:
        value = settings.values.get(name)
        if value and not os.path.isabs(value):
            try:
                changes[name] = str(resolve_path(value))
            except OSError as e:
                raise ValueError(f"--{name.replace('_', '-')} {value}: {describe_error(e)}") from None
    return settings.replace(**changes) if changes else settings


def caliber_diffs(
    saved: Mapping[str, Any], doc: Mapping[str, Any], fixed: Callable[[str], bool] = lambda name: True
) -> List[str]:
    """What differs between two plan documents in what a number means ("name: a -> b").
    ``fixed(name)``: whether a difference in setting ``name`` counts (the knobs table
    knows which settings a resume may change; this module does not import it)."""
    diffs = []
    for key in SAME_ON_RESUME:
        old, new = saved.get(key), doc.get(key)
        if key == "settings":
            for name in sorted(set(old or {}) | set(new or {})):
                if fixed(name) and (old or {}).get(name) != (new or {}).get(name):
                    diffs.append(f"{name}: {(old or {}).get(name)!r} -> {(new or {}).get(name)!r}")
        elif old != new:
            diffs.append(f"{key}: {old!r} -> {new!r}")
    return diffs


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

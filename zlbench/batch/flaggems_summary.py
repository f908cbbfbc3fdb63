"""A batch's ``summary.json`` in FlagGems' tools/run_tests.py format.

FlagGems' own tools (psum_text, psum_html, psum_web) and its weekly upload read that
file; writing it lets a team open a zlbench batch with them, or put it beside a
run_tests.py run. Each operator's performance entry is built from the benchmark's own
``--record json`` output in its run dir (zlbench's numbers in FlagGems' format), as
run_tests.py builds it; where the run left none, from the batch's status. zlbench runs
no accuracy tests: their entry says NotFound, as run_tests.py's does for an operator
without them. The format: zlbench/corpus/results.py.
"""

from __future__ import annotations

import datetime
import platform
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Sequence

from .. import backends, rundir
from ..atomic import write_json_atomic
from ..corpus import results as fg
from ..safe_read import read_text_capped

# zlbench's operator status -> run_tests.py's performance status, where no record says.
_STATUS = {
    rundir.OK: fg.NOT_FOUND,  # ran, but the corpus wrote no --record json (an older tree)
    rundir.FAILED: fg.FAILED,
    rundir.CRASHED: fg.FAILED,
    rundir.TIMEOUT: fg.TIMEOUT,
    rundir.SKIPPED: fg.SKIPPED,
    rundir.DISMISSED: fg.SKIPPED,
}


def _float(text: object) -> float:
    try:
        return float(str(text))
    except ValueError:
        return 0.0


def _int(text: object) -> Optional[int]:
    try:
        return int(str(text))
    except ValueError:
        return None


def _os_release() -> Dict[str, str]:
    """/etc/os-release's ID and VERSION_ID, as run_tests.py's distro.id()/version()."""
    out: Dict[str, str] = {}
    try:
        text, _ = read_text_capped(Path("/etc/os-release"), 64 * 1024)
    except OSError:
        return out
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key in ("ID", "VERSION_ID"):
            out[key] = value.strip().strip('"')
    return out


def environment(identity: Optional[Mapping[str, Any]], devices: Sequence[str]) -> Dict[str, Any]:
    """run_tests.py's "env" block from a run's run_identity.json."""
    identity = identity or {}
    versions = identity.get("versions") or {}
    device = identity.get("device") or {}
    backend_name = identity.get("backend")
    vendor = None
    if isinstance(backend_name, str):
        try:
            vendor = backends.get_backend(backend_name).gems_vendor
        except backends.UnknownBackend:
            vendor = None
    release = _os_release()
    return {
        "architecture": platform.machine(),
        "os_name": release.get("ID", platform.system().lower()),
        "os_release": release.get("VERSION_ID", platform.release()),
        "python": versions.get("python") or platform.python_version(),
        "torch": {
            "version": versions.get("torch"),
            "device_name": device.get("model", "N/A"),
            "device_count": len(devices),
        },
        # Dicts even when absent: psum_text reads env["triton"]["version"].
        "triton": {"version": versions.get("triton")},
        "flagtree": versions.get("flagtree"),
        "flag_gems": {"version": versions.get("flag_gems"), "vendor": vendor, "device": backend_name},
        "zlbench": {
            "version": identity.get("zlbench_version"),
            "timer": identity.get("timer"),
            "level": identity.get("level"),
        },
    }


def perf_of(op: str, row: Mapping[str, str], batch_dir: Path) -> Dict[str, Any]:
    """One operator's "performance" entry."""
    status = row.get("status", "")
    run_dir = row.get("run_dir") or ""
    record_path = rundir.perf_result_path(batch_dir / run_dir) if run_dir else None
    entry: Dict[str, Any] = {
        "duration": _float(row.get("total_s") or row.get("duration_s") or 0),
        "exit_code": fg.TIMEOUT_EXIT_CODE if status == "timeout" else _int(row.get("exit_code")),
        "data": {},
    }
    record = None
    unreadable = ""
    if status != rundir.TIMEOUT and record_path is not None and record_path.is_file():
        try:
            record = fg.read_record(record_path)
        except fg.ResultFileError as e:  # said in the entry's reason, not dropped
            unreadable = f"{record_path.name} unreadable: {e}"
    if record is not None and op in record:
        entry["data_file"] = str(record_path.relative_to(batch_dir))
        entry.update(fg.perf_entry(op, record))
    else:
        entry["status"] = fg.ERROR if unreadable else _STATUS.get(status, fg.ERROR)
    reason = "; ".join(
        t for t in (row.get("reason", "").strip(), row.get("notes", "").strip(), unreadable) if t
    )
    if status not in (rundir.OK, rundir.SKIPPED, rundir.DISMISSED) and entry["status"] == fg.PASSED:
        # The benchmark said passed, the batch did not believe it (NO_MEASUREMENT, a crash
        # after the session): the batch's word stands.
        entry["status"] = fg.FAILED
    if entry["status"] in (fg.FAILED, fg.SKIPPED, fg.TIMEOUT, fg.ERROR) and not entry.get("reason"):
        # psum_text reads "reason" of every Failed and Skipped entry.
        entry["reason"] = (f"dismissed: {reason}" if status == rundir.DISMISSED else reason) or status
    return entry


def build_summary(
    batch_dir: Path, rows: Mapping[str, Mapping[str, str]], devices: Sequence[str], wall_s: float
) -> Dict[str, Any]:
    identity = None
    for row in rows.values():
        if row.get("run_dir"):
            identity = rundir.read_identity(batch_dir / row["run_dir"]) or None
            if identity:
                break
    results = {}
    for op, row in rows.items():
        results[op] = {
            "performance": perf_of(op, row, batch_dir),
            "zlbench": {"status": row.get("status", ""), "run_dir": row.get("run_dir", "")},
        }
    return fg.summary_document(
        results,
        environment(identity, devices),
        datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S"),
        str(datetime.timedelta(seconds=int(wall_s))),
    )


def write_summary(
    batch_dir: Path, rows: Mapping[str, Mapping[str, str]], devices: Sequence[str], wall_s: float
) -> Path:
    path = rundir.fg_summary_path(batch_dir)
    write_json_atomic(path, build_summary(batch_dir, rows, devices, wall_s))
    return path


def _seconds(text: object) -> float:
    """run_tests.py's "H:MM:SS" (str of a timedelta) in seconds; 0 when unreadable."""
    try:
        parts = [float(p) for p in str(text).split(":")]
    except ValueError:
        return 0.0
    return sum(v * 60**i for i, v in enumerate(reversed(parts))) if len(parts) == 3 else 0.0


def write_screen_summary(
    root: Path, rows: Mapping[str, Mapping[str, str]], shard_dirs: Sequence[Path]
) -> Path:
    """The summary.json of a sharded screen (rows merged, run_dir below ``root``): its
    duration the longest shard's, its devices every shard's."""
    wall, devices = 0.0, []
    for shard in shard_dirs:
        path = rundir.fg_summary_path(shard)
        try:
            doc = fg.read_summary(path) if path.is_file() else {}
        except fg.ResultFileError:
            doc = {}
        wall = max(wall, _seconds(doc.get("total_duration")))
        count = ((doc.get("env") or {}).get("torch") or {}).get("device_count")
        devices += [f"{shard.name}:{i}" for i in range(count if isinstance(count, int) else 0)]
    return write_summary(root, rows, devices, wall)

"""Find the logs behind a summary input: a log file, a run dir, a batch dir, or a
sharded screen.

A run dir holds run.log, run_identity.json and (when the run succeeded) .complete; a
batch dir holds run dirs below it (searched recursively) and ops_status.csv; a sharded
screen holds one batch dir per host shard (screen.py reads it as one batch).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Tuple

from zlbench.rundir import (
    COMPLETE,
    IDENTITY,
    OK,
    PLAN_FILE,
    RESERVED,
    RUN_LOG,
    DocumentError,
    is_complete,
    load_identity,
    read_plan,
    read_status_rows,
    status_path,
)
from zlbench.rundir import STATUS_FILE as OPS_STATUS
from zlbench.runlog import Issue
from zlbench.safe_read import missing_reason
from zlbench.summary.screen import Screen

# The issue kind of an operator ops_status.csv counts as ok whose run dir is gone.
MISSING_RUN_DIR = "missing_run_dir"


class SummaryInputError(Exception):
    """The input holds nothing to summarise; the message names the path and the fix."""


@dataclass
class RunLog:
    log: Path
    run_dir: Path
    # Path of run_dir below the summary root ("." for the root itself): pairs A with B.
    rel: str
    identity: Optional[dict]
    # False for a zlbench run dir without .complete; None where no identity says it is one.
    complete: Optional[bool]


def _walk_logs(root: Path) -> List[Path]:
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        # Earlier attempts and raw attempt logs: their rows are not the batch's result.
        dirnames[:] = sorted(d for d in dirnames if d not in RESERVED)
        if RUN_LOG in filenames:
            found.append(Path(dirpath) / RUN_LOG)
    return found


def _read_identity(run_dir: Path, issues: List[Issue]) -> Optional[dict]:
    """The run's identity; a file that is not one is an issue, and the run reads as
    having none."""
    try:
        return load_identity(run_dir)
    except DocumentError as e:
        issues.append(Issue("bad_identity", f"{IDENTITY}{e.why}", source=str(e.path)))
        return None


def _screen_logs(screen: Screen) -> List[Tuple[Path, Path]]:
    """(log, its shard dir) of every shard; an operator's logs from the shard whose row
    the merged status holds (an operator in two shards is an issue already)."""
    found = []
    for shard in screen.shards.values():
        for log in _walk_logs(shard.path):
            op = Path(os.path.relpath(log.parent, shard.path)).parts[0]
            owner = (screen.rows.get(op) or {}).get("run_dir", "")
            if owner and not owner.startswith(shard.name + "/"):
                continue
            found.append((log, shard.path))
    return found


def find_runs(path: Path, screen: Optional[Screen] = None) -> Tuple[Path, List[RunLog], List[Issue]]:
    """(root, runs, issues) for a log file, a run dir, a batch dir or, when ``screen`` is
    given, the sharded screen at path.

    The root is where summary.csv goes by default: the dir given, or a file's dir. A run's
    ``rel`` in a screen is its path below its shard dir, so that A/B pairs operators
    whatever the shard counts of A and B.
    """
    path = Path(path)
    issues: List[Issue] = []
    if screen is not None:
        issues.extend(screen.issues)
        pairs = _screen_logs(screen)
        if not pairs and not any(shard.started for shard in screen.shards.values()):
            raise SummaryInputError(
                f"no {RUN_LOG} in the shard dirs of {path}: no shard has "
                "measured an operator yet (zlbench slurm status shows why)"
            )
        runs = [_run_log(log, base, issues) for log, base in pairs]
        for shard in screen.shards.values():
            issues.extend(read_ops_status(shard.path))
            issues.extend(_not_run_issues(shard.path, shard.planned, set(shard.rows)))
        return path, runs, issues
    if path.is_file():
        root, logs = path.parent, [path]
    elif path.is_dir():
        root, logs = path, _walk_logs(path)
        # A batch whose every operator failed before writing a run.log is still a batch:
        # its statuses are the failure table.
        if not logs and not is_batch_dir(path):
            raise SummaryInputError(
                f"no {RUN_LOG} under {path}: pass a run.log file, a run dir (from "
                f"`zlbench run`) or a batch dir (from `zlbench batch`)"
            )
    elif os.path.exists(path):
        raise SummaryInputError(
            f"{path} is not a regular file or a directory: pass a run.log file, a run dir or a batch dir"
        )
    else:
        raise SummaryInputError(
            f"{path} {missing_reason(path)}: pass a run.log file, a run dir or a batch dir"
        )
    runs = [_run_log(log, root, issues) for log in logs]
    issues.extend(read_ops_status(root))
    if path.is_dir():
        issues.extend(_plan_not_run(root))
    return root, runs, issues


def is_batch_dir(path: Path) -> bool:
    """A dir `zlbench batch` wrote into: it holds plan.json or ops_status.csv."""
    return any(os.path.lexists(Path(path) / name) for name in (PLAN_FILE, OPS_STATUS))


def _plan_not_run(root: Path) -> List[Issue]:
    """op_not_run issues for the operators of root's plan.json without a status row."""
    try:
        plan = read_plan(root)
    except (OSError, ValueError) as e:
        return [Issue("bad_plan", f"cannot read {PLAN_FILE}: {e}; operators not run are not listed")]
    if not isinstance(plan, dict):
        return []
    planned = [p.get("op") for p in plan.get("ops", []) if isinstance(p, dict)]
    planned += list(plan.get("dismissed") or {})
    return _not_run_issues(root, [op for op in planned if isinstance(op, str)], status_operators(root))


def _not_run_issues(batch_dir: Path, planned: List[str], done: set) -> List[Issue]:
    missing = [op for op in dict.fromkeys(planned) if op not in done]
    return [
        Issue(
            "op_not_run",
            f"planned but not run (no status in {OPS_STATUS}): the batch did not finish; "
            f"continue it with zlbench batch --resume --out {batch_dir}",
            op=op,
            source=str(batch_dir / PLAN_FILE),
        )
        for op in missing
    ]


def status_operators(root: Path) -> set:
    """Operators ops_status.csv has a row for (empty when it is absent or unreadable)."""
    try:
        return {row.get("operator") for _, row in read_status_rows(root) or []}
    except DocumentError:
        return set()


def _run_log(log: Path, base: Path, issues: List[Issue]) -> RunLog:
    run_dir = log.parent
    identity = _read_identity(run_dir, issues)
    complete = None if identity is None else is_complete(run_dir)
    if complete is False:
        issues.append(
            Issue(
                "incomplete_run",
                f"{run_dir} has no {COMPLETE}: the run did not finish successfully",
                source=str(run_dir),
            )
        )
    return RunLog(log, run_dir, os.path.relpath(run_dir, base), identity, complete)


def _missing_run_dir(root: Path, rec: dict) -> str:
    """Why an operator the batch counts as ok has no rows here ("" when it has its run
    dir and run.log): the dir was removed (or never written) after the batch."""
    rel = (rec.get("run_dir") or "").strip()
    if not rel:  # a status file that does not name run dirs
        return ""
    run_dir = root / rel
    if not os.path.isdir(run_dir):
        return f"batch status ok but its run dir {run_dir} is gone; its rows are not in this summary"
    if not os.path.lexists(run_dir / RUN_LOG) and not _walk_logs(run_dir):
        return f"batch status ok but its run dir {run_dir} has no {RUN_LOG}; its rows are not in this summary"
    return ""


def missing_run_dirs(summary) -> List[Issue]:
    """The issues of operators ops_status.csv counts as ok whose run dir (or its
    run.log) is gone: summary, report and history each say so."""
    return [i for i in summary.issues if i.kind == MISSING_RUN_DIR]


def read_ops_status(root: Path) -> List[Issue]:
    """Operators the batch did not measure, from ops_status.csv (none if it is absent)."""
    try:
        rows = read_status_rows(root) or []
    except DocumentError as e:
        return [
            Issue("bad_ops_status", f"{OPS_STATUS}{e.why}; operator outcomes not checked", source=str(e.path))
        ]
    path = str(status_path(root))
    issues = []
    for lineno, rec in rows:
        status = (rec.get("status") or "").strip() or "(empty)"
        if status == OK:
            gone = _missing_run_dir(root, rec)
            if gone:
                issues.append(Issue(MISSING_RUN_DIR, gone, op=rec.get("operator"), line=lineno, source=path))
            continue
        why = "; ".join(t for t in ((rec.get("reason") or "").strip(), (rec.get("notes") or "").strip()) if t)
        issues.append(
            Issue(
                f"op_{status}",
                f"batch status {status}" + (f": {why}" if why else ""),
                op=rec.get("operator"),
                line=lineno,
                source=path,
            )
        )
    return issues

"""Find the logs behind a summary input: a log file, a run dir, a batch dir, or a
sharded screen.

A run dir holds run.log, run_identity.json and (when the run succeeded) .complete; a
batch dir holds run dirs below it (searched recursively) and ops_status.csv; a sharded
screen holds one batch dir per host shard (screen.py reads it as one batch).
"""

from __future__ import annotations

import csv
import io
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Tuple

from zlbench.rundir import COMPLETE, IDENTITY, RESERVED, RUN_LOG, is_complete
from zlbench.rundir import STATUS_FILE as OPS_STATUS
from zlbench.safe_read import describe_error, read_text_capped
from zlbench.summary.parse import Issue
from zlbench.summary.screen import Screen

IDENTITY_LIMIT = 16 * 1024 * 1024
STATUS_LIMIT = 64 * 1024 * 1024
OK_STATUS = "ok"


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
    path = run_dir / IDENTITY
    if not os.path.lexists(path):
        return None
    try:
        identity = json.loads(read_text_capped(path, IDENTITY_LIMIT)[0])
    except OSError as e:
        issues.append(Issue("bad_identity", f"cannot read {IDENTITY}: {describe_error(e)}", source=str(path)))
        return None
    except ValueError as e:
        issues.append(Issue("bad_identity", f"cannot read {IDENTITY}: {e}", source=str(path)))
        return None
    if not isinstance(identity, dict):
        issues.append(Issue("bad_identity", f"{IDENTITY} is not a JSON object", source=str(path)))
        return None
    return identity


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
        if not pairs:
            raise SummaryInputError(
                f"no {RUN_LOG} in the shard dirs of {path}: no shard has "
                "measured an operator yet (zlbench slurm status shows why)"
            )
        runs = [_run_log(log, base, issues) for log, base in pairs]
        for shard in screen.shards.values():
            issues.extend(read_ops_status(shard.path))
        return path, runs, issues
    if path.is_file():
        root, logs = path.parent, [path]
    elif path.is_dir():
        root, logs = path, _walk_logs(path)
        if not logs:
            raise SummaryInputError(
                f"no {RUN_LOG} under {path}: pass a run.log file, a run dir (from "
                f"`zlbench run`) or a batch dir (from `zlbench batch`)"
            )
    elif os.path.exists(path):
        raise SummaryInputError(
            f"{path} is not a regular file or a directory: pass a run.log file, a run dir or a batch dir"
        )
    else:
        raise SummaryInputError(f"{path} does not exist: pass a run.log file, a run dir or a batch dir")
    runs = [_run_log(log, root, issues) for log in logs]
    issues.extend(read_ops_status(root))
    return root, runs, issues


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


def read_ops_status(root: Path) -> List[Issue]:
    """Operators the batch did not measure, from ops_status.csv (none if it is absent)."""
    path = root / OPS_STATUS
    if not os.path.lexists(path):
        return []
    try:
        text, _ = read_text_capped(path, STATUS_LIMIT)
    except OSError as e:
        return [
            Issue(
                "bad_ops_status",
                f"cannot read {OPS_STATUS}: {describe_error(e)}; operator outcomes not checked",
                source=str(path),
            )
        ]
    if "\0" in text or "\ufffd" in text:
        return [
            Issue(
                "bad_ops_status",
                f"{OPS_STATUS} is not text (binary or not UTF-8); operator outcomes not checked",
                source=str(path),
            )
        ]
    try:
        reader = csv.DictReader(io.StringIO(text, newline=""))
        fields = reader.fieldnames or []
        if "operator" not in fields or "status" not in fields:
            return [
                Issue(
                    "bad_ops_status",
                    f"{OPS_STATUS} has no 'operator' and 'status' columns (found: "
                    f"{', '.join(fields) or 'none'}); operator outcomes not checked",
                    source=str(path),
                )
            ]
        issues = []
        for lineno, rec in enumerate(reader, 2):
            status = (rec.get("status") or "").strip() or "(empty)"
            if status == OK_STATUS:
                continue
            why = "; ".join(
                t for t in ((rec.get("reason") or "").strip(), (rec.get("notes") or "").strip()) if t
            )
            issues.append(
                Issue(
                    f"op_{status}",
                    f"batch status {status}" + (f": {why}" if why else ""),
                    op=rec.get("operator"),
                    line=lineno,
                    source=str(path),
                )
            )
        return issues
    except csv.Error as e:
        return [
            Issue(
                "bad_ops_status",
                f"{OPS_STATUS} is not valid CSV ({e}); operator outcomes not checked",
                source=str(path),
            )
        ]

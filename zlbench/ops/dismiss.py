"""The dismiss list: operators a batch does not run, each with why and how we know.

``ops/dismiss.yaml``::

    dismissed:
      - operator: <mark in the inventory>
        reason: <why it is not run>
        verified:
          date: YYYY-MM-DD
          backend: cuda | musa | ...
          seen: <what was observed, e.g. the error line>
        inventory: flaggems          # optional; which inventory names the operator

Batch shows dismissed operators with their reason instead of skipping them silently.
"""

from __future__ import annotations

import datetime as _dt
from pathlib import Path
from typing import Any, Dict, List, Optional, Union

from ..opsdata import OpsDataError, dismiss_path, read_yaml

REQUIRED_VERIFIED = ("date", "backend", "seen")


class DismissError(OpsDataError):
    pass


def load_dismiss(path: Optional[Union[str, Path]] = None) -> Dict[str, Dict[str, Any]]:
    """``{operator: entry}``; raises DismissError naming every invalid entry."""
    path = Path(path) if path else dismiss_path()
    data = read_yaml(path, DismissError, f"no dismiss list at {path}; create it with `dismissed: []`")
    if data is None:
        data = {"dismissed": []}
    if not isinstance(data, dict) or not isinstance(data.get("dismissed", None), list):
        raise DismissError(f"{path}: the top level must be `dismissed:` followed by a list of entries")
    out: Dict[str, Dict[str, Any]] = {}
    problems: List[str] = []
    for i, entry in enumerate(data["dismissed"]):
        where = f"{path}: entry {i + 1}"
        errors = entry_errors(entry)
        if not errors and entry["operator"] in out:
            errors = [f"operator {entry['operator']!r} is listed twice; keep one entry"]
        if errors:
            name = entry.get("operator") if isinstance(entry, dict) else None
            problems += [f"{where}{f' ({name})' if name else ''}: {e}" for e in errors]
            continue
        out[entry["operator"]] = entry
    if problems:
        raise DismissError("invalid dismiss list:\n  " + "\n  ".join(problems))
    return out


def entry_errors(entry: Any) -> List[str]:
    if not isinstance(entry, dict):
        return ["must be a mapping with operator, reason and verified"]
    errors = []
    if not _text(entry.get("operator")):
        errors.append("needs `operator:` (the operator mark)")
    if not _text(entry.get("reason")):
        errors.append("needs a non-empty `reason:` saying why it is not run")
    verified = entry.get("verified")
    if not isinstance(verified, dict):
        errors.append("needs `verified: {date, backend, seen}` saying how it was checked")
    else:
        for key in REQUIRED_VERIFIED:
            if key == "date":
                if not _is_date(verified.get("date")):
                    errors.append("verified.date must be a date, YYYY-MM-DD")
            elif not _text(verified.get(key)):
                errors.append(f"verified.{key} is missing or empty")
    return errors


def check_against_inventory(dismissed: Dict[str, Dict[str, Any]], inventory: Dict[str, Any]) -> List[str]:
    """Entries naming an operator the inventory does not have."""
    ops = inventory["ops"]
    repo = inventory.get("repo", "?")
    return [
        f"dismissed operator {op!r} is not in the {repo} inventory; fix the name or drop the entry"
        for op, entry in sorted(dismissed.items())
        if entry.get("inventory", repo) == repo and op not in ops
    ]


def _text(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip())


def _is_date(value: Any) -> bool:
    if isinstance(value, _dt.date):
        return True
    if isinstance(value, str):
        try:
            _dt.date.fromisoformat(value)
            return True
        except ValueError:
            return False
    return False

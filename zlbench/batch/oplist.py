"""Which operators a batch runs: --ops, --op-list FILE, per-operator timeouts, and the
dismiss list.

Op list file: one operator per line, optionally followed by its own timeout in
seconds (``mm 1800``); blank lines and ``#`` comments are ignored::

    abs
    mm      1800   # autotuning takes long
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from ..rundir import BATCH_NAMES, SHARD_DIR_RE
from ..safe_read import describe_error, read_bytes_capped
from .state import BatchError

OP_LIST_LIMIT = 16 * 1024 * 1024

# Operator names become directory names under the batch dir: no separators, no "..",
# no leading dot (the batch's own hidden files), nothing longer than a file name.
_OP_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]{0,199}$")


def op_name_problem(op: object) -> str:
    """Why ``op`` cannot name an operator's run dir ("" when it can)."""
    if not isinstance(op, str) or not _OP_NAME.match(op):
        return "letters, digits, _ . + - only, starting with a letter, digit or _"
    if op in BATCH_NAMES or any(op.startswith(name + ".") for name in BATCH_NAMES) or SHARD_DIR_RE.match(op):
        return "the batch's own files take that name"
    return ""


def check_op_name(op: str, where: str) -> str:
    why = op_name_problem(op)
    if why:
        raise BatchError(
            f"{where}: {op!r} is not an operator name ({why}; reserved: {', '.join(sorted(BATCH_NAMES))})"
        )
    return op


def parse_ops_flag(text: Optional[str]) -> List[str]:
    """``--ops a,b c`` -> [a, b, c]."""
    if not text:
        return []
    return [check_op_name(p, "--ops") for p in re.split(r"[,\s]+", text) if p]


def read_op_list(path: Path) -> Tuple[List[str], Dict[str, float]]:
    """Operators of an op list file, in order, and the timeouts it sets."""
    try:
        text = read_bytes_capped(path, OP_LIST_LIMIT)[0].decode("utf-8")
    except OSError as e:
        raise BatchError(f"--op-list {path}: cannot read it ({describe_error(e)})") from None
    except UnicodeDecodeError:
        raise BatchError(
            f"--op-list {path}: not a text file (not UTF-8); give one operator name a line"
        ) from None
    if "\0" in text:
        raise BatchError(f"--op-list {path}: not a text file (NUL bytes); give one operator name a line")
    ops: List[str] = []
    timeouts: Dict[str, float] = {}
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        where = f"--op-list {path}:{n}"
        if len(parts) > 2:
            raise BatchError(f"{where}: expected '<operator> [timeout seconds]', got {raw.strip()!r}")
        ops.append(check_op_name(parts[0], where))
        if len(parts) == 2:
            timeouts[parts[0]] = parse_seconds(parts[1], where)
    return ops, timeouts


def parse_seconds(text: str, where: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise BatchError(f"{where}: {text!r} is not a number of seconds") from None
    return check_seconds(value, where)


def check_seconds(value: float, where: str) -> float:
    """A finite, non-negative number of seconds (inf, nan and 1e400 are refused: a wait
    on them overflows after the child has started)."""
    if not math.isfinite(value):
        raise BatchError(f"{where}: {value!r} is not a finite number of seconds (0 means none)")
    if value < 0:
        raise BatchError(f"{where}: a timeout must not be negative (0 means none)")
    return value


def parse_op_timeouts(items: Sequence[str]) -> Dict[str, float]:
    """``--op-timeout mm=1800`` (repeatable)."""
    out: Dict[str, float] = {}
    for item in items:
        op, sep, secs = item.partition("=")
        if not sep:
            raise BatchError(f"--op-timeout {item!r}: expected OP=SECONDS, e.g. --op-timeout mm=1800")
        out[check_op_name(op.strip(), "--op-timeout")] = parse_seconds(secs.strip(), f"--op-timeout {item}")
    return out


def dedupe(ops: Sequence[str]) -> List[str]:
    return list(dict.fromkeys(ops))


def default_dismiss_path() -> Optional[Path]:
    """ops/dismiss.yaml of the ops data dir (ZL_OPS_DIR or the checkout's ops/), else
    ./ops/dismiss.yaml; None when neither exists (the list is optional)."""
    from zlbench.opsdata import OpsDataError, dismiss_path

    candidates = [Path("ops") / "dismiss.yaml"]
    try:
        candidates.insert(0, dismiss_path())
    except OpsDataError:
        pass
    return next((p for p in candidates if p.is_file()), None)


def load_dismiss(path: Path) -> Dict[str, str]:
    """operator -> why it is dismissed, read by zlbench.ops.dismiss (the format is defined there)."""
    from zlbench.ops.dismiss import DismissError
    from zlbench.ops.dismiss import load_dismiss as load_entries

    try:
        entries = load_entries(Path(path))
    except DismissError as e:
        raise BatchError(f"--dismiss {path}: {e}") from None
    return {op: str(entry.get("reason", "")).strip() for op, entry in entries.items()}

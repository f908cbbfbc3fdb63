"""The batch plan: which host shard and which device measure an operator, and with what.

With h the first 8 bytes of SHA-256 of the name, an operator belongs to host shard
``h % N`` (``--shard K/N``; N=1 without it) and, within its shard, goes to
``devices[(h // N) % len(devices)]`` with the devices in numeric order. Dividing by N
first keeps the two choices independent: without it, shard K would only ever see the
devices d with d = K mod gcd(N, len(devices)). Python's ``hash()`` is salted per process,
and list positions change when the corpus grows; neither is used, so an A and a B
screen with the same N and device list measure each operator on the same host shard
and the same card.

With durations from an earlier batch (``--balance-from``), the shard's operators are
instead dealt longest first to the least-loaded device (LPT), ties broken by name and
device order, so the same durations give the same assignment on side A and side B.
The host shard is still chosen by the hash first: balancing only places its operators.
"""

from __future__ import annotations

import hashlib
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from .. import rundir
from ..markers import AUTOTUNE_REPLAY_NONE, format_marker


def stable_hash(op: str) -> int:
    return int.from_bytes(hashlib.sha256(op.encode("utf-8")).digest()[:8], "big")


def device_order(devices: Sequence[str]) -> List[str]:
    """Distinct devices, numerically where they are numbers: 7,6 and 6,7 plan alike."""
    return sorted(set(devices), key=lambda d: (0, int(d), "") if d.isdigit() else (1, 0, d))


@dataclass(frozen=True)
class HostShard:
    """Shard ``index`` of ``count`` (``--shard K/N``): the operators with h % N == K."""

    index: int
    count: int

    def __post_init__(self):
        if not 0 <= self.index < self.count:
            raise ValueError(f"shard {self.index}/{self.count}: need 0 <= K < N")

    def holds(self, op: str) -> bool:
        return stable_hash(op) % self.count == self.index

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


WHOLE = HostShard(0, 1)


def shard(ops: Sequence[str], devices: Sequence[str], host: HostShard = WHOLE) -> Dict[str, str]:
    """Device of each operator (all of ``ops``; the caller keeps its host shard's)."""
    ordered = device_order(devices)
    if not ordered:
        raise ValueError("no device to shard over")
    return {op: ordered[(stable_hash(op) // host.count) % len(ordered)] for op in ops}


def balance(ops: Sequence[str], devices: Sequence[str], durations: Mapping[str, float]) -> Dict[str, str]:
    """Longest-processing-time-first: each operator, longest first (ties by name), to the
    device with the least planned work (ties by device order). An operator without a
    duration is planned at the median of the known ones."""
    ordered = device_order(devices)
    if not ordered:
        raise ValueError("no device to shard over")
    estimate = estimated_durations(ops, durations)
    load = {d: 0.0 for d in ordered}
    where: Dict[str, str] = {}
    for op in sorted(estimate, key=lambda o: (-estimate[o], o)):
        device = min(ordered, key=lambda d: load[d])  # min() keeps the first of equals
        where[op] = device
        load[device] += estimate[op]
    return where


def estimated_durations(ops: Sequence[str], durations: Mapping[str, float]) -> Dict[str, float]:
    known = [durations[op] for op in ops if op in durations]
    fallback = statistics.median(known) if known else 1.0
    return {op: float(durations.get(op, fallback)) for op in ops}


def makespan(where: Mapping[str, str], durations: Mapping[str, float]) -> float:
    """The busiest device's planned seconds."""
    load: Dict[str, float] = {}
    for op, device in where.items():
        load[device] = load.get(device, 0.0) + durations[op]
    return max(load.values(), default=0.0)


@dataclass(frozen=True)
class OpPlan:
    op: str
    device: str
    timeout_s: Optional[float]  # None: no limit
    replay_from: Optional[str] = None  # autotune_records/ dir for this op
    replay_note: Optional[str] = None  # marker line when replay was asked but has no records


@dataclass
class Plan:
    ops: List[OpPlan]
    devices: List[str]
    dismissed: Dict[str, str]  # op -> reason
    # Seconds each op is expected to take (--balance-from); empty without durations.
    expected: Dict[str, float] = field(default_factory=dict)

    def queues(self) -> Dict[str, List[OpPlan]]:
        """Per device, its operators in name order (one measurement per card at a time)."""
        out: Dict[str, List[OpPlan]] = {d: [] for d in self.devices}
        for item in sorted(self.ops, key=lambda p: p.op):
            out[item.device].append(item)
        return out


def replay_for(
    op: str, replay_root: Optional[Path], replay_dirs: Mapping[str, Path]
) -> Tuple[Optional[str], Optional[str]]:
    """(records dir, marker line). An explicit per-op dir wins over <root>/<op>/."""
    if op in replay_dirs:
        return str(Path(replay_dirs[op]).resolve()), None
    if replay_root is None:
        return None, None
    records = rundir.records_dir(Path(replay_root) / op)
    if records.is_dir() and any(records.glob("*.json")):
        return str(records.resolve()), None
    return None, format_marker(AUTOTUNE_REPLAY_NONE, op=op, reason="no_records")


def make_plan(
    ops: Sequence[str],
    devices: Sequence[str],
    dismissed: Mapping[str, str],
    timeout_s: Optional[float],
    op_timeouts: Mapping[str, float],
    replay_root: Optional[Path] = None,
    replay_dirs: Optional[Mapping[str, Path]] = None,
    host: HostShard = WHOLE,
    durations: Optional[Mapping[str, float]] = None,
) -> Plan:
    """The plan of host shard ``host``: only its operators (dismissed ones too) appear.
    ``durations`` (seconds per op, from an earlier batch): balance them over the devices
    instead of hashing."""
    ordered = device_order(devices)
    ops = [op for op in ops if host.holds(op)]
    to_run = [op for op in ops if op not in dismissed]
    if not to_run:
        where: Dict[str, str] = {}
    elif durations is not None:
        where = balance(to_run, ordered, durations)
    else:
        where = shard(to_run, ordered, host)
    items = []
    for op in sorted(to_run):
        limit = op_timeouts.get(op, timeout_s)
        replay, note = replay_for(op, replay_root, replay_dirs or {})
        items.append(OpPlan(op, where[op], limit or None, replay, note))
    listed = set(ops)
    shown = {op: reason for op, reason in dismissed.items() if op in listed}
    expected = estimated_durations(to_run, durations) if durations is not None else {}
    return Plan(items, ordered, dict(sorted(shown.items())), expected)

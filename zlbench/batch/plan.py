"""The batch plan: which host shard and which device measure an operator, and with what.

With h the first 8 bytes of SHA-256 of the name, an operator belongs to host shard
``h % N`` (``--shard K/N``; N=1 without it) and, within its shard, goes to
``devices[(h // N) % len(devices)]`` with the devices in numeric order. Dividing by N
first keeps the two choices independent: without it, shard K would only ever see the
devices d with d = K mod gcd(N, len(devices)). Python's ``hash()`` is salted per process,
and list positions change when the corpus grows; neither is used, so an A and a B
screen with the same N and device list measure each operator on the same host shard
and the same card.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

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


@dataclass(frozen=True)
class OpPlan:
    op: str
    device: str
    timeout_s: Optional[float]          # None: no limit
    replay_from: Optional[str] = None   # autotune_records/ dir for this op
    replay_note: Optional[str] = None   # marker line when replay was asked but has no records


@dataclass
class Plan:
    ops: List[OpPlan]
    devices: List[str]
    dismissed: Dict[str, str]           # op -> reason

    def queues(self) -> Dict[str, List[OpPlan]]:
        """Per device, its operators in name order (one measurement per card at a time)."""
        out: Dict[str, List[OpPlan]] = {d: [] for d in self.devices}
        for item in sorted(self.ops, key=lambda p: p.op):
            out[item.device].append(item)
        return out

    def by_op(self) -> Dict[str, OpPlan]:
        return {p.op: p for p in self.ops}


def replay_for(op: str, replay_root: Optional[Path],
               replay_dirs: Mapping[str, Path]) -> Tuple[Optional[str], Optional[str]]:
    """(records dir, marker line). An explicit per-op dir wins over <root>/<op>/."""
    if op in replay_dirs:
        return str(Path(replay_dirs[op]).resolve()), None
    if replay_root is None:
        return None, None
    records = Path(replay_root) / op / "autotune_records"
    if records.is_dir() and any(records.glob("*.json")):
        return str(records.resolve()), None
    return None, format_marker(AUTOTUNE_REPLAY_NONE, op=op, reason="no_records")


def make_plan(ops: Sequence[str], devices: Sequence[str], dismissed: Mapping[str, str],
              timeout_s: Optional[float], op_timeouts: Mapping[str, float],
              replay_root: Optional[Path] = None,
              replay_dirs: Optional[Mapping[str, Path]] = None,
              host: HostShard = WHOLE) -> Plan:
    """The plan of host shard ``host``: only its operators (dismissed ones too) appear."""
    ordered = device_order(devices)
    ops = [op for op in ops if host.holds(op)]
    to_run = [op for op in ops if op not in dismissed]
    where = shard(to_run, ordered, host) if to_run else {}
    items = []
    for op in sorted(to_run):
        limit = op_timeouts.get(op, timeout_s)
        replay, note = replay_for(op, replay_root, replay_dirs or {})
        items.append(OpPlan(op, where[op], limit or None, replay, note))
    listed = set(ops)
    shown = {op: reason for op, reason in dismissed.items() if op in listed}
    return Plan(items, ordered, dict(sorted(shown.items())))

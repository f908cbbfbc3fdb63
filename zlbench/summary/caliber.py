"""Do two runs measure the same way? Compare their run_identity.json calibers.

An A/B across different calibers (bench level, timer, tuner cache, ...) compares the
measurement, not the build, so `--ab` refuses it unless told otherwise.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from zlbench.knobs import KNOBS
from zlbench.runlog import Row
from zlbench.summary.sources import RunLog

UNKNOWN = "unknown"
# (label, path into run_identity.json)
CALIBER_FIELDS: Tuple[Tuple[str, Tuple[str, ...]], ...] = (
    ("level", ("level",)),
    ("timer", ("timer",)),
    ("tuner_cache", ("tuner_cache",)),
    ("autotune_mode", ("autotune_mode",)),
    ("repeat", ("repeat",)),
    ("backend", ("backend",)),
    ("device model", ("device", "model")),
)
# Which device of a sharded batch an operator ran on is not how it was measured; the
# device model is compared instead.
NOT_COMPARED_KNOBS = {k.env for k in KNOBS if k.name == "device"}


@dataclass(frozen=True)
class CaliberDiff:
    field: str
    a: str
    b: str

    def __str__(self) -> str:
        return f"{self.field}: A={self.a} B={self.b}"


def _lookup(identity: Optional[dict], path: Sequence[str]) -> str:
    node = identity
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return UNKNOWN
        node = node[key]
    text = node if isinstance(node, str) else json.dumps(node)
    if path == ("tuner_cache",):
        # "shared:<sqlite path>": where the shared cache lives is not how it was used.
        text = text.split(":", 1)[0]
    return text


def caliber_values(identity: Optional[dict]) -> Dict[str, str]:
    """How one run measured: every caliber field and knob that compare_calibers compares,
    as text ("unknown" where the identity does not say)."""
    values = {label: _lookup(identity, path) for label, path in CALIBER_FIELDS}
    knobs = (identity or {}).get("knobs") or {}
    for name in sorted(set(knobs) - NOT_COMPARED_KNOBS):
        values[f"knobs.{name}"] = _lookup(knobs, (name,))
    return values


def batch_caliber(runs: Sequence[RunLog]) -> Dict[str, str]:
    """The caliber of a whole input: each field's value where every run agrees, else
    "mixed: <value> (<n> runs), ..." so a page never shows one run's value as all's."""
    seen: Dict[str, Dict[str, int]] = {}
    for run in runs:
        for name, value in caliber_values(run.identity).items():
            counts = seen.setdefault(name, {})
            counts[value] = counts.get(value, 0) + 1
    out = {}
    for name, counts in seen.items():
        if len(counts) == 1:
            out[name] = next(iter(counts))
        else:
            out[name] = "mixed: " + ", ".join(
                f"{v} ({n} runs)" for v, n in sorted(counts.items(), key=lambda kv: -kv[1])
            )
    return out


def compare_calibers(a: Optional[dict], b: Optional[dict]) -> List[CaliberDiff]:
    """Caliber fields (and every knob) whose values differ between two identities.

    A key missing on one side (an older run) reads "unknown" and counts as a difference:
    nothing says the two runs agree on it.
    """
    va, vb = caliber_values(a), caliber_values(b)
    fields = [label for label, _ in CALIBER_FIELDS]
    fields += sorted((set(va) | set(vb)) - set(fields))
    diffs = []
    for name in fields:
        x, y = va.get(name, UNKNOWN), vb.get(name, UNKNOWN)
        if x != y:
            diffs.append(CaliberDiff(name, x, y))
    return diffs


@dataclass
class CaliberReport:
    # Differences every run pair shares, reported once.
    common: List[CaliberDiff] = field(default_factory=list)
    # The rest, by the run dir's path below its root ("a vs b" where the paths differ).
    per_run: Dict[str, List[CaliberDiff]] = field(default_factory=dict)
    # Why some of it could not be checked.
    notes: List[str] = field(default_factory=list)

    @property
    def mismatch(self) -> bool:
        return bool(self.common or self.per_run)

    def drop(self, names: Sequence[str]) -> None:
        """Leave out the differences whose field names one of ``names``."""

        def keep(diff: CaliberDiff) -> bool:
            return not any(name in diff.field for name in names)

        self.common = [d for d in self.common if keep(d)]
        self.per_run = {k: kept for k, v in self.per_run.items() if (kept := [d for d in v if keep(d)])}


# A side that replays another side's autotuned configs (--replay-from) differs from the
# side that recorded them in these alone, by design: zlbench ab's B, and its re-checks.
REPLAY_DIFFS = ("autotune_mode", next(k.env for k in KNOBS if k.name == "replay_from"), "replay_from")


def _printed(rows: Sequence[Row], attr: str) -> str:
    return ",".join(sorted({getattr(r, attr) for r in rows})) or UNKNOWN


def _label(a: RunLog, b: RunLog) -> str:
    return a.rel if a.rel == b.rel else f"{a.rel} vs {b.rel}"


def compare_run_pairs(
    pairs: Sequence[Tuple[RunLog, RunLog]], a_rows: Sequence[Row], b_rows: Sequence[Row]
) -> CaliberReport:
    """Caliber differences of the runs whose rows are compared: per pair and, once, the
    differences every pair shares. ``a_rows``/``b_rows`` give the printed mode and level."""
    report = CaliberReport()
    if not pairs:
        report.notes.append("no row of A pairs with a row of B: calibers not compared")
    elif not any(ra.identity or rb.identity for ra, rb in pairs):
        report.notes.append(
            "no run_identity.json on either side: level, timer, tuner cache, autotune "
            "mode, repeat, backend and device were not checked"
        )
    else:
        per_pair = {_label(ra, rb): compare_calibers(ra.identity, rb.identity) for ra, rb in pairs}
        shared = set.intersection(*(set(d) for d in per_pair.values()))
        report.common = [d for d in next(iter(per_pair.values())) if d in shared]
        for label, diffs in per_pair.items():
            own = [d for d in diffs if d not in shared]
            if own:
                report.per_run[label] = own
    # The tables themselves print mode and level; old logs have nothing else.
    for attr in ("mode", "level"):
        va, vb = _printed(a_rows, attr), _printed(b_rows, attr)
        if va != vb and not any(d.field == attr for d in report.common):
            report.common.append(CaliberDiff(f"{attr} (printed in the tables)", va, vb))
    return report

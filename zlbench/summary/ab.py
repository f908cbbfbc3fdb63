"""Pair two runs row by row and give B's gain over A from gems latency.

gain = A_ms / B_ms - 1, the convention of compiler PRs: positive means B is faster.
Only rows measured on both sides count; everything else is counted and listed, so an
incomplete pairing never reads as a complete range.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from zlbench.corpus.results import canonical_shape
from zlbench.markers import DEVICE_THROTTLED, DIRECT_TIMER_UNTRACED, NO_DEVICE_WORK, POWER_CAP_WINDOW, Marker
from zlbench.runlog import Row
from zlbench.stats import geomean, quantile
from zlbench.summary.caliber import CaliberReport, compare_run_pairs
from zlbench.summary.rows import Summary, summarize
from zlbench.summary.sources import RunLog
from zlbench.summary.verdict import (
    DEFAULT_NOISE_FLOOR,
    FASTER,
    SAME,
    SLOWER,
    UNKNOWN,
    VERDICTS,
    Verdict,
    verdict,
)

Key = Tuple[str, str, str]


@dataclass
class PairedRow:
    a: Row
    b: Row
    gain: float
    # Either side was timed by the direct timer after a failed capture.
    fallback: bool
    verdict: Verdict = Verdict(UNKNOWN, None, None, "not judged")
    # What a re-check in fresh processes made of a SLOWER or FASTER verdict
    # (``apply_recheck``): one of RECHECK_OUTCOMES (None when not asked) and what it read.
    recheck_outcome: Optional[str] = None
    recheck_read: str = ""
    # Which printing of its key this is (0 for the first): keys printed twice pair in order.
    occurrence: int = 0

    @property
    def key(self) -> Key:
        return self.a.key

    @property
    def recheck(self) -> Optional[str]:
        """The re-check's outcome and what it read, as the views print it; None without one."""
        if self.recheck_outcome is None:
            return None
        return f"{self.recheck_outcome} ({self.recheck_read})" if self.recheck_read else self.recheck_outcome


def autotune_changes(p: PairedRow) -> List[str]:
    """Kernel keys of the gems side that A and B ran with different autotuned configs,
    as ``<kernel> <key>: <config A> -> <config B>``. Such a row's change may be the
    autotuner's pick, not the code: pin the configs with ``--replay-from`` to tell."""
    a, b = p.a.gems_autotune or {}, p.b.gems_autotune or {}
    return [f"{k}: {a[k]} -> {b[k]}" for k in sorted(a.keys() & b.keys()) if a[k] != b[k]]


# How near two placements' own medians, one of each side, must lie to read as one level:
# each placement's replays lay within 0.2% on the rows seen (lerp_tensor, below).
SHARED_LEVEL = 0.005


def shared_placement_level(p: PairedRow) -> str:
    """For a SLOWER or FASTER row (or one a re-check found SAME): a placement of A and
    one of B whose own medians (``Row.gems_placement_ms``) lie within SHARED_LEVEL of
    each other while one of them lies beyond the verdict's threshold from its own side's
    figure, as ``A 0.04478 ms, B 0.04477 ms``; empty where none do. That side's
    placements then fall at two levels, and the other side ran at one of them: FlagGems'
    lerp_tensor bf16 64x512x512 reads 0.0448 or 0.0525 ms at a placement, all 8 fast in
    one H100 process and 7 of 8 slow in the next (SLOWER +17.2%, not reproduced).
    Placements merely spread as wide as the change share no such level. The verdict
    stands, as with an autotuner's other pick: a build's change the size of a far-off
    placement's offset can still read so, and the re-check in fresh processes decides."""
    v = p.verdict
    if not (v.real or p.recheck_outcome) or v.threshold is None:
        return ""
    a, b = p.a.gems_placement_ms, p.b.gems_placement_ms
    a_ms, b_ms = p.a.gems_ms, p.b.gems_ms
    if not a or not b or not a_ms or not b_ms:
        return ""

    def apart(x: float, y: float) -> float:
        return abs(x / y - 1.0)

    near = sorted(((x, y) for x in a for y in b if x > 0 and y > 0), key=lambda xy: apart(*xy))
    for x, y in near:
        if apart(x, y) > SHARED_LEVEL:
            break
        if apart(x, a_ms) > v.threshold or apart(y, b_ms) > v.threshold:
            return f"A {x:.4g} ms, B {y:.4g} ms"
    return ""


@dataclass
class NotComparable:
    a: Row
    b: Row
    reason: str


@dataclass
class GainRange:
    name: str
    count: int
    min: Optional[float]
    median: Optional[float]
    max: Optional[float]
    geomean: Optional[float]
    fallback_rows: int
    # Rows per verdict (zlbench.summary.verdict): how many changed for real.
    slower: int = 0
    faster: int = 0
    same: int = 0
    unknown: int = 0
    # Of the unknown: rows measured while the machine was slowed down (either side).
    throttled: int = 0
    # The median gain of the torch rows beside them, over the rows compared on device
    # time: FlagGems' torch reference runs in the same process, so where A and B ran the
    # same torch, what moved it is the machine between the runs, not the build.
    torch_gain: Optional[float] = None

    @property
    def other_unknown(self) -> int:
        """UNKNOWN for another reason than a slowed-down machine (no spread, two clocks)."""
        return self.unknown - self.throttled


RowSpot = Tuple[Key, int]  # (op, dtype, canonical shape), which printing of it


def row_spot(row: Row, occurrence: int) -> RowSpot:
    """A row's key with its shape in one spelling (a FlagGems result file's and a run
    log's meet), and which printing of that key it is: what a row floor is filed under."""
    return (row.op, row.dtype, canonical_shape(row.shape)), occurrence


@dataclass(frozen=True)
class NoiseFloor:
    """The A/A floor a verdict used and where it came from (one line for people).

    ``rows``: rows whose own A/A moved beyond ``value`` when it was measured (zlbench
    noise), each with its own floor; ``per_row``: this is such a row's floor."""

    value: float
    source: str
    rows: Mapping[RowSpot, float] = field(default_factory=dict, compare=False, hash=False)
    per_row: bool = False


@dataclass
class ABResult:
    a: Summary
    b: Summary
    caliber: CaliberReport = field(default_factory=CaliberReport)
    pairs: List[PairedRow] = field(default_factory=list)
    only_a: List[Row] = field(default_factory=list)
    only_b: List[Row] = field(default_factory=list)
    not_comparable: List[NotComparable] = field(default_factory=list)
    # Keys printed more than once on a side; paired in the order they were printed.
    duplicate_keys: int = 0
    by_op: List[GainRange] = field(default_factory=list)
    overall: Optional[GainRange] = None
    # |gain| median and p95: the noise floor an A/A pair shows.
    noise_median: Optional[float] = None
    noise_p95: Optional[float] = None
    # The floor the verdicts used (where no run has its own), where it came from, and
    # why every verdict is UNKNOWN when it is so.
    noise_floor: float = DEFAULT_NOISE_FLOOR
    floor_source: str = "default"
    # Floors by A's run dir, where a recorded floor (zlbench noise) applies to that run.
    run_floors: Dict[str, NoiseFloor] = field(default_factory=dict)
    same_run: bool = False

    def floor_for(self, pair: "PairedRow") -> NoiseFloor:
        """The floor of A's run (recorded, else the fallback), or the row's own where its
        own A/A moved beyond that: a row that sits at another level in each process of
        one build (cumsum int32 1024x1024 on an H100: 7.49-7.98 us over four batches at
        spreads of 0.3%) is judged by how far it moves, not by the machine's p99."""
        run = self.run_floors.get(pair.a.run_dir) or NoiseFloor(self.noise_floor, self.floor_source)
        if not run.rows:
            return run
        own = run.rows.get(row_spot(pair.a, pair.occurrence))
        if own is None or own <= run.value:
            return run
        return NoiseFloor(own, f"the row's own A/A in {run.source}", per_row=True)

    def floors_used(self) -> List[Tuple[NoiseFloor, int]]:
        """Each distinct floor the verdicts used, with how many rows were judged by it
        (rows with a threshold); the rows' own floors as one, at the largest of them."""
        counts: Dict[NoiseFloor, int] = {}
        own: Dict[str, List[float]] = {}
        for p in self.pairs:
            if p.verdict.threshold is None:
                continue
            f = self.floor_for(p)
            if f.per_row:
                own.setdefault(f.source, []).append(f.value)
            else:
                counts[f] = counts.get(f, 0) + 1
        for source, values in own.items():
            counts[NoiseFloor(max(values), source, per_row=True)] = len(values)
        if not counts:
            # No row judged (all UNKNOWN): the floors they would have had, at 0 rows.
            counts = {self.floor_for(p): 0 for p in self.pairs if not self.floor_for(p).per_row}
            counts = counts or {NoiseFloor(self.noise_floor, self.floor_source): 0}
        return sorted(counts.items(), key=lambda kv: (kv[0].per_row, -kv[1]))


def torch_gain(pair: PairedRow) -> Optional[float]:
    """A_torch / B_torch - 1 of a row compared on device time (a threshold), its torch
    sides timed by one clock and neither host time; else None."""
    a, b = pair.a.torch_ms, pair.b.torch_ms
    if pair.verdict.threshold is None or not a or not b or not (math.isfinite(a) and math.isfinite(b)):
        return None
    if pair.a.torch_clock and pair.b.torch_clock and pair.a.torch_clock != pair.b.torch_clock:
        return None
    for row in (pair.a, pair.b):
        if any(
            m.name == DIRECT_TIMER_UNTRACED and m.get("side") == "torch" and m.get("kind") == NO_DEVICE_WORK
            for m in row.markers
        ):
            return None
    return a / b - 1.0


def torch_versions(summary: Summary) -> List[str]:
    """The torch versions the summary's runs recorded (run_identity.json), sorted."""
    found = set()
    for run in summary.runs:
        versions = (run.identity or {}).get("versions")
        found.add(versions.get("torch") if isinstance(versions, dict) else None)
    return sorted(v for v in found if isinstance(v, str) and v)


def gain_range(name: str, pairs: Sequence[PairedRow]) -> GainRange:
    gains = [p.gain for p in pairs]
    torch = [g for g in map(torch_gain, pairs) if g is not None]
    # The geometric mean is taken over the latency ratios A/B, then shown as a gain.
    ratio_mean = geomean([p.gain + 1.0 for p in pairs])
    return GainRange(
        name=name,
        count=len(pairs),
        min=min(gains) if gains else None,
        median=quantile(gains, 0.5),
        max=max(gains) if gains else None,
        geomean=None if ratio_mean is None else ratio_mean - 1.0,
        fallback_rows=sum(1 for p in pairs if p.fallback),
        slower=sum(1 for p in pairs if p.verdict.status == SLOWER),
        faster=sum(1 for p in pairs if p.verdict.status == FASTER),
        same=sum(1 for p in pairs if p.verdict.status == SAME),
        unknown=sum(1 for p in pairs if p.verdict.status == UNKNOWN),
        throttled=sum(1 for p in pairs if p.verdict.throttled),
        torch_gain=quantile(torch, 0.5),
    )


def _occurrences(rows: Sequence[Row]) -> Tuple[Dict[Tuple[Key, int], Row], int]:
    """Rows by (key, nth time printed); and how many keys were printed more than once."""
    seen: Dict[Key, int] = {}
    out: Dict[Tuple[Key, int], Row] = {}
    for row in rows:
        n = seen.get(row.key, 0)
        seen[row.key] = n + 1
        out[(row.key, n)] = row
    return out, sum(1 for n in seen.values() if n > 1)


def _why_not_comparable(a: Row, b: Row) -> Optional[str]:
    for side, row in (("A", a), ("B", b)):
        if row.status != "SUCCESS":
            return f"{side} status {row.status}"
        if row.problem:
            return f"{side} {row.problem}"
        if row.gems_ms is None or not math.isfinite(row.gems_ms) or row.gems_ms <= 0:
            return f"{side} gems latency {row.gems_ms if row.gems_ms is not None else 'N/A'}"
    return None


def _run_pairs(result: ABResult) -> List[Tuple[RunLog, RunLog]]:
    """The runs whose rows meet in this A/B: their calibers are what must agree."""
    runs_a = {str(r.run_dir): r for r in result.a.runs}
    runs_b = {str(r.run_dir): r for r in result.b.runs}
    met = {(p.a.run_dir, p.b.run_dir) for p in result.pairs}
    met |= {(n.a.run_dir, n.b.run_dir) for n in result.not_comparable}
    return [(runs_a[ra], runs_b[rb]) for ra, rb in sorted(met)]


def throttle_reasons(pair: PairedRow) -> Dict[str, List[str]]:
    """Side ("A", "B") -> why it was measured slowed down (DEVICE_THROTTLED's ``why``:
    vendor reasons, sm_clock_drop, host_slow, cpu_contention, device_shared); sides without
    one left out."""
    out: Dict[str, List[str]] = {}
    for side, row in (("A", pair.a), ("B", pair.b)):
        for m in row.markers:
            if m.name == DEVICE_THROTTLED:
                reasons = out.setdefault(side, [])
                for why in (m.get("why") or "throttled").split(","):
                    if why and why not in reasons:
                        reasons.append(why)
    return out


def _cap_window(row: Row) -> Optional[Marker]:
    """The row's POWER_CAP_WINDOW marker for its gems figure, if it was timed so."""
    return next(
        (m for m in row.markers if m.name == POWER_CAP_WINDOW and m.get("side", "gems") == "gems"), None
    )


def at_power_cap(row: Row) -> bool:
    """Was the row's gems figure taken over a cap window (POWER_CAP_WINDOW): a sustained
    figure at the device's power cap rather than FlagGems' ``rep`` of replays?"""
    return _cap_window(row) is not None


def cap_mhz(pair: PairedRow) -> Optional[Dict[str, Optional[float]]]:
    """For a row both of whose gems figures are power-cap windows: the SM clock each side
    ran at there (the window's median; None where unrecorded); None otherwise. The
    verdict stands: at the cap a build that draws less power also earns a higher clock,
    so the clocks are shown beside the change, not taken out of it."""
    out: Dict[str, Optional[float]] = {}
    for side, row in (("A", pair.a), ("B", pair.b)):
        window = _cap_window(row)
        if window is None:
            return None
        try:
            out[side] = float(window.get("median_mhz") or "")
        except ValueError:
            out[side] = None
    return out


def cap_clocks(pair: PairedRow) -> str:
    """``cap_mhz`` as the A/B table's note: "both at the power cap: A 1455 MHz, B 1485 MHz"."""
    mhz = cap_mhz(pair)
    if mhz is None:
        return ""
    a, b = ("?" if v is None else f"{v:.0f}" for v in (mhz["A"], mhz["B"]))
    return f"both at the power cap: A {a} MHz, B {b} MHz"


def capped_alone(pair: PairedRow) -> Optional[str]:
    """ "A" or "B" when that side alone has its gems figure at the power cap
    (``at_power_cap``); None when both or neither do."""
    capped = [side for side, row in (("A", pair.a), ("B", pair.b)) if at_power_cap(row)]
    return capped[0] if len(capped) == 1 else None


def judge(pair: PairedRow, floor: float, same_run: bool) -> Verdict:
    """The verdict of one pair from its gems latencies and spreads.

    SAME (no threshold, and why) when neither side's gems calls ran device work: the
    device time compared is none in both. UNKNOWN (counted apart, ``throttled``) when
    either side was measured while the machine was slowed down: such a row's change is
    the machine's state, not the build, and (counted with them) when one side's gems
    figure is sustained at the power cap (POWER_CAP_WINDOW) and the other's is not: one
    is the device at its cap, the other before it. UNKNOWN when the two sides were timed by
    different clocks (traced device time against events around each call differ by the
    host's share, not by the code), and when one side's gems latency is host time because
    the tracer saw no device work in its calls."""
    found = verdict(pair.a.gems_ms, pair.a.gems_spread, pair.b.gems_ms, pair.b.gems_spread, floor, same_run)
    untraced = untraced_sides(pair)
    if len(untraced) == 2 and found.status != UNKNOWN:
        # Neither side ran anything on the device (a view, a metadata op): the device
        # time zlbench compares is none in both, whatever the device's clock did. Their
        # numbers are host time, which moves from process to process (an H200 A/A:
        # transpose's and resize_'s view rows 2-78% apart).
        return Verdict(SAME, found.change, None, NO_DEVICE_WORK_EITHER)
    slowed = throttle_reasons(pair)
    if slowed and not same_run:
        why = "; ".join(f"{side} {','.join(reasons)}" for side, reasons in slowed.items())
        return Verdict(UNKNOWN, found.change, None, f"measured throttled ({why})", throttled=True)
    capped = capped_alone(pair)
    if capped and found.status != UNKNOWN and not same_run:
        why = f"only {capped} timed at the power cap ({POWER_CAP_WINDOW})"
        return Verdict(UNKNOWN, found.change, None, why, throttled=True)
    a_clock, b_clock = pair.a.gems_clock, pair.b.gems_clock
    if a_clock and b_clock and a_clock != b_clock and found.status != UNKNOWN:
        return Verdict(UNKNOWN, found.change, None, f"timed by different clocks: A {a_clock}, B {b_clock}")
    if untraced and found.status != UNKNOWN:
        # One side's number is host time, the other's device time: no verdict on them.
        why = "; ".join(f"{side} {reason}" for side, reason in untraced.items())
        return Verdict(UNKNOWN, found.change, None, f"host time, no device work traced ({why})")
    return found


NO_DEVICE_WORK_EITHER = "no device work in A or B: host time, not compared"


def untraced_sides(pair: PairedRow) -> Dict[str, str]:
    """{"A"/"B": why} for the sides whose gems latency the direct timer took from events
    because the tracer saw no device work at all in the calls (DIRECT_TIMER_UNTRACED,
    kind no_device_work: a view, a metadata op). Device work outside the calls' ranges
    (kind outside_ranges: another thread's) is timed by events with the host's gaps: it
    keeps its verdict."""
    out: Dict[str, str] = {}
    for side, row in (("A", pair.a), ("B", pair.b)):
        for m in row.markers:
            if (
                m.name == DIRECT_TIMER_UNTRACED
                and m.get("side") == "gems"
                and m.get("kind") == NO_DEVICE_WORK
            ):
                out[side] = m.get("why") or "no device work traced"
    return out


def verdict_order(pairs: Sequence[PairedRow]) -> List[PairedRow]:
    """Real changes first (largest first), then the undecided, then the unchanged."""

    def key(p: PairedRow):
        change = abs(p.verdict.change) if p.verdict.change is not None else 0.0
        real = p.verdict.real
        return (VERDICTS.index(p.verdict.status) if not real else 0, -change if real else 0)

    return sorted(pairs, key=key)


SAME_RUN_WARNING = (
    "WARNING: A and B are the same run ({path}): every gain is 0 by "
    "construction. This is not a noise floor; for one, compare two runs "
    "of the same build."
)


def _same_run(a: Summary, b: Summary) -> bool:
    return a.input.resolve() == b.input.resolve()


def pair_summaries(
    a: Summary,
    b: Summary,
    noise_floor: float = DEFAULT_NOISE_FLOOR,
    floor_source: str = "default",
    run_floors: Optional[Dict[str, NoiseFloor]] = None,
) -> ABResult:
    """Pair two summaries by (op, dtype, shape); gains, verdicts, ranges and noise.

    ``run_floors`` (by A's run dir) are floors recorded for the runs' machine and caliber
    (``zlbench noise``); other rows use ``noise_floor``, which came from ``floor_source``.
    ``pairs`` come sorted by ``verdict_order``: real changes first.
    """
    result = ABResult(
        a,
        b,
        noise_floor=noise_floor,
        floor_source=floor_source,
        run_floors=dict(run_floors or {}),
        same_run=_same_run(a, b),
    )
    if "flaggems" in (a.format, b.format):
        # FlagGems' result files spell shapes as JSON ([[64, 64]]), run logs as printed
        # ([torch.Size([64, 64])]): pair both sides by one spelling.
        for row in (*a.rows, *b.rows):
            row.key = (row.op, row.dtype, canonical_shape(row.shape))
    rows_a, dup_a = _occurrences(a.rows)
    rows_b, dup_b = _occurrences(b.rows)
    result.duplicate_keys = dup_a + dup_b
    for k, row_a in rows_a.items():
        row_b = rows_b.get(k)
        if row_b is None:
            result.only_a.append(row_a)
            continue
        reason = _why_not_comparable(row_a, row_b)
        if reason:
            result.not_comparable.append(NotComparable(row_a, row_b, reason))
            continue
        result.pairs.append(
            PairedRow(
                row_a,
                row_b,
                row_a.gems_ms / row_b.gems_ms - 1.0,
                row_a.fallback or row_b.fallback,
                occurrence=k[1],
            )
        )
    for pair in result.pairs:
        pair.verdict = judge(pair, result.floor_for(pair).value, result.same_run)
    result.only_b = [row for k, row in rows_b.items() if k not in rows_a]
    result.caliber = compare_run_pairs(_run_pairs(result), a.rows, b.rows)
    _tally(result)
    return result


def _tally(result: ABResult) -> None:
    """Order the pairs (``verdict_order``) and count them: per operator, overall, noise."""
    result.pairs = verdict_order(result.pairs)
    by_op: Dict[str, List[PairedRow]] = {}
    for pair in result.pairs:
        by_op.setdefault(pair.a.op, []).append(pair)
    result.by_op = [gain_range(op, by_op[op]) for op in sorted(by_op)]
    result.overall = gain_range("all", result.pairs)
    noise = [abs(p.gain) for p in result.pairs]
    result.noise_median = quantile(noise, 0.5)
    result.noise_p95 = quantile(noise, 0.95)


# A re-check: the operators of the SLOWER and FASTER rows run again, a fresh process on
# each side, and each such verdict stands only where that second pair gives it too. A
# process draws its own addresses, allocator pool and clocks, and on an H200 an A/A of
# two batches of the same build moved whole rows between processes by 3-12% at spreads
# of a few tenths of a percent (leaky_relu bf16 2^30, lstm fp32), changes that no spread
# taken inside one process can show. LNT's --rerun does the same for its regressions.
REPRODUCED = "reproduced"
NOT_REPRODUCED = "not reproduced"
INCONCLUSIVE = "inconclusive"
NOT_RECHECKED = "not re-checked"
RECHECK_OUTCOMES = (REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE, NOT_RECHECKED)


def recheck_ops(result: ABResult) -> List[str]:
    """The operators a re-check runs again: those with a SLOWER or FASTER row."""
    return sorted({p.a.op for p in result.pairs if p.verdict.real})


def apply_recheck(result: ABResult, recheck: ABResult) -> ABResult:
    """Judge ``result``'s SLOWER and FASTER rows again by ``recheck`` (the same rows of
    their operators from a second pair of processes, A's build and B's): a verdict the
    re-check gives too stands (REPRODUCED); one it reads SAME or the other way is SAME
    (NOT_REPRODUCED: the change lay between processes, not between the builds); an
    UNKNOWN re-check leaves it as it was (INCONCLUSIVE), as does a row the re-check did
    not pair (NOT_RECHECKED). Each such pair's ``recheck`` says which and what the
    re-check read; the counts are made again. Returns ``result``."""

    # One spelling of the shape for both pairs: a FlagGems result file's or a run log's.
    again = {row_spot(p.a, p.occurrence): p for p in recheck.pairs}
    for pair in result.pairs:
        if not pair.verdict.real:
            continue
        second = again.get(row_spot(pair.a, pair.occurrence))
        if second is None:
            pair.recheck_outcome = NOT_RECHECKED
            continue
        # Judged at the first pair's floor: a re-check must not pass on a lower threshold.
        verdict = judge(second, result.floor_for(pair).value, False)
        change = verdict.change
        read = f"{verdict.status}" + ("" if change is None else f", {change * 100:+.2f}% latency")
        if verdict.status == pair.verdict.status:
            pair.recheck_outcome, pair.recheck_read = REPRODUCED, read
        elif verdict.status == UNKNOWN:
            pair.recheck_outcome, pair.recheck_read = INCONCLUSIVE, f"{read}: {verdict.why}"
        else:
            pair.recheck_outcome, pair.recheck_read = NOT_REPRODUCED, read
            first = pair.verdict
            pair.verdict = first._replace(
                status=SAME,
                why=f"{first.status} {(first.change or 0.0) * 100:+.2f}% not reproduced in fresh "
                f"processes (re-check {read})",
            )
    _tally(result)
    return result


def recheck_counts(result: ABResult) -> Dict[str, int]:
    """Rows per RECHECK_OUTCOMES word, over the pairs a re-check judged."""
    return {w: sum(p.recheck_outcome == w for p in result.pairs) for w in RECHECK_OUTCOMES}


def pair_runs(a_path, b_path, noise_floor: float = DEFAULT_NOISE_FLOOR) -> ABResult:
    """A/B of two inputs (each a log file, run dir or batch dir)."""
    return pair_summaries(summarize(a_path), summarize(b_path), noise_floor)

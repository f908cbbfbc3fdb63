"""The arithmetic and decisions behind the timer plugins, free of torch and triton.

The plugins in ``zlbench.plugins`` replace ``do_bench`` inside the benchmark process;
everything they decide (how often to repeat a call, how to reduce samples, how large a
graph to capture, whether an error is a capture failure or a dead context, what the
fallback marker says) lives here so it can be tested on any machine.
"""

from __future__ import annotations

import math
import re
import statistics
import time
from typing import Any, Callable, Dict, Iterator, List, NamedTuple, Optional, Sequence, Set, Tuple, Union

from zlbench import backends
from zlbench.markers import BENCHMARK_DIRECT_NO_CUDAGRAPH, format_marker
from zlbench.stats import quantile

Result = Union[float, List[float]]

PHASES = ("warmup", "capture", "replay")


# --- repeat median (ZL_DIRECT_REPEAT) -------------------------------------------------


def repetition_applies(quantiles: Optional[Sequence[float]], return_mode: str) -> bool:
    """A median over calls only makes sense when each call returns one number."""
    return quantiles is None and return_mode != "all"


def repeat_median(
    call: Callable[[], float],
    repeat: int,
    quantiles: Optional[Sequence[float]] = None,
    return_mode: str = "mean",
) -> Tuple[Result, int]:
    """Run the whole timing ``call`` ``repeat`` times and return (median, calls made).

    When the caller asked for quantiles or every sample, one call's answer is returned
    as is: a median of lists has no meaning.
    """
    if repeat <= 1 or not repetition_applies(quantiles, return_mode):
        return call(), 1
    values = [float(call()) for _ in range(repeat)]
    return statistics.median(values), repeat


# --- per-call timing: spread and adaptive stopping (the direct timer) ------------------

# nvbench's defaults: at least 10 samples, stop once the noise is below 0.5%.
MIN_SAMPLES = 10
# ... but 6 for calls so slow that 10 of them outlast the timing's whole budget (the
# caller's ``rep``; ``StopRule.for_host_per_call``): the fewest whose whole range is a 95%
# interval of their median (it misses with odds 2 / 2**6), the interval ``median_ci``
# gives them. On an H200 FlagGems' special_legendre_polynomial_p at 2**30 elements
# (70-99 ms a call) spent 7-10 times the budget on their tenth samples.
MIN_SAMPLES_SLOW = 6
DEFAULT_NOISE_TARGET = 0.005
# The direct timer times for at least this share of the caller's ``rep`` budget, then
# stops once pinned, as the graph timer's replays do: the budget sizes its first traced
# session and the time cap, it is not a minimum. Spending the whole budget (nvbench's
# minimum time, FlagGems' --iter) cost a second profiler session in most timings on an
# H200, on medians the first had already pinned within the noise target.
MIN_TIME_SHARE = 0.1
MAX_TIME_FACTOR = 10  # the time cap is this many times the caller's ``rep`` budget
MIN_CAP_MS = 200.0  # ... and never less than this
MAX_SAMPLES = 200_000
DIRECT_MODES = ("kernels", "percall", "do_bench")


def median_ci(ordered: Sequence[float]) -> Tuple[float, float]:
    """A distribution-free 95% confidence interval of the median of sorted samples.

    The order statistics at ranks n/2 - 0.98 sqrt(n) and 1 + n/2 + 0.98 sqrt(n)
    (1-based; 0.98 = 1.96 / 2, the normal approximation to the binomial): no
    assumption about the shape of the times, and one slow outlier moves it one rank.
    """
    n = len(ordered)
    if n == 0:
        raise ValueError("no samples")
    half = 0.98 * math.sqrt(n)
    lo = max(0, int(math.floor(n / 2 - half)) - 1)
    hi = min(n - 1, int(math.ceil(1 + n / 2 + half)) - 1)
    return ordered[lo], ordered[hi]


def relative_spread(ordered: Sequence[float]) -> Optional[float]:
    """Half-width of the median's 95% CI over the median: the row's noise.

    None for fewer than two samples (nothing to say) or a zero median.
    """
    if len(ordered) < 2:
        return None
    mid = statistics.median(ordered)
    if mid <= 0:
        return None
    lo, hi = median_ci(ordered)
    return (hi - lo) / 2.0 / mid


class StopRule(NamedTuple):
    """When the per-call timer has enough samples (nvbench's stopping criterion).

    Stop once at least ``min_samples`` calls and ``min_ms`` of timing are done and the
    median's relative CI half-width is at most ``target``; stop anyway at ``max_ms``
    or ``max_samples`` (the row is then reported with the spread it reached).
    ``budget_ms`` is the caller's ``rep``: what sizes the first traced session, and what
    the timing's record names as its budget (``min_ms`` where it is not given).
    """

    target: float
    min_ms: float
    max_ms: float
    min_samples: int = MIN_SAMPLES
    max_samples: int = MAX_SAMPLES
    budget_ms: Optional[float] = None

    @classmethod
    def for_call(cls, target: float, rep_ms: float) -> "StopRule":
        """``rep_ms`` is the caller's do_bench budget: MIN_TIME_SHARE of it spent at
        least, capped at 10x."""
        rep_ms = max(float(rep_ms), 1.0)
        return cls(
            target, MIN_TIME_SHARE * rep_ms, max(MAX_TIME_FACTOR * rep_ms, MIN_CAP_MS), budget_ms=rep_ms
        )

    @property
    def budget(self) -> float:
        return self.min_ms if self.budget_ms is None else self.budget_ms

    def for_host_per_call(self, host_per_call_ms: float) -> "StopRule":
        """This rule for calls of ``host_per_call_ms`` (the warm-up's): at least
        MIN_SAMPLES_SLOW samples instead of ``min_samples`` where that many calls would
        outlast the budget."""
        if self.min_samples <= MIN_SAMPLES_SLOW or host_per_call_ms * self.min_samples <= self.budget:
            return self
        return self._replace(min_samples=MIN_SAMPLES_SLOW)

    def verdict(self, ordered: Sequence[float], elapsed_ms: float) -> Optional[str]:
        """None to go on, else why it stopped: "noise", "time_cap" or "max_samples"."""
        n = len(ordered)
        if n >= self.max_samples:
            return "max_samples"
        if n >= self.min_samples and elapsed_ms >= self.min_ms:
            spread = relative_spread(ordered)
            if spread is not None and spread <= self.target:
                return "noise"
        if elapsed_ms >= self.max_ms and n >= 2:
            return "time_cap"
        return None


def batch_calls(per_call_ms: float, elapsed_ms: float, batch_ms: float = 5.0) -> int:
    """Calls to make before the next look at the samples: about ``batch_ms`` worth,
    growing with the time already spent so that sorting stays a small cost."""
    per_call_ms = max(float(per_call_ms), 1e-6)
    target = max(batch_ms, elapsed_ms / 4.0)
    return int(min(10_000, max(1, round(target / per_call_ms))))


class Cost:
    """Where one timing's own time went (both timers' ``cost_ms``): milliseconds per
    step, and how steps ended."""

    def __init__(self, steps: Sequence[str] = ()) -> None:
        self.begin = time.perf_counter()
        self.mark = self.begin
        self.ms: Dict[str, float] = {step: 0.0 for step in steps}  # reported even when never lapped
        self.notes: Dict[str, Any] = {}

    def lap(self, step: str) -> None:
        """The time since the last lap goes to ``step``."""
        now = time.perf_counter()
        self.ms[step] = self.ms.get(step, 0.0) + (now - self.mark) * 1e3
        self.mark = now

    def report(self) -> dict:
        out: Dict[str, Any] = {k: round(v, 3) for k, v in self.ms.items()}
        out["total"] = round((time.perf_counter() - self.begin) * 1e3, 3)
        out.update(self.notes)
        return out


BUDGET_MARGIN = 1.2  # a batch that falls short of the budget costs a second one


def budget_calls(per_call_ms: float, rule: "StopRule", elapsed_ms: float = 0.0) -> int:
    """Calls that spend what is left of ``rule.min_ms`` (with BUDGET_MARGIN: per-call
    times vary), at least one: a batch that can end a timing on its own (the traced
    clock's, where each batch costs a profiler session)."""
    per_call_ms = max(float(per_call_ms), 1e-6)
    left = max(0.0, rule.min_ms - elapsed_ms)
    return int(min(10_000, max(1, math.ceil(BUDGET_MARGIN * left / per_call_ms))))


def first_session_calls(host_per_call_ms: float, rule: "StopRule") -> int:
    """Calls in a timing's first traced session: what spends the rule's minimum at
    ``host_per_call_ms`` (``budget_calls``), the rule's samples at least, but at least two
    and no more than fit in ``rule.max_ms`` for a slow call, at most 10,000. In a session
    a call costs 1-7 times its host time on an H200, so the session spends the minimum
    and pins most medians; one that does not is followed by one sized by what this one
    cost."""
    per_call = max(float(host_per_call_ms), 1e-6)
    calls = max(rule.min_samples, budget_calls(per_call, rule))
    return int(min(10_000, calls, max(2, int(rule.max_ms / per_call))))


class Measured(NamedTuple):
    """What one timing call measured: the answer and how much to trust it."""

    value: Result  # what do_bench's caller gets
    median_ms: Optional[float]
    samples: int
    spread: Optional[float]  # relative half-width of the median's 95% CI
    stop: str  # noise | time_cap | max_samples (direct); noise | budget | placements | power_cap (graph); do_bench
    placements: int = 1  # graph timer: input placements it was timed over
    cost: Optional[dict] = None  # where the timing's own time went (ms per step, how it ended)


def measured_from(
    times: Sequence[float], quantiles, return_mode: str, stop: str, placement_medians: Sequence[float] = ()
) -> Measured:
    """``times`` reduced for the caller and the record. ``placement_medians``: each
    placement's (or graph's) own median, two or more: the row's median is then
    ``over_placements`` (also what a caller asking for the median gets; quantiles and the
    other modes reduce the pooled times) and its spread ``row_spread``."""
    ordered = sorted(float(t) for t in times)
    value = reduce_samples(times, quantiles, return_mode)
    median = statistics.median(ordered) if ordered else None
    spread = relative_spread(ordered)
    if len(placement_medians) >= 2:
        median = over_placements(placement_medians)
        spread = row_spread(ordered, placement_medians)
        if quantiles is None and return_mode == "median":
            value = median
    return Measured(value, median, len(ordered), spread, stop)


# --- device state around a row ----------------------------------------------------------

CLOCK_DROP = 0.05  # an SM clock this far below the run's highest reading is a drop
# A host speed this far below the run's median reading is a slow core. The probe is a
# short loop whose own readings scatter by about 5% back to back on a virtual machine, so
# the reference is the median, not the highest (against which 94% of a sample batch's
# rows read slow); on this project's VM 21% of A/A pairs were marked.
HOST_SLOW = 0.10
CPU_SHARE_MIN = 0.9  # a timing process on the CPU less than this share of the wall time
# Vendor reasons that say the clock is being managed, not that it is down: NVML flags the
# power cap from a power average over about a second, and leaves it on after a hot row.
# In an H200 A/A, 18 pairs of device time flagged with it alone (the SM clock within
# CLOCK_DROP of the run's highest at both ends) moved 0.9% at most; 20 with the clock
# down too, up to 12%.
CLOCK_MANAGED = frozenset({"sw_power_cap"})


def working_clock(sample: dict, reference_mhz: Optional[float]) -> Optional[bool]:
    """For a warm-up: is the device at the clock this work runs at? None where that
    cannot be told (no clock read, or no reference yet: the run's first timing); True
    within CLOCK_DROP of the reference; below it, False for a clock that is still ramping
    up (no slowdown reason), worth waiting for, and True for one held down by a reason
    the vendor reports (a power cap that this very work reaches, heat): waiting longer
    does not lift it, and the row is marked. On an H200, BLAS rows at the power cap
    warmed up to FlagGems' cap of 1,000 ms per timing waiting for a clock that did not
    come back."""
    mhz = sample.get("sm_mhz")
    if not mhz or not reference_mhz:
        return None
    if mhz >= (1.0 - CLOCK_DROP) * reference_mhz:
        return True
    return bool(sample.get("throttle"))


# --- the power cap: a timing that reaches it is taken over the cap's own period ---------

# Under its power cap a device's clock is not one number: on an H200 at its 700 W cap a
# half-precision GEMM held 1440-1620 MHz and dipped to 1125-1410 MHz for about 0.2 s once
# a second (benchmarks/power_cap.py), so 100 ms windows of one steady run differed by up
# to 25% and 1 s windows by 1.2%; in an A/A, 20 of 583 rows (every one a GEMM) were
# measured throttled and others moved up to 12% unmarked, their 100 ms of replays landing
# before the cap, after it, or across it. A timing whose replays reach the cap is timed
# again over this long, at the cap, and its row is a sustained figure at the power cap.
CAP_WINDOW_MS = 1000.0
# The window's replays go in chunks of about this much device time; the device is read
# once a chunk, while it runs.
CAP_CHUNK_MS = 50.0
# The replays of one window follow the same clock dips, so the CI of their median says
# less than the window does: two 1 s windows of one steady run at the cap differed by up
# to 1.2% (benchmarks/power_cap.py), two A/A passes' windows by up to 1.7%. A window's
# spread is at least this (``cap_window_spread``), so a verdict on two of them rests on
# what windows differ by, not on the floor alone.
CAP_WINDOW_SPREAD = 0.012
# Outside the window a watch reads the device at most this often: the cap comes over
# about 100 ms of load, and a warm-up's batches of a millisecond would each ask.
CAP_LOOK_EVERY_MS = 5.0


def power_capped(sample: dict, reference_mhz: Optional[float]) -> bool:
    """Is the device held below its clock by its power cap (a CLOCK_MANAGED reason and
    the SM clock more than CLOCK_DROP below ``reference_mhz``)? Read while work runs:
    an idle device's reading says nothing of the work (its reasons clear at once, its
    clock climbs back within milliseconds)."""
    mhz, reasons = sample.get("sm_mhz"), set(sample.get("throttle") or [])
    if not mhz or not reference_mhz or not reasons & CLOCK_MANAGED:
        return False
    return mhz < (1.0 - CLOCK_DROP) * reference_mhz


class CapWatch:
    """Readings of the device taken while a timing's work runs on it (the host waits for
    that work anyway), to tell whether the timing reached the power cap.

    ``read()`` returns a device-state sample (``sm_mhz``, ``throttle``) or {} where the
    vendor exposes none; ``reference_mhz`` is the run's highest SM clock so far (None
    before any), raised by what this watch reads. ``seen`` once a reading was
    ``power_capped``; once ``in_window``, ``window_mhz`` and ``window_capped`` gather the
    readings taken during the cap window.
    """

    def __init__(self, read: Callable[[], dict], reference_mhz: Optional[float] = None) -> None:
        self.read = read
        self.reference_mhz = reference_mhz
        self.looks = 0
        self.seen = False
        self.in_window = False
        self.window_mhz: List[float] = []
        self.window_capped = 0
        self.last_look = -math.inf

    def look(self) -> None:
        now = time.perf_counter()
        if not self.in_window and (now - self.last_look) * 1e3 < CAP_LOOK_EVERY_MS:
            return
        self.last_look = now
        try:
            sample = self.read() or {}
        except Exception:  # noqa: BLE001 - a reading is a hint; the row's own samples report errors
            return
        self.looks += 1
        mhz = sample.get("sm_mhz")
        capped = power_capped(sample, self.reference_mhz)
        if mhz and not capped:
            self.reference_mhz = max(self.reference_mhz or 0.0, float(mhz))
        self.seen = self.seen or capped
        if self.in_window:
            if mhz:
                self.window_mhz.append(float(mhz))
            self.window_capped += capped

    def notes(self, window_ms: float, replays: int) -> dict:
        """What the window was, for the row's ``cost_ms["power_cap"]``."""
        mhz = self.window_mhz
        return {
            "window_ms": round(window_ms, 3),
            "replays": replays,
            "readings": len(mhz),
            "capped_readings": self.window_capped,
            "median_mhz": statistics.median(mhz) if mhz else None,
            "min_mhz": min(mhz) if mhz else None,
            "ref_mhz": self.reference_mhz,
        }


def cap_window_spread(spread: Optional[float]) -> float:
    """A cap window's spread: its replays' own (``relative_spread``), CAP_WINDOW_SPREAD
    at least."""
    return max(spread or 0.0, CAP_WINDOW_SPREAD)


def cap_window_done(window_ms: Sequence[float], limit_ms: float = CAP_WINDOW_MS) -> bool:
    """Has the cap window's device time (its replays' times, ms) reached ``limit_ms``?"""
    return sum(window_ms) >= limit_ms


def cpu_share(before: dict, after: dict) -> Optional[float]:
    """The share of the wall time the process ran on a CPU between two host samples."""
    try:
        wall = after["wall_s"] - before["wall_s"]
        cpu = after["cpu_s"] - before["cpu_s"]
    except (KeyError, TypeError):
        return None
    return cpu / wall if wall > 0.01 else None


def throttle_reason(
    before: dict,
    after: dict,
    reference_mhz: Optional[float],
    reference_speed: Optional[float] = None,
    at_cap: bool = False,
) -> Optional[str]:
    """Why the device was slow while a row was timed, or None.

    ``before``/``after`` are device-state samples taken after warm-up and after the
    last timed call; ``reference_mhz`` is the highest SM clock read in the run so far,
    ``reference_speed`` the median host speed (cpu backend: ``backends.cpu.host_speed``).
    A slowdown reason reported by the vendor (thermal, a power brake, ...) at either end,
    an SM clock more than CLOCK_DROP below its reference, a host speed more than
    HOST_SLOW below its reference, (host samples) a timing process that ran on a CPU
    for less than CPU_SHARE_MIN of the time, or another process busy on the device
    since the last row's last sample (``other_procs`` of ``after``: NVML's per-process
    utilization, the gap between the rows and this row's warm-up included) names the row. A power cap (CLOCK_MANAGED)
    names it only with the clock down, or where clocks cannot be read; not at all for a
    row timed over a cap window (``at_cap``, ``CAP_WINDOW_MS``): the cap and the clock it
    holds are then what the row measures, and only other reasons name it.
    """
    reasons = sorted(set(before.get("throttle") or []) | set(after.get("throttle") or []))
    clocks = [c for c in (before.get("sm_mhz"), after.get("sm_mhz")) if c]
    dropped = bool(reference_mhz and clocks and min(clocks) < (1.0 - CLOCK_DROP) * reference_mhz)
    dropped = dropped and not at_cap
    if at_cap or (reference_mhz and clocks and not dropped):
        reasons = [r for r in reasons if r not in CLOCK_MANAGED]
    if dropped:
        reasons.append("sm_clock_drop")
    speeds = [v for v in (before.get("host_speed"), after.get("host_speed")) if v]
    if reference_speed and speeds and min(speeds) < (1.0 - HOST_SLOW) * reference_speed:
        reasons.append("host_slow")
    share = cpu_share(before, after)
    if share is not None and share < CPU_SHARE_MIN:
        reasons.append("cpu_contention")
    if after.get("other_procs"):  # since the last row ended
        reasons.append("device_shared")
    return ",".join(reasons) or None


# --- reducing samples the way triton's do_bench does ----------------------------------


def reduce_samples(
    times: Sequence[float], quantiles: Optional[Sequence[float]] = None, return_mode: str = "mean"
) -> Result:
    """Reduce per-call times (ms) like triton.testing's do_bench family.

    quantiles win over return_mode; one quantile returns a float. "median" is the lower
    median, as torch.median returns for an even count.
    """
    if return_mode not in ("min", "max", "mean", "median", "all"):
        raise ValueError(f"unknown return_mode {return_mode!r}")
    samples = [float(t) for t in times]
    if quantiles is not None:
        if not samples:
            raise ValueError("no samples")
        # zlbench.stats.quantile interpolates linearly, as torch.quantile does by default.
        picks = [quantile(samples, q) for q in quantiles]
        return picks[0] if len(picks) == 1 else picks
    if return_mode == "all":
        return samples
    if return_mode == "median":
        return statistics.median_low(samples)
    reduce: Dict[str, Callable[[List[float]], float]] = {"min": min, "max": max, "mean": statistics.fmean}
    return reduce[return_mode](samples)


def clear_grads(grad_to_none) -> None:
    """``grad_to_none``'s tensors lose their grads before each timed call, as in triton."""
    if grad_to_none is not None:
        for x in grad_to_none:
            x.grad = None


# --- graph timer sizing ---------------------------------------------------------------


class GraphPlan(NamedTuple):
    calls_per_graph: int  # fn calls unrolled into one captured graph
    replays: int  # timed replays; each one is a sample


MAX_CALLS_PER_GRAPH = 1000
MIN_REPLAYS = 5
MAX_REPLAYS = 200
# One replay lasts about this long (ZL_GRAPH_REPLAY_MS): long against event resolution
# (about 0.5 us), short in memory. A capture goes call by call through the library's
# Python wrapper (FlagGems: about 80 us a call on an H200), so a kernel of a microsecond
# spends 45-70 ms capturing 600-790 calls for 1 ms replays. The graph's fixed launch cost
# (about 2.8 us on an H200) is the same share of every replay whatever the kernel: at
# 0.5 ms rows of more than one call per graph read 0.27-0.29% slower than at 1 ms (rows of
# one call alike within 0.05%), and an H200 sample projected 1.52 h against 1.80, but its
# A/A (one pass cold) fell to 97.9% SAME: 1 ms stays the default until that is separated.
# Taking that launch cost off each replay instead, measured once a process as the
# intercept of two graphs (16 and 144 calls) of a one-element add, was tried with 0.5 ms
# replays on an H200: the intercept read 2.5-6.3 us from process to process, so the A/A
# median |gain| rose from 0.053% to 0.23% (rows of many calls moved by its difference
# over their calls), and a 1 us abs read 0.6% apart at 123 and 978 calls after it, where
# a fixed cost would leave none. The projection did not fall with it (1.76 h against
# 1.68 on a slower host: capture 0.22 h against 0.26, replay 0.47 h both).
TARGET_REPLAY_MS = 1.0


# The probe graph's replays that size the real one; the fastest of them says its per-call
# time. Each replay carries a fixed cost (the graph's launch, about 3 us on an H200), and
# the first few of a new graph can be far slower: on an H200 A/A the median of three read
# FlagGems' div_tensor 64x64 probes at up to 25 times the per-call time its real graph
# then measured, planning 35-65 calls per graph where the other batch planned 425-705;
# that fixed cost over few calls read those rows 3-8% slower (three hard verdicts).
PROBE_REPLAYS = 5


def probe_per_call(replay_ms: Sequence[float], calls: int) -> float:
    """Per-call ms of a probe graph of ``calls`` calls from its replays: the fastest."""
    return min(replay_ms) / max(1, calls)


# The probe graph is the real one where its calls are the plan's within this share (every
# row of one call per graph, and on an H200 at least one in eight of the others): a replay's
# fixed launch cost (about 0.28% of a 1 ms replay) then moves the row by 0.006% at most,
# where the plan's exact count cost a second capture (every call's launch through the
# library's wrapper) for a call or two more.
PROBE_FIT = 0.02


def probe_fits(probe_calls: int, planned_calls: int) -> bool:
    """Is a probe graph of ``probe_calls`` calls the graph the plan asks for (PROBE_FIT)?"""
    return abs(probe_calls - planned_calls) <= PROBE_FIT * planned_calls


def plan_graph(per_call_ms: float, rep_ms: float, replay_ms: float = TARGET_REPLAY_MS) -> GraphPlan:
    """How many calls to unroll into the graph and how many replays to time.

    A replay should last about ``replay_ms`` (TARGET_REPLAY_MS), so event resolution is
    noise while the outputs of the unrolled calls stay small; the replays together fill about
    ``rep_ms``, like triton's rep budget, and their median is the answer.
    """
    per_call_ms = max(float(per_call_ms), 1e-6)
    rep_ms = max(float(rep_ms), 1e-3)
    calls = int(min(MAX_CALLS_PER_GRAPH, max(1, round(replay_ms / per_call_ms))))
    replays = int(min(MAX_REPLAYS, max(MIN_REPLAYS, round(rep_ms / (calls * per_call_ms)))))
    return GraphPlan(calls, replays)


# A plan of many calls is built from a captured tile of the probe's calls, chained
# (``zlbench.plugins.graph_tiles``): a capture goes call by call through the library's
# wrapper, a chained copy costs nothing. The plan then takes a whole number of tiles, at
# least this many (fewer: its calls are captured as planned), its replays lasting
# 0.8-1.33 times ZL_GRAPH_REPLAY_MS instead of about it.
MIN_TILE_COPIES = 2


def tiled_plan(plan: GraphPlan, per_call_ms: float, rep_ms: float, tile: int) -> GraphPlan:
    """``plan`` with its calls rounded to the nearest whole number of ``tile``-call tiles
    (its replays sized again to the rep budget); ``plan`` itself where that is fewer
    than MIN_TILE_COPIES tiles."""
    copies = int(plan.calls_per_graph / tile + 0.5) if tile >= 1 else 0
    if copies < MIN_TILE_COPIES:
        return plan
    return plan_with_calls(tile * copies, per_call_ms, rep_ms)


def plan_with_calls(calls: int, per_call_ms: float, rep_ms: float) -> GraphPlan:
    """A plan of ``calls`` calls per graph, its replays sized again to the rep budget."""
    per_call_ms = max(float(per_call_ms), 1e-6)
    calls = max(1, int(calls))
    replays = int(min(MAX_REPLAYS, max(MIN_REPLAYS, round(max(float(rep_ms), 1e-3) / (calls * per_call_ms)))))
    return GraphPlan(calls, replays)


# --- warm-up: until it has done its job ------------------------------------------------

WARMUP_WINDOW = 3  # consecutive batches that must agree
WARMUP_TOLERANCE = 0.05  # relative spread allowed among them
WARMUP_MAX_BATCHES = 200
WARMUP_RULES = ("settle", "budget")
# settle: eager calls for at least this long after the first call, even when the first
# batches already agree (a clock ramping up moves the next batch, not the first three),
# unless the device's clock was read at its working clock (``working_clock``): on an
# H200 this floor was most of a small row's warm-up (10-13 ms of ~12 batches that
# agreed after four), about 0.1 h of the projected corpus.
WARMUP_MIN_MS = 10.0
WARMUP_CAP_MS = 500.0  # budget: stop waiting for stable eager times after max(this, 4x)


class WarmupRule(NamedTuple):
    """When a timer's warm-up (eager calls after the first, which compiles and tunes) ends.

    ``settle`` (the default): once the last WARMUP_WINDOW batches agree within
    WARMUP_TOLERANCE and the device reads its working clock; where the clock cannot be
    told (no reading, or the run's first timing) at least WARMUP_MIN_MS must have gone
    by too. The caller's ``warmup`` (FlagGems: 1,000 ms per timing) is the cap, not the
    minimum. ``budget``: the caller's ``warmup`` at least,
    then until the batches agree, capped at max(WARMUP_CAP_MS, 4x warmup): FlagGems' own
    amount, as the graph timer warmed before the settle rule (the direct timer stopped at
    the caller's ``warmup`` then; it waits for the batches to agree too now).
    """

    rule: str
    budget_ms: float

    @property
    def min_ms(self) -> float:
        return min(WARMUP_MIN_MS, self.budget_ms) if self.rule == "settle" else self.budget_ms

    @property
    def cap_ms(self) -> float:
        if self.rule == "settle":
            return max(self.budget_ms, WARMUP_MIN_MS)
        return max(WARMUP_CAP_MS, 4 * self.budget_ms)

    def verdict(
        self,
        batch_ms_per_call: Sequence[float],
        elapsed_ms: float,
        device_ready: Optional[Callable[[], Optional[bool]]] = None,
        max_batches: int = WARMUP_MAX_BATCHES,
    ) -> Optional[str]:
        """None to go on, else why warm-up ended: "settled", "cap" or "max_batches".

        ``device_ready`` (``working_clock`` of a reading) is asked only once the batches
        agree and, under "budget", the minimum went by (it reads the device, a driver
        call); False goes on warming until the cap, None cannot tell: the minimum holds.
        """
        if len(batch_ms_per_call) >= max_batches:
            return "max_batches"
        if elapsed_ms >= self.cap_ms:
            return "cap"
        if not batches_agree(batch_ms_per_call):
            return None
        waivable = self.rule == "settle"
        if elapsed_ms < self.min_ms and not waivable:
            return None
        ready = device_ready() if device_ready is not None else None
        if ready is False or (ready is None and elapsed_ms < self.min_ms):
            return None
        return "settled"


# A host-time timing's warm-up (calls that run nothing on the device) ends here at the
# latest under the settle rule: its row is never compared (summary --ab: SAME when both
# sides are host time, else UNKNOWN), and judged even by its fastest calls a tenth of
# transpose's host-time warm-ups on an H200 waited for FlagGems' whole second.
HOST_TIME_WARMUP_CAP_MS = 100.0


def host_time_warmup(rule: WarmupRule) -> WarmupRule:
    """``rule`` for a host-time timing: under "settle" its cap is at most
    HOST_TIME_WARMUP_CAP_MS; "budget" (FlagGems' own amount) is kept."""
    if rule.rule != "settle":
        return rule
    return rule._replace(budget_ms=min(rule.budget_ms, HOST_TIME_WARMUP_CAP_MS))


# ... and it is timed for this long (the caller's ``rep`` when smaller), at most ten times
# that: on an H200 transpose's and resize_'s host-time timings spent FlagGems' whole
# 100 ms each (72 timings, 10 s of the two operators' 20 s) on a number never compared,
# pinned within the noise target by thousands of calls.
HOST_TIME_REP_MS = 10.0


def host_time_stop(rule: StopRule) -> StopRule:
    """``rule`` for a host-time timing: its time budget at most HOST_TIME_REP_MS, which it
    spends (its rows are never compared: no session to save), its cap MAX_TIME_FACTOR
    times that; the noise target and the samples' minimum are kept."""
    budget = min(rule.budget, HOST_TIME_REP_MS)
    return rule._replace(
        min_ms=budget, budget_ms=budget, max_ms=min(rule.max_ms, MAX_TIME_FACTOR * HOST_TIME_REP_MS)
    )


def batches_agree(batch_ms_per_call: Sequence[float]) -> bool:
    """The last WARMUP_WINDOW batches' per-call times within WARMUP_TOLERANCE."""
    if len(batch_ms_per_call) < WARMUP_WINDOW:
        return False
    last = batch_ms_per_call[-WARMUP_WINDOW:]
    mid = statistics.median(last)
    if mid <= 0:
        return True
    return (max(last) - min(last)) / mid <= WARMUP_TOLERANCE


def warmup_settled(batch_ms_per_call: Sequence[float], elapsed_ms: float, warmup_ms: float) -> bool:
    """The ``budget`` rule without a device check: the budget spent and the last batches
    agree (or WARMUP_MAX_BATCHES reached)."""
    return WarmupRule("budget", warmup_ms).verdict(batch_ms_per_call, elapsed_ms) in (
        "settled",
        "max_batches",
    )


# The direct timer's warm-up batches double, up to about this many milliseconds of calls
# (one call at least): on an H200 special_legendre_polynomial_p's 70-99 ms calls warmed up
# over 1 + 2 + 4 of them, where three single calls that agree say as much.
DIRECT_WARMUP_BATCH_MS = 10.0
DIRECT_WARMUP_MAX_CALLS = 10_000


def next_warmup_calls(calls: int, per_call_ms: float) -> int:
    """Calls in the direct timer's next warm-up batch after one of ``calls`` calls that
    took ``per_call_ms`` each (host time: what the batch costs)."""
    cap = max(1, int(DIRECT_WARMUP_BATCH_MS / max(float(per_call_ms), 1e-6)))
    return max(1, min(calls * 2, DIRECT_WARMUP_MAX_CALLS, cap))


def direct_warmup_max_batches(rule: "WarmupRule") -> int:
    """The direct timer's batch limit under ``rule``: batches of about
    DIRECT_WARMUP_BATCH_MS must be able to reach its cap (under "budget" the caller's
    ``warmup`` is the minimum: 200 such batches are 1-2 s), WARMUP_MAX_BATCHES at least."""
    return max(WARMUP_MAX_BATCHES, math.ceil(rule.cap_ms / DIRECT_WARMUP_BATCH_MS) + WARMUP_WINDOW)


def warmup_batch_size(per_call_ms: float, batch_target_ms: float = 1.0) -> int:
    """Calls per timed warmup batch, so one batch lasts about ``batch_target_ms``: the
    graph timer's batches, and the direct timer's one batch for a row the graph timer
    already warmed up (from a call's wall time then, ``percall_bench``'s ``prewarmed_ms``)."""
    per_call_ms = max(float(per_call_ms), 1e-6)
    return int(min(1000, max(1, round(batch_target_ms / per_call_ms))))


# --- graph replays: until the pooled median is pinned -------------------------------------


FIRST_ROUND_PER_PLACEMENT = 3  # replays of each placement's graph before the first look
# ... and this many in all: the CI of a median over 10 samples is their whole range (one
# slow replay fails it); over 20 it sits between the 5th and the 16th.
FIRST_ROUND_SAMPLES = 20
# A later round asks for this much more than the samples' CI says it needs (its width
# goes as 1/sqrt(n)): a round that falls just short costs another round.
ROUND_MARGIN = 1.25
MAX_ROUNDS = 4  # the first and at most three more; the last one spends what is left
# Where the inputs lie moves a row: on an H200 the placements' own medians of one timing
# differed by 0.18% (median standard deviation) and by more than 0.9% in a tenth of the
# timings, some in two clusters 6% apart (torch's median), some with one placement 10-31%
# off (div_tensor 1G, cumsum_ 4096x4096). The pooled replays' CI does not show that: the
# row's spread is that of its placements too (``placement_spread``).
# Once the placements' spread is over the target and this many times what their own
# replays' scatter would give it (a placement's median CI over sqrt(placements)), it is
# the placements that keep the row from being pinned: another round of replays at the
# same placements would not narrow it. Replays of one normal law read at most 2.9 times
# in 95% of trials of 8 placements x 3 replays, 1.2 times at 6 replays each; two
# interleaved graphs of 10 replays pass it only some 4 standard deviations apart.
PLACEMENTS_DOMINATE = 4.0


# A row timed at several placements (or in several graphs) is their mean: each
# placement's own median, the one placement in PLACEMENT_TRIM furthest off at each end
# left out. The pooled median of their replays sat wherever the replays of the
# placements nearest the middle happened to fall; the mean counts every placement. From
# the placements' medians an H200 A/A of the corpus' sample recorded (522 rows compared),
# the two batches' rows differ by a median of 0.054% by the trimmed mean against 0.068%
# by the pooled median they printed (two interleaved graphs: 0.057% against 0.086%).
# The trim keeps what the median had: one placement of eight 31% off (cumsum_ 4096x4096)
# does not move the row. Fewer than eight are averaged whole: two interleaved graphs, or
# large inputs the memory or the budget left fewer placements, whose placements fall in
# clusters rather than one far off (an H200's div_tensor fp32 2^30: four placements at
# 3.37 and 3.04 ms, three and one in one batch, two and two in the other); trimmed, such
# a row jumps between the clusters as a median does (the two batches 4.9% apart, against
# 2.6% by the mean, which its spread of 4.9% covers).
PLACEMENT_TRIM = 8


def _trimmed(medians: Sequence[float]) -> Tuple[List[float], int]:
    """(the medians sorted, how many PLACEMENT_TRIM leaves out at each end)."""
    values = sorted(float(m) for m in medians)
    return values, len(values) // PLACEMENT_TRIM


def over_placements(medians: Sequence[float]) -> Optional[float]:
    """A row's figure from its placements' (or graphs') own medians: their mean, the
    PLACEMENT_TRIM share furthest off at each end left out. None without medians."""
    values, g = _trimmed(medians)
    if not values:
        return None
    return statistics.fmean(values[g : len(values) - g])


def placement_spread(medians: Sequence[float]) -> Optional[float]:
    """How far the inputs' placements move a row: the half-width of a 95% interval of
    ``over_placements``, over it. 1.96 standard errors of a trimmed mean (Tukey and
    McLaughlin: the winsorized values' standard deviation over (1 - 2 g / k) sqrt(k)), so
    one placement far off among eight widens it little and two clusters of four by about
    half their distance. None below two placements. A normal quantile, not Student's:
    below eight it covers less than 95% (about 70% at two, 85% at four), as the interval
    of two graphs did before; the verdict's floor (2%) is most of a threshold, and
    Student's 12.7 at two graphs would make every small row's threshold its graphs'
    whole distance six times over."""
    values, g = _trimmed(medians)
    k = len(values)
    mid = over_placements(values)
    if k < 2 or mid is None or mid <= 0:
        return None
    winsorized = [values[g]] * g + values[g : k - g] + [values[k - g - 1]] * g
    return 1.96 * statistics.stdev(winsorized) / ((1.0 - 2.0 * g / k) * math.sqrt(k)) / mid


def row_spread(ordered: Sequence[float], placement_medians: Sequence[float] = ()) -> Optional[float]:
    """A graph row's spread: its pooled replays' (``relative_spread``), or its placements'
    (``placement_spread``) where that is wider."""
    spreads = [s for s in (relative_spread(ordered), placement_spread(placement_medians)) if s is not None]
    return max(spreads) if spreads else None


def placements_dominate(groups: Sequence[Sequence[float]], target: float) -> bool:
    """Is it the placements, not their replays, that keep the pooled median from being
    pinned to ``target``? ``groups``: each placement's per-call times (PLACEMENTS_DOMINATE)."""
    medians = [statistics.median(g) for g in groups if g]
    own = [s for s in (relative_spread(sorted(g)) for g in groups) if s is not None]
    across = placement_spread(medians)
    if across is None or not own or target <= 0 or len(own) < len(groups):
        return False
    return across > target and across > PLACEMENTS_DOMINATE * statistics.median(own) / math.sqrt(len(own))


class ReplayRule(NamedTuple):
    """How many replays the graph timer makes of each placement's graph.

    A first round gives every placement FIRST_ROUND_PER_PLACEMENT replays
    (FIRST_ROUND_SAMPLES at least in all). While the median pooled over them has a 95% CI
    half-width above ``target`` of it, another round gives every placement as many more
    as the CI says are needed (it narrows as 1/sqrt(n); ROUND_MARGIN over that), never
    past the caller's ``rep`` budget split over the placements; the MAX_ROUNDS-th round
    spends what is left of it. The row stops "noise" once pinned, "budget" when the
    budget ran out first, "placements" when the placements kept it from being pinned
    (``placements_dominate``). ``target`` 0 skips the first round: every row fills the budget
    ("budget"), as zlbench timed before the rule. ``graphs`` is the number of graphs
    replayed: one per placement, or INTERLEAVED_GRAPHS (graph_timer) when they are interleaved.
    """

    target: float  # relative CI half-width; 0: always fill the budget

    def first_round(self, budget_replays: int, graphs: int) -> int:
        """Replays per graph in the first round (the whole budget when target is 0)."""
        budget = replays_per_placement(budget_replays, graphs, MIN_REPLAYS)
        if self.target <= 0:
            return budget
        return min(budget, max(FIRST_ROUND_PER_PLACEMENT, -(-FIRST_ROUND_SAMPLES // max(1, graphs))))

    def pinned(self, ordered: Sequence[float]) -> bool:
        if self.target <= 0:
            return True  # the first round was the budget
        spread = relative_spread(ordered)
        return spread is not None and spread <= self.target

    def next_round(
        self,
        budget_replays: int,
        graphs: int,
        done_per_graph: int,
        ordered: Sequence[float],
        rounds_done: int = 1,
    ) -> int:
        """Replays per graph for the next round: 0 once pinned or the budget is spent."""
        if self.pinned(ordered):
            return 0
        left = replays_per_placement(budget_replays, graphs, MIN_REPLAYS) - done_per_graph
        if left <= 0:
            return 0
        spread = relative_spread(ordered)
        if spread is None or rounds_done + 1 >= MAX_ROUNDS:
            return left
        n = len(ordered)
        needed = math.ceil(n * (spread / self.target) ** 2 * ROUND_MARGIN) - n
        return max(1, min(left, -(-needed // max(1, graphs))))

    def later_rounds(
        self,
        budget_replays: int,
        graphs: int,
        done_per_graph: int,
        times: List[float],
        replay: Callable[[int], Optional[List[float]]],
        placement_groups: Optional[Callable[[], Sequence[Sequence[float]]]] = None,
        halt: Optional[Callable[[], bool]] = None,
    ) -> Tuple[int, bool]:
        """The rounds after the first: while ``next_round`` asks for more, ``replay(n)``
        makes n more replays of every graph and returns their per-call times, pooled into
        ``times`` as one round, or None when the round could not be completed (what was
        pooled before stands); none once ``placement_groups()`` (each graph's per-call
        times, separate graphs) say the placements keep the row from being pinned
        (``placements_dominate``), nor once ``halt()`` says the samples will be set aside
        (the power cap was seen: a cap window replaces them). Returns (rounds in all,
        whether the budget was spent)."""
        rounds = 1
        while True:
            if halt is not None and halt():
                break
            ordered = sorted(times)
            more = self.next_round(budget_replays, graphs, done_per_graph, ordered, rounds)
            if not more:
                break
            if placement_groups is not None and placements_dominate(placement_groups(), self.target):
                break
            got = replay(more)
            if got is None:
                break
            times += got
            done_per_graph, rounds = done_per_graph + more, rounds + 1
        return rounds, done_per_graph >= replays_per_placement(budget_replays, graphs, MIN_REPLAYS)


def replays_per_placement(replays: int, count: int, minimum: int) -> int:
    """Split the timed replays over the placements, each with at least ``minimum``."""
    return max(minimum, -(-replays // max(1, count)))


# --- error classification -------------------------------------------------------------

# Errors that leave the context unusable (sticky errors), and errors that mean "this
# work cannot be captured": each backend module lists its runtime's texts, enum name
# prefixes and codes; an error is judged against every backend's (the batch does not
# always know which runtime printed it). torch prints enum names such as
# "cudaErrorIllegalAddress": a vendor prefix, then one of these suffixes.
FATAL_TEXTS = backends.union("fatal_texts")
FATAL_CODES = frozenset(backends.union("fatal_codes"))
CAPTURE_TEXTS = backends.union("capture_texts")
FATAL_ENUM_SUFFIXES = (
    "illegaladdress",
    "assert",
    "launchfailure",
    "misalignedaddress",
    "illegalinstruction",
    "eccuncorrectable",
    "nvlinkuncorrectable",
    "hardwarestackerror",
    "invalidpc",
    "invalidaddressspace",
    "launchtimeout",
    "contextisdestroyed",
)


def _exception_chain(exc: BaseException, limit: int = 8) -> Iterator[BaseException]:
    seen: Set[int] = set()
    while exc is not None and id(exc) not in seen and len(seen) < limit:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


_ENUM_NAME = re.compile(r"(?:%s)([a-z_]+)" % "|".join(map(re.escape, backends.union("error_enum_prefixes"))))


def is_fatal_text(text: str) -> bool:
    low = text.lower()
    if any(sig in low for sig in FATAL_TEXTS):
        return True
    return any(m.replace("_", "") in FATAL_ENUM_SUFFIXES for m in _ENUM_NAME.findall(low))


def is_fatal_error(exc: BaseException) -> bool:
    """True for errors after which the device context is dead (retrying is pointless)."""
    for err in _exception_chain(exc):
        code = getattr(err, "error_code", None)
        if isinstance(code, int) and code in FATAL_CODES:
            return True
        if is_fatal_text(str(err)):
            return True
    return False


class Decision(NamedTuple):
    fallback: bool  # time this shape with the direct timer instead
    reason: str  # one line for the marker


def fallback_decision(phase: str, exc: BaseException) -> Decision:
    """Fall back to the direct timer, or re-raise (fallback=False)?

    A dead context (illegal address, device-side assert, ...) re-raises: running the
    direct timer on it would only report a second, misleading error. Interrupts and
    exits re-raise. Anything else in warmup, capture or replay falls back for this
    shape; if the operator itself is broken, the direct timer raises its own error.
    """
    if phase not in PHASES:
        raise ValueError(f"unknown phase {phase!r}")
    if not isinstance(exc, Exception):
        return Decision(False, error_reason(exc))
    if is_fatal_error(exc):
        return Decision(False, error_reason(exc))
    return Decision(True, error_reason(exc))


def error_reason(exc: BaseException, limit: int = 200) -> str:
    """``Type: first line`` of the innermost error that says why capture failed."""
    chain = list(_exception_chain(exc))
    # The original error usually sits below "operation failed due to a previous error".
    pick = next((e for e in reversed(chain) if str(e).strip()), chain[0])
    for err in chain:
        low = str(err).lower()
        if any(sig in low for sig in CAPTURE_TEXTS) and "previous error" not in low:
            pick = err
            break
    lines = [ln.strip() for ln in str(pick).splitlines() if ln.strip()]
    first = lines[0] if lines else ""
    text = f"{type(pick).__name__}: {first}" if first else type(pick).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def placement_failure(index: int, exc: BaseException) -> str:
    """Why a row has fewer placements than asked, when placement ``index`` (0-based) failed:
    the error's first line too (on an H200 segment_reduce_backward_out lost placement 2 in
    70 of 150 timings to a bare "RuntimeError")."""
    return f"placement {index + 1} failed: {error_reason(exc, limit=120)}"


# --- markers and footers ---------------------------------------------------------------


class TimedRow(NamedTuple):
    """The table row a timing call belongs to, as FlagGems prints it."""

    op: Optional[str]
    dtype: Optional[str]
    shape: Optional[str]
    side: Optional[str]  # "torch" (latency_base) or "gems" (latency)
    dtype_source: Optional[str] = None  # "guess" when dtype came from an argument

    def marker_fields(self) -> Dict[str, Optional[str]]:
        """What a marker names the row by (summary attaches it with these)."""
        return {"op": self.op, "dtype": self.dtype, "shape": self.shape, "side": self.side}


def fallback_marker(phase: str, repeat: int, row: TimedRow, reason: str, direct: Optional[str] = None) -> str:
    """``direct``: how the direct timer times the row instead (percall or do_bench)."""
    return format_marker(
        BENCHMARK_DIRECT_NO_CUDAGRAPH,
        phase=phase,
        repeat=repeat,
        direct=direct,
        **row.marker_fields(),
        dtype_source=row.dtype_source,
        reason=reason,
    )


def footer_line(plugin: str, counts: dict) -> str:
    """One line at the end of the session: ``zlbench[graph_timer] timer=graph ...``."""
    parts = [f"{k}={v}" for k, v in counts.items() if not isinstance(v, (list, dict))]
    return f"zlbench[{plugin}] " + " ".join(parts)

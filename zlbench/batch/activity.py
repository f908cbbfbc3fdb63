"""Is a running attempt still getting somewhere? And when it is stopped, what was it doing?

Sampled every ``tick_s`` while the batch waits for an attempt: the attempt's output
(new bytes in its log), the rows the phases plugin has timed (``plugins/phases.json``),
the RUN_PHASE markers seen, and the kernel and tuner caches (a new entry in the Triton
cache dir or FlagGems' cache dir: something compiled or tuned). From these:

- ``stalled()``: nothing moved for ``stall_s`` seconds (the no-progress timeout);
- ``kind()`` when the attempt is stopped: ``compiling`` (the caches grew in the last
  ``COMPILE_WINDOW_S``, or no row was timed yet while they grew: the next attempt starts
  with what was compiled), ``starting`` (pytest never finished collecting), else
  ``measuring``; ``no_progress`` when the no-progress timeout stopped it.
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from .. import rundir
from ..markers import RUN_PHASE, parse_marker
from ..tuner_cache import cache_dirs

TICK_S = 2.0
# Cache growth this recent means the attempt was compiling when it was stopped.
COMPILE_WINDOW_S = 60.0
# Subdirs of a cache dir that are stat'ed too (FlagGems keeps its DB one level down);
# a dir with more entries than this (Triton's: one per kernel) is watched by its own mtime.
_MAX_SUBDIRS = 64

COMPILING, MEASURING, STARTING, NO_PROGRESS = "compiling", "measuring", "starting", "no_progress"


def cache_signature(dirs: Sequence[str]) -> Tuple:
    out: List[tuple] = []
    for d in dirs:
        try:
            st = os.stat(d)
        except OSError:
            out.append((d, None))
            continue
        subs = []
        try:
            with os.scandir(d) as it:
                entries = [e for _, e in zip(range(_MAX_SUBDIRS + 1), it)]
            if len(entries) <= _MAX_SUBDIRS:
                for e in entries:
                    try:
                        subs.append((e.name, e.stat().st_mtime_ns))
                    except OSError:
                        pass
        except OSError:
            pass
        out.append((d, st.st_mtime_ns, tuple(sorted(subs))))
    return tuple(out)


class Activity:
    def __init__(
        self,
        log_path: Path,
        run_dir: Path,
        environ: Mapping[str, str],
        stall_s: Optional[float] = None,
        tick_s: float = TICK_S,
    ):
        self.log_path = log_path
        self.run_dir = run_dir
        self.stall_s = stall_s or None
        self.tick_s = tick_s
        self.cache_dirs = cache_dirs(environ)
        now = time.monotonic()
        self.started = now
        self.last_progress = now
        self.last_cache_change: Optional[float] = None
        self.last_row_change: Optional[float] = None
        self.cache_changes = 0
        self._log_size = 0
        self._rows = 0
        self._phases: Dict[str, float] = {}
        self._cache = cache_signature(self.cache_dirs)

    # -- sampling ---------------------------------------------------------------
    def sample(self) -> None:
        now = time.monotonic()
        # The attempt's log and run.log: the benchmark's output lands in run.log alone.
        size = _size(self.log_path) + _size(rundir.run_log_path(self.run_dir))
        if size > self._log_size:
            self._log_size = size
            self.last_progress = now
        report = _read_json(rundir.plugin_report_path(self.run_dir, "phases"))
        if report.get("cache_dirs") and report["cache_dirs"] != self.cache_dirs:
            self.cache_dirs = list(report["cache_dirs"])
            self._cache = cache_signature(self.cache_dirs)
        self._phases.update(report.get("times") or {})
        rows = int(report.get("rows_timed") or 0)
        if rows > self._rows:
            self._rows = rows
            self.last_row_change = self.last_progress = now
        signature = cache_signature(self.cache_dirs)
        if signature != self._cache:
            self._cache = signature
            self.cache_changes += 1
            self.last_cache_change = self.last_progress = now

    def stalled(self) -> bool:
        self.sample()
        return self.stall_s is not None and time.monotonic() - self.last_progress >= self.stall_s

    # -- verdict ----------------------------------------------------------------
    def stop_time(self, timeout_s: Optional[float], stalled: bool) -> float:
        """When the attempt was stopped: the timeout's moment, not the later one at which
        its group was finally gone (the grace and the sweeps come after)."""
        now = time.monotonic()
        if stalled and self.stall_s:
            return min(now, self.last_progress + self.stall_s)
        if timeout_s:
            return min(now, self.started + timeout_s)
        return now

    def kind(self, stalled: bool, at: Optional[float] = None) -> str:
        now = time.monotonic() if at is None else at
        if stalled:
            return NO_PROGRESS
        if self.last_cache_change is not None and (
            now - self.last_cache_change <= COMPILE_WINDOW_S or "first_row" not in self._phases
        ):
            return COMPILING
        if "collected" not in self._phases:
            return STARTING
        return MEASURING

    def describe(self, at: Optional[float] = None) -> str:
        """What it had done by ``at`` (stop_time), for the reason of a stopped attempt."""
        now = time.monotonic() if at is None else at
        parts = [f"{self._rows} latency call(s) timed"]
        if self.last_cache_change is not None:
            parts.append(
                f"kernel/tuner caches grew {self.cache_changes} time(s), last "
                f"{now - self.last_cache_change:.0f} s before"
            )
        parts.append(f"last progress {max(0.0, now - self.last_progress):.0f} s before")
        return "; ".join(parts)


def phase_times(lines) -> Dict[str, float]:
    """RUN_PHASE markers of a log: {phase: epoch seconds} (the first of each)."""
    out: Dict[str, float] = {}
    for line in lines:
        if not line.startswith(RUN_PHASE):
            continue
        marker = parse_marker(line)
        if marker is None or marker.name != RUN_PHASE:
            continue
        try:
            out.setdefault(marker.get("phase") or "", float(marker.get("t") or ""))
        except ValueError:
            continue
    return out


def split_phases(times: Mapping[str, float], started: float, ended: float) -> Dict[str, Optional[float]]:
    """An attempt's wall time split by its RUN_PHASE times (epoch seconds).

    startup_s      attempt start -> pytest session start (interpreter, imports, conftest)
    collect_s      session start -> collection finished
    first_call_s   collection -> first row timed on the library's side (compile, autotune)
    measure_s      first row -> session finish (the rest of the measurement)
    overhead_s     wall minus the pytest session body: the fixed cost per attempt
    A phase that did not happen is None.
    """

    def gap(a: Optional[float], b: Optional[float]) -> Optional[float]:
        return None if a is None or b is None else round(max(0.0, b - a), 3)

    start, collected = times.get("session_start"), times.get("collected")
    first, finish = times.get("first_row"), times.get("session_finish")
    body = gap(start, finish)
    return {
        "startup_s": gap(started, start),
        "collect_s": gap(start, collected),
        "first_call_s": gap(collected, first),
        "measure_s": gap(first if first is not None else collected, finish),
        "overhead_s": None if body is None else round(max(0.0, (ended - started) - body), 3),
    }


def tuning_times(run_dir: Path) -> Dict[str, Optional[float]]:
    """compile_s and tune_s of an attempt, from its autotune plugin report: wall seconds
    the benchmark spent compiling kernels, and in autotuners benchmarking candidates
    (less their compiling). None where the report has no such figure (no autotune
    plugin, a triton without a compile listener) or holds anything but a number >= 0."""
    report = rundir.read_plugin_reports(run_dir).get("autotune")
    report = report if isinstance(report, dict) else {}
    return {name: _seconds_or_none(report.get(name)) for name in ("compile_s", "tune_s")}


def _seconds_or_none(value: object) -> Optional[float]:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return round(float(value), 3) if math.isfinite(value) and value >= 0 else None


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}

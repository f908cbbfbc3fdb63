"""Live progress of a batch: per device the current operator and its elapsed time,
done/total, failures, and an ETA.

On a terminal this is a ``rich`` live table; otherwise (a log file, CI) one plain line
per event and a heartbeat line while operators run, so a hang is visible in a log too.
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, TextIO

from ..rundir import BAD


@dataclass
class _Device:
    total: int
    done: int = 0
    failed: int = 0
    current: Optional[str] = None
    started: float = 0.0
    attempt: int = 0
    level: int = 0


def fmt_duration(seconds: Optional[float]) -> str:
    if seconds is None:
        return "?"
    seconds = int(round(seconds))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class ProgressState:
    """Counts and timings shared by the device workers (thread-safe)."""

    def __init__(
        self, per_device: Dict[str, int], expected: Optional[Dict[str, List[Optional[float]]]] = None
    ):
        self.devices = {d: _Device(n) for d, n in per_device.items()}
        # Per device, the seconds each queued operator is expected to take (in queue
        # order; None: unknown), from --balance-from; the mean seen so far fills gaps.
        self.expected = {d: list((expected or {}).get(d) or []) for d in per_device}
        self.durations: List[float] = []
        self.started = time.monotonic()
        self.lock = threading.Lock()

    @property
    def total(self) -> int:
        return sum(d.total for d in self.devices.values())

    @property
    def done(self) -> int:
        return sum(d.done for d in self.devices.values())

    @property
    def failed(self) -> int:
        return sum(d.failed for d in self.devices.values())

    def eta(self, now: float) -> Optional[float]:
        """The slowest device's remaining work: each operator not finished at its
        expected duration (--balance-from) or else the mean operator time seen so far,
        the running one less its elapsed time."""
        mean = sum(self.durations) / len(self.durations) if self.durations else None
        worst = 0.0
        for name, dev in self.devices.items():
            expected = self.expected.get(name) or []
            left = 0.0
            for i in range(dev.done, dev.total):
                guess = expected[i] if i < len(expected) and expected[i] is not None else mean
                if guess is None:
                    return None
                if i == dev.done and dev.current:
                    guess = max(guess - (now - dev.started), 0.0)
                left += guess
            worst = max(worst, left)
        return worst


class Progress:
    """Receives events from the workers; renders them as the mode says."""

    def __init__(
        self,
        per_device: Dict[str, int],
        mode: str = "auto",
        out: Optional[TextIO] = None,
        heartbeat_s: float = 60.0,
        expected: Optional[Dict[str, List[Optional[float]]]] = None,
    ):
        self.out = out or sys.stdout
        if mode == "auto":
            mode = "live" if _is_tty(self.out) else "plain"
        self.mode = mode
        self.state = ProgressState(per_device, expected)
        self.heartbeat_s = heartbeat_s
        self._live: Any = None
        self._stop = threading.Event()
        self._beat: Optional[threading.Thread] = None
        self._write_lock = threading.Lock()

    # -- lifecycle ------------------------------------------------------------
    def __enter__(self) -> "Progress":
        if self.mode == "live":
            from rich.console import Console
            from rich.live import Live

            console = Console(file=self.out)
            self._live = Live(
                _Renderable(self),
                console=console,
                refresh_per_second=2,
                transient=False,
                redirect_stdout=False,
                redirect_stderr=False,
            )
            self._live.start()
        elif self.mode == "plain" and self.heartbeat_s > 0:
            self._beat = threading.Thread(target=self._heartbeat, daemon=True)
            self._beat.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._live is not None:
            self._live.stop()
        if self._beat is not None:
            self._beat.join(timeout=1)

    # -- events ----------------------------------------------------------------
    def message(self, line: str) -> None:
        if self.mode == "off":
            return
        if self._live is not None:
            self._live.console.print(line, markup=False, highlight=False)
        else:
            self._write(line)

    def started(self, device: str, op: str) -> None:
        with self.state.lock:
            dev = self.state.devices[device]
            dev.current, dev.started, dev.attempt, dev.level = op, time.monotonic(), 1, 0
            position = f"{dev.done + 1}/{dev.total}"
        if self.mode == "plain":
            self._write(f"[{device}] {op} started ({position} on this device)")

    def attempt(self, device: str, op: str, number: int, level: int) -> None:
        with self.state.lock:
            dev = self.state.devices[device]
            dev.attempt, dev.level = number, level
        if self.mode == "plain" and number > 1:
            self._write(f"[{device}] {op} attempt {number} (dtype level {level})")

    def finished(self, device: str, op: str, row: Mapping[str, Any]) -> None:
        status = str(row.get("status"))
        with self.state.lock:
            dev = self.state.devices[device]
            dev.done += 1
            dev.failed += status in BAD
            dev.current = None
            try:
                self.state.durations.append(float(row.get("total_s") or 0.0))
            except ValueError:
                pass
            summary = self._summary_line()
        if self.mode == "plain":
            detail = f"attempts {row.get('attempts')}, dtype level {row.get('dtype_level')}"
            reason = f" - {row.get('reason')}" if row.get("reason") else ""
            self._write(
                f"[{device}] {op} {status} in {fmt_duration(float(row.get('total_s') or 0))} "
                f"({detail}){reason} | {summary}"
            )

    # -- rendering -----------------------------------------------------------------
    def _summary_line(self) -> str:
        st = self.state
        now = time.monotonic()
        return (
            f"{st.done}/{st.total} done, {st.failed} failed, elapsed "
            f"{fmt_duration(now - st.started)}, ETA {fmt_duration(st.eta(now))}"
        )

    def _heartbeat(self) -> None:
        while not self._stop.wait(self.heartbeat_s):
            now = time.monotonic()
            with self.state.lock:
                running = [
                    f"[{d}] {dev.current} {fmt_duration(now - dev.started)}"
                    for d, dev in self.state.devices.items()
                    if dev.current
                ]
                summary = self._summary_line()
            if running:
                self._write(f"running: {', '.join(running)} | {summary}")

    def table(self):
        from rich.table import Table

        now = time.monotonic()
        table = Table(title=None, expand=False, box=None, pad_edge=False)
        for name, justify in (
            ("device", "left"),
            ("operator", "left"),
            ("elapsed", "right"),
            ("attempt", "right"),
            ("done", "right"),
            ("failed", "right"),
        ):
            table.add_column(name, justify=justify)
        with self.state.lock:
            for d, dev in self.state.devices.items():
                table.add_row(
                    d,
                    dev.current or "-",
                    fmt_duration(now - dev.started) if dev.current else "-",
                    f"{dev.attempt} (level {dev.level})" if dev.current else "-",
                    f"{dev.done}/{dev.total}",
                    str(dev.failed),
                )
            table.caption = self._summary_line()
        return table

    def _write(self, line: str) -> None:
        with self._write_lock:
            self.out.write(line + "\n")
            self.out.flush()


class _Renderable:
    """Rebuilt at every refresh, so the elapsed times tick."""

    def __init__(self, progress: Progress):
        self.progress = progress

    def __rich__(self):
        return self.progress.table()


def _is_tty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False

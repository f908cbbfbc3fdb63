"""What an attempt's exit means: its status, its last error line, whether to retry.

Pure functions over (exit code, timed out, log tail), so the retry and fallback rules
are testable without running anything.

The exit codes of ``zlbench run`` and the status vocabulary are the run-dir contract's
(zlbench/rundir.py); this module reads an attempt's exit through them.
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass
from typing import Callable, Iterable, Optional, Tuple

from .. import backends
from ..markers import NO_MEASUREMENT, PREFLIGHT_FAILED, parse_marker
from ..pytestlog import FAILED_RE, last_session_end
from ..rundir import CRASHED, EXIT_NO_TESTS, EXIT_OK, EXIT_PREFLIGHT, FAILED, OK, SKIPPED, TIMEOUT

# Error text that usually means the device or driver hiccuped, not the operator: these
# words, and each backend's runtime errors (backends/<vendor>.py transient_patterns).
TRANSIENT_TEXT = re.compile(
    "|".join(
        (
            "launch failure",
            "unspecified launch",
            *backends.union("transient_patterns"),
            "device-side assert",
            "illegal memory access",
            "ECC error",
            "driver shutting down",
            "device not ready",
        )
    ),
    re.IGNORECASE,
)

# Lines that carry an error, best first within one log tail.
_PREFLIGHT = re.compile(r"^(PREFLIGHT_FAILED|NO_MEASUREMENT)\b")
# zlbench run's line for a benchmark process that closed its stdout and stderr (see
# zlbench.run.OUTPUT_CLOSED): nothing after it can explain the exit.
_OUTPUT_CLOSED = re.compile(r"^zlbench run: (the benchmark process closed its output .*)$")
_PYTEST_E = re.compile(r"^E\s+(\S.*)$")
_EXCEPTION = re.compile(r"^\s*([A-Za-z_][\w.]*(Error|Exception|Interrupt|Failure))\b(:.*)?$")
_FATAL = re.compile(r"Fatal Python error|Segmentation fault|Aborted|core dumped", re.IGNORECASE)
# Parts of an error line that change between identical failures.
_VOLATILE = re.compile(r"0x[0-9a-fA-F]+|\b\d+(\.\d+)?\s*(s|ms|sec|seconds)\b|\bpid[ =]\d+", re.IGNORECASE)


@dataclass(frozen=True)
class Outcome:
    """One attempt, classified."""

    status: str  # ok / failed / timeout / crashed / skipped
    exit_code: Optional[int]  # as the batch saw it; None when timed out
    signal: Optional[int]  # the signal that killed it, if any
    error_line: str  # the last error line of its output ("" when none)
    preflight: bool = False  # exit 3: a broken environment, not a broken operator
    limit_s: Optional[float] = None  # the timeout that expired
    # Timeouts: what the attempt was doing (compiling, measuring, starting, no_progress)
    # and what it had done (batch.activity); the batch reports timeout_<kind>.
    timeout_kind: Optional[str] = None
    detail: str = ""

    @property
    def signature(self) -> Tuple[str, Optional[int], str]:
        """Same signature twice in a row means the failure is deterministic."""
        return (self.status, self.exit_code, _VOLATILE.sub("#", self.error_line))

    @property
    def measured_nothing(self) -> bool:
        """The run exited 0 but its log shows no countable row (NO_MEASUREMENT): the
        operator's own doing at any dtype, so no dtype fallback."""
        return self.error_line.startswith(NO_MEASUREMENT)

    @property
    def looks_transient(self) -> bool:
        if self.status in (TIMEOUT, CRASHED):
            return True
        return self.status == FAILED and not self.preflight and bool(TRANSIENT_TEXT.search(self.error_line))

    @property
    def reason(self) -> str:
        if self.status == TIMEOUT:
            if self.timeout_kind == "no_progress":
                head = f"no progress for {self.limit_s:g} s" if self.limit_s else "no progress"
            else:
                head = f"timed out after {self.limit_s:g} s" if self.limit_s else "timed out"
            if self.timeout_kind and self.timeout_kind != "no_progress":
                head += f" while {self.timeout_kind}"
            if self.detail:
                head += f" ({self.detail})"
        elif self.signal is not None:
            head = f"killed by {signal_name(self.signal)}"
        elif self.preflight:
            marker = parse_marker(self.error_line)
            if marker is not None and marker.name == PREFLIGHT_FAILED:
                return f"preflight failed ({marker.get('check', '?')}): {marker.get('reason', '')}".rstrip(
                    ": "
                )
            head = "preflight failed"
        elif self.status == SKIPPED:
            head = "no tests collected" if self.exit_code == EXIT_NO_TESTS else "every test skipped"
        elif self.status == OK:
            return ""
        else:
            head = f"exit {self.exit_code}"
        return f"{head}: {self.error_line}" if self.error_line else head


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def killing_signal(exit_code: int) -> Optional[int]:
    if exit_code < 0:
        return -exit_code
    if 128 < exit_code < 128 + 65 and exit_code != 130:
        return exit_code - 128
    return None


def classify(
    exit_code: Optional[int],
    timed_out: bool,
    log_tail: Iterable[str],
    limit_s: Optional[float] = None,
    timeout_kind: Optional[str] = None,
    detail: str = "",
) -> Outcome:
    error = last_error_line(log_tail)
    if timed_out:
        return Outcome(TIMEOUT, None, None, error, limit_s=limit_s, timeout_kind=timeout_kind, detail=detail)
    if exit_code is None:
        # The process that could reap it (a warm worker) died first: no exit status.
        return Outcome(CRASHED, None, None, error or "exit status lost: its worker died")
    if exit_code == EXIT_OK:
        session = last_session_end(log_tail)
        if session and "skipped" in session and "passed" not in session and "failed" not in session:
            # pytest exits 0 when every test skipped (a skipif on the device): nothing measured.
            return Outcome(SKIPPED, exit_code, None, session)
        return Outcome(OK, exit_code, None, "")
    if exit_code == EXIT_NO_TESTS:
        return Outcome(SKIPPED, exit_code, None, error)
    sig = killing_signal(exit_code)
    if sig is not None:
        return Outcome(CRASHED, exit_code, sig, error)
    return Outcome(FAILED, exit_code, None, error, preflight=exit_code == EXIT_PREFLIGHT)


def last_error_line(lines: Iterable[str], limit: int = 300) -> str:
    """The most telling error line of a log tail: a preflight marker, else pytest's
    last ``E ...`` line or FAILED summary, else the last exception-looking line."""
    lines = [ln.rstrip() for ln in lines]
    for find in (
        _whole(_PREFLIGHT),
        _group(_OUTPUT_CLOSED, 1),
        _group(_PYTEST_E, 1),
        _failed_reason,
        _whole(_EXCEPTION),
        _whole(_FATAL),
    ):
        for line in reversed(lines):
            text = find(line)
            if text:
                return text.strip()[:limit]
    return ""


def _whole(pattern: "re.Pattern[str]") -> Callable[[str], Optional[str]]:
    return lambda line: line if pattern.search(line) else None


def _group(pattern: "re.Pattern[str]", group: int) -> Callable[[str], Optional[str]]:
    def find(line: str) -> Optional[str]:
        m = pattern.search(line)
        return m.group(group) if m else None

    return find


def _failed_reason(line: str) -> Optional[str]:
    """The reason of pytest's ``FAILED node - reason`` line (none without a reason)."""
    m = FAILED_RE.match(line)
    return m["msg"] if m and m["msg"] else None

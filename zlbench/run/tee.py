"""Live output to the terminal, ANSI-free output to run.log."""

from __future__ import annotations

import collections
import os
import re
from typing import BinaryIO, Deque, Optional, TextIO

from ..markers import OUTPUT_TRUNCATED, format_marker

# CSI sequences (colours, cursor moves) and OSC sequences (terminal titles).
ANSI_RE = re.compile(rb"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
# A chunk may end inside an escape sequence; hold back at most this many bytes.
_MAX_PARTIAL = 32


class AnsiStripper:
    """Strips escape sequences from a byte stream that arrives in arbitrary chunks."""

    def __init__(self) -> None:
        self._pending = b""

    def feed(self, chunk: bytes) -> bytes:
        data = self._pending + chunk
        self._pending = b""
        esc = data.rfind(b"\x1b")
        if esc != -1 and len(data) - esc < _MAX_PARTIAL and not ANSI_RE.match(data, esc):
            data, self._pending = data[:esc], data[esc:]
        return ANSI_RE.sub(b"", data)

    def flush(self) -> bytes:
        rest, self._pending = ANSI_RE.sub(b"", self._pending), b""
        return rest


class CappedLog:
    """Writes at most ``cap`` bytes: the first half as it comes, the last half held in
    memory and written at the end after an OUTPUT_TRUNCATED line saying how much was
    cut. A run that floods its output keeps its beginning and its end (where pytest
    reports failures) and never fills the disk."""

    def __init__(self, log: BinaryIO, cap: int):
        self.log = log
        self.head_cap = cap - cap // 2
        self.head_size = 0
        self.tail_cap = cap // 2
        self.tail: Deque[bytes] = collections.deque()
        self.tail_size = 0
        self.dropped = 0

    def write(self, data: bytes) -> None:
        room = self.head_cap - self.head_size
        if room > 0:
            head, data = data[:room], data[room:]
            self.log.write(head)
            self.head_size += len(head)
        if not data:
            return
        self.tail.append(data)
        self.tail_size += len(data)
        while self.tail_size > self.tail_cap:
            over = self.tail_size - self.tail_cap
            first = self.tail[0]
            cut = min(len(first), over)
            if cut == len(first):
                self.tail.popleft()
            else:
                self.tail[0] = first[cut:]
            self.tail_size -= cut
            self.dropped += cut

    def flush(self) -> None:
        self.log.flush()

    def close(self) -> None:
        """Write the held tail (after the marker, when anything was cut)."""
        if self.dropped:
            self.log.write(
                b"\n"
                + format_marker(
                    OUTPUT_TRUNCATED, bytes=self.dropped, kept_head=self.head_size, kept_tail=self.tail_size
                ).encode()
                + b"\n"
            )
        self.log.write(b"".join(self.tail))
        self.tail.clear()
        self.log.flush()


def pump(source_fd: int, log: BinaryIO, terminal: Optional[TextIO], cap_bytes: Optional[int] = None) -> None:
    """Copy ``source_fd`` until EOF: raw to the terminal (when given), stripped to
    ``log``, at most ``cap_bytes`` of it (see CappedLog)."""
    stripper = AnsiStripper()
    sink = CappedLog(log, cap_bytes) if cap_bytes is not None else None
    dest = sink if sink is not None else log
    out = getattr(terminal, "buffer", None) if terminal is not None else None
    while True:
        try:
            chunk = os.read(source_fd, 65536)
        except InterruptedError:
            continue
        if not chunk:
            break
        if out is not None:
            out.write(chunk)
            out.flush()
        elif terminal is not None:
            terminal.write(chunk.decode("utf-8", "replace"))
            terminal.flush()
        dest.write(stripper.feed(chunk))
        dest.flush()
    dest.write(stripper.flush())
    if sink is not None:
        sink.close()
    log.flush()

"""Live output to the terminal, ANSI-free output to run.log."""

from __future__ import annotations

import os
import re
from typing import BinaryIO, Optional, TextIO

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


def pump(source_fd: int, log: BinaryIO, terminal: Optional[TextIO]) -> None:
    """Copy ``source_fd`` until EOF: raw to the terminal, stripped to ``log``."""
    stripper = AnsiStripper()
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
        log.write(stripper.feed(chunk))
        log.flush()
    log.write(stripper.flush())
    log.flush()

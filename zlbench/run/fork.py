"""Process plumbing the warm worker's roles share (zlbench/run/worker.py and the
modules it forks into): fork and leave like an interpreter, redirect output, reset
signals, environment and sys.path as a fresh process has them, and the worker's
reply channel."""

from __future__ import annotations

import atexit
import importlib
import json
import os
import signal
import sys
import traceback
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

# The worker's own PYTHONPATH entries, left out of a forked benchmark's sys.path.
WORKER_PYTHONPATH: List[str] = []


class Channel:
    def __init__(self, reply_fd: int):
        self.replies = os.fdopen(reply_fd, "w", buffering=1)
        self.requests = sys.stdin.buffer

    def send(self, **msg) -> None:
        self.replies.write(json.dumps(msg) + "\n")
        self.replies.flush()

    def receive(self) -> Optional[dict]:
        line = self.requests.readline()
        if not line:
            return None
        return json.loads(line)


def fork_child(child: Callable[[], None]) -> int:
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        child()  # never returns
    return pid


def exit_with(body: Callable[[], int], handlers: bool = True) -> None:
    """Run ``body`` in this forked process and leave with its code, like an interpreter
    would (an uncaught exception: its traceback and 1); never returns. ``handlers``:
    whether the exit handlers run (``exit_now``)."""
    code = 1
    try:
        code = body()
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:  # noqa: BLE001 - reported in the process's output, like a crash
        traceback.print_exc()
        code = 1
    finally:
        exit_now(code, handlers)


def exit_now(code: int, handlers: bool = True) -> None:
    """Leave like an interpreter that finished: run the exit handlers (unless
    ``handlers`` is False: a process whose handlers are all its parent's, registered by
    imports it never used), flush, no unwinding into the worker's loop."""
    try:
        if handlers:
            atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code if 0 <= code < 256 else 1)


def preimport(names) -> Tuple[List[str], Dict[str, str]]:
    imported, failed = [], {}
    for name in names:
        try:
            importlib.import_module(name)
            imported.append(name)
        except Exception as e:  # noqa: BLE001 - a module that fails here fails in the child too
            failed[name] = f"{type(e).__name__}: {e}"
    return imported, failed


def redirect_output(log_path: str) -> None:
    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)


def default_signals() -> None:
    """What a fresh interpreter starts with."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)


def replace_environ(env: Dict[str, str]) -> None:
    os.environ.clear()
    os.environ.update(env)


def quiet() -> None:
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)


def copy_out(src_fd: int, dst_fd: int) -> None:
    os.lseek(src_fd, 0, os.SEEK_SET)
    while True:
        chunk = os.read(src_fd, 65536)
        if not chunk:
            return
        os.write(dst_fd, chunk)


def pythonpath_entries(value: Optional[str]) -> List[str]:
    return [os.path.abspath(p) for p in (value or "").split(os.pathsep) if p]


def fresh_sys_path(cwd: str, pythonpath: Optional[str]) -> None:
    """sys.path as ``python -m pytest`` in ``cwd`` with this PYTHONPATH would have it:
    the cwd first, then PYTHONPATH, then the interpreter's own entries."""
    worker_own = set(WORKER_PYTHONPATH)
    rest = [p for p in sys.path[1:] if p not in worker_own]
    wanted = [os.path.abspath(cwd), *pythonpath_entries(pythonpath)]
    sys.path[:] = wanted + [p for p in rest if p not in wanted]

"""A warm batch worker: imports what can be imported without touching a device, then
forks one fresh ``zlbench run`` per operator attempt.

Started by the batch (``python -m zlbench.run.worker --backend cuda --corpus-root R``),
one per device slot. It talks JSON lines: requests on stdin, replies on the stdout it
had at start (its own fd 1 then points at its log, so nothing an import prints can
corrupt a reply).

    <- {"event": "ready", "pid", "imported": [...], "failed": {...}, "import_s"}
       or {"event": "refused", "reason", "detail"} and exit
    -> {"cmd": "attempt", "argv": [zlbench run args], "env": {...}, "cwd", "log"}
    <- {"event": "started", "pid"}   the child: a new session, its output to "log"
    -> {"cmd": "reap"}               once the batch has seen it exit and cleaned its group
    <- {"event": "reaped", "rc"}     rc as Popen gives it (-N: killed by signal N)

Before every fork it proves that no device runtime is initialised in this process
(``backends.initialised_runtimes``): a child of a process that initialised CUDA cannot
use CUDA. If one is, it refuses and exits; the batch goes on with fresh processes.

The child runs ``zlbench run``'s own code (``run_from_flags``) with one difference: the
benchmark process is a second fork that calls ``pytest.main`` with the exact argv and
environment the fresh ``python -m pytest`` would get, and ``os._exit``s with its code.
The run dir, exit codes and output are the same as ``zlbench run``'s.
"""

from __future__ import annotations

import argparse
import atexit
import gc
import importlib
import json
import os
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Dict, List, Optional, Tuple

# Imported by every benchmark process and safe before any device is touched.
PREIMPORT = (
    "numpy",
    "yaml",
    "sqlalchemy",
    "torch",
    "triton",
    "pytest",
    "_pytest.python",
    "_pytest.terminal",
    "_pytest.fixtures",
    "_pytest.main",
    "_pytest.runner",
    "zlbench.plugins.phases",
    "zlbench.plugins.device_setup",
    "zlbench.plugins.direct_timer",
    "zlbench.plugins.graph_timer",
    "zlbench.plugins.autotune",
    "zlbench.plugins.parallel_warmup",
    "zlbench.plugins.report",
    "zlbench.cli",
    "zlbench.run",
    "zlbench.providers",
    "zlbench.tuner_cache",
)
# Vendor triton builds (flagtree and friends) install as "triton"; a vendor's torch
# extension is imported by the backend's probe only. Never imported by a worker:
# importing the library under test initialises the device (flag_gems does at import).
NEVER = ("flag_gems", "flaggems_benchmark", "benchmark")
PLUGIN_PACKAGE = "zlbench.plugins"

_WORKER_PYTHONPATH: List[str] = []


def conftest_imports(corpus_root: Path) -> List[str]:
    """Top-level absolute imports of the corpus' benchmark/conftest.py (module names),
    leaving out the library under test and the corpus' own packages."""
    from ..corpus.tree import conftest_imports as imported_by_conftest

    names = imported_by_conftest(corpus_root)
    local = {p.name.split(".")[0] for p in corpus_root.iterdir()} if corpus_root.is_dir() else set()
    out = []
    for name in names:
        top = name.split(".")[0]
        if top in NEVER or top in local or name in out:
            continue
        out.append(name)
    return out


def preimport(names) -> Tuple[List[str], Dict[str, str]]:
    imported, failed = [], {}
    for name in names:
        try:
            importlib.import_module(name)
            imported.append(name)
        except Exception as e:  # noqa: BLE001 - a module that fails here fails in the child too
            failed[name] = f"{type(e).__name__}: {e}"
    return imported, failed


class _Channel:
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


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m zlbench.run.worker")
    parser.add_argument("--corpus-root", default=None)
    args = parser.parse_args(argv)
    # fd 1 becomes the reply channel; what imports and children print goes to stderr.
    channel = _Channel(os.dup(1))
    os.dup2(2, 1)
    _WORKER_PYTHONPATH[:] = _pythonpath_entries(os.environ.get("PYTHONPATH"))

    from .. import backends

    started = time.monotonic()
    names = list(PREIMPORT)
    if args.corpus_root:
        names += [n for n in conftest_imports(Path(args.corpus_root)) if n not in names]
    imported, failed = preimport(names)
    import_s = time.monotonic() - started
    print(
        f"zlbench worker {os.getpid()}: imported {len(imported)} modules in {import_s:.1f} s"
        + (f"; failed: {failed}" if failed else ""),
        file=sys.stderr,
        flush=True,
    )
    touched = backends.initialised_runtimes()
    if touched:
        channel.send(event="refused", reason="device_initialised", detail=",".join(touched))
        return 0
    # What was imported lives as long as the worker: keep it out of every collection.
    # pytest collects several times at exit (unraisable-exception check), which costs
    # 0.5 s per operator once torch's objects are on the heap; frozen, they are skipped,
    # and the children's pages stay shared with the worker.
    gc.collect()
    gc.freeze()
    channel.send(
        event="ready", pid=os.getpid(), imported=imported, failed=failed, import_s=round(import_s, 3)
    )
    while True:
        msg = channel.receive()
        if msg is None or msg.get("cmd") == "exit":
            return 0
        if msg.get("cmd") != "attempt":
            channel.send(event="error", detail=f"unknown request {msg!r}")
            continue
        touched = backends.initialised_runtimes()
        if touched:
            channel.send(event="refused", reason="device_initialised", detail=",".join(touched))
            return 0
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _attempt_child(msg, channel)  # never returns
        channel.send(event="started", pid=pid)
        # Reap only when told: until then the exited child is a zombie whose pid (its
        # group id) cannot be reused, so the batch can clean up its group safely.
        reply = channel.receive()
        _, status = os.waitpid(pid, 0)
        if reply is None:
            return 0
        channel.send(event="reaped", rc=os.waitstatus_to_exitcode(status))


def _attempt_child(msg: dict, channel: _Channel) -> None:
    """The forked ``zlbench run``: a new session, output to the attempt's log."""
    code = 1
    try:
        os.setsid()
        channel.replies.close()
        _redirect(msg["log"])
        _default_signals()
        _replace_environ(msg["env"])
        os.chdir(msg.get("cwd") or os.getcwd())
        sys.argv = ["zlbench", "run", *msg["argv"]]
        from ..cli import run_command
        from . import run_from_flags

        ctx = run_command.make_context("zlbench run", list(msg["argv"]))
        flags = dict(ctx.params)
        run_dir = flags.pop("run_dir")
        code = run_from_flags(flags, run_dir=run_dir, start=fork_pytest)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:  # noqa: BLE001 - reported in the attempt's log, like a crash
        traceback.print_exc()
        code = 1
    finally:
        _exit(code)


def _redirect(log_path: str) -> None:
    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)


def _default_signals() -> None:
    """What a fresh interpreter starts with."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)


def _replace_environ(env: Dict[str, str]) -> None:
    os.environ.clear()
    os.environ.update(env)


def _pythonpath_entries(value: Optional[str]) -> List[str]:
    return [os.path.abspath(p) for p in (value or "").split(os.pathsep) if p]


def _exit(code: int) -> None:
    """Leave like an interpreter that finished: flush, run exit handlers, no unwinding
    into the worker's loop."""
    try:
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code if 0 <= code < 256 else 1)


class ForkedPytest:
    """The benchmark process as a fork that calls ``pytest.main``: the Popen subset
    ``zlbench.run._launch`` uses."""

    def __init__(self, pid: int):
        self.pid = pid
        self.returncode: Optional[int] = None

    def poll(self) -> Optional[int]:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: Optional[float] = None) -> int:
        if timeout is None:
            while self.returncode is None:
                try:
                    _, status = os.waitpid(self.pid, 0)
                except ChildProcessError:
                    break
                self.returncode = os.waitstatus_to_exitcode(status)
            return self.returncode if self.returncode is not None else 1
        deadline = time.monotonic() + timeout
        while True:
            code = self.poll()
            if code is not None:
                return code
            if time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(["pytest"], timeout)
            time.sleep(0.02)

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def fork_pytest(cmd: List[str], cwd: str, env: Dict[str, str], output_fd: int) -> ForkedPytest:
    """``start`` for ``zlbench.run._launch``: ``cmd`` is ``[python, -m, pytest, *args]``."""
    if cmd[1:3] != ["-m", "pytest"]:
        raise ValueError(f"not a pytest command: {cmd[:3]}")
    args = cmd[3:]
    pid = os.fork()
    if pid:
        return ForkedPytest(pid)
    code = 1
    try:
        os.dup2(output_fd, 1)
        os.dup2(output_fd, 2)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        os.chdir(cwd)
        _replace_environ(env)
        _fresh_sys_path(cwd, env.get("PYTHONPATH"))
        _forget_plugins()
        import pytest

        sys.argv = [pytest.__file__, *args]
        code = int(pytest.main(args))
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:  # noqa: BLE001
        traceback.print_exc()
        code = 1
    finally:
        _exit(code)
    raise AssertionError("unreachable")


def _forget_plugins() -> None:
    """zlbench's -p plugins act on the environment when imported (device_setup sets the
    vendor variables from ZL_BACKEND): pytest imports them again, in the run's own
    environment, exactly as in a fresh process. What they import stays loaded."""
    for name in [m for m in sys.modules if m.startswith(PLUGIN_PACKAGE + ".")]:
        del sys.modules[name]


def _fresh_sys_path(cwd: str, pythonpath: Optional[str]) -> None:
    """sys.path as ``python -m pytest`` in ``cwd`` with this PYTHONPATH would have it:
    the cwd first, then PYTHONPATH, then the interpreter's own entries."""
    worker_own = set(_WORKER_PYTHONPATH)
    rest = [p for p in sys.path[1:] if p not in worker_own]
    wanted = [os.path.abspath(cwd), *_pythonpath_entries(pythonpath)]
    sys.path[:] = wanted + [p for p in rest if p not in wanted]


if __name__ == "__main__":
    sys.exit(main())

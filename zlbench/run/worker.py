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

Prestart (``--prestart``): the library under test initialises the device when imported
(flag_gems does), so no worker may import it, and every benchmark process paid for it
before its pytest session began. Instead, as soon as an attempt has started, the worker
forks the child for the next one (a *spare*): in its own session it forks the benchmark
process, which imports what the corpus' conftest imports, the library included, in the
environment the last attempt's benchmark process had, and then waits. The next attempt
goes to the spare; its benchmark process is used only if the attempt's environment and
directory equal the ones it imported in (per-run keys aside), else it is dropped and a
plain fork takes its place. What the import printed goes to the attempt's output first.
The spare holds a device context while the previous operator runs (a few hundred MB).
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
from typing import Callable, Dict, List, Optional, Tuple

from .. import benchenv
from ..proc import ATTEMPT_TAG, kill_group_now, set_parent_death_signal

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
# Environment keys that differ between attempts by design and that the library under
# test never reads: a spare's benchmark process serves any attempt whose environment
# differs from its own in these only.
PER_RUN_KEYS = benchenv.per_run_keys([ATTEMPT_TAG])

_WORKER_PYTHONPATH: List[str] = []


def conftest_imports(corpus_root: Path, device_free: bool = True) -> List[str]:
    """Top-level absolute imports of the corpus' benchmark/conftest.py (module names),
    leaving out the corpus' own packages and, with ``device_free``, the library under
    test (what a worker may import; a spare's benchmark process imports them all)."""
    from ..corpus.tree import conftest_imports as imported_by_conftest

    names = imported_by_conftest(corpus_root)
    local = {p.name.split(".")[0] for p in corpus_root.iterdir()} if corpus_root.is_dir() else set()
    out = []
    for name in names:
        top = name.split(".")[0]
        if (device_free and top in NEVER) or top in local or name in out:
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
    parser.add_argument(
        "--prestart", action="store_true", help="fork each next attempt's child ahead, its library imported"
    )
    args = parser.parse_args(argv)
    # fd 1 becomes the reply channel; what imports and children print goes to stderr.
    channel = _Channel(os.dup(1))
    os.dup2(2, 1)
    _WORKER_PYTHONPATH[:] = _pythonpath_entries(os.environ.get("PYTHONPATH"))

    from .. import backends

    started = time.monotonic()
    names = list(PREIMPORT)
    corpus_root = Path(args.corpus_root) if args.corpus_root else None
    if corpus_root is not None:
        names += [n for n in conftest_imports(corpus_root) if n not in names]
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
    library = conftest_imports(corpus_root, device_free=False) if args.prestart and corpus_root else []
    spare: Optional[Spare] = None
    try:
        while True:
            msg = channel.receive()
            if msg is None or msg.get("cmd") == "exit":
                return 0
            if msg.get("cmd") != "attempt":
                channel.send(event="error", detail=f"unknown request {msg!r}")
                continue
            pid = spare.hand(msg) if spare is not None else None
            spare = None
            if pid is None:
                touched = backends.initialised_runtimes()
                if touched:
                    channel.send(event="refused", reason="device_initialised", detail=",".join(touched))
                    return 0
                pid = _fork(lambda: _attempt_child(msg, channel))
            channel.send(event="started", pid=pid)
            if library and not backends.initialised_runtimes():
                # The next attempt's child, readied while this one runs.
                try:
                    spare = Spare.fork(msg, library, channel)
                except OSError as e:  # no pipe or no fork now: the next attempt forks plainly
                    print(f"zlbench worker: no spare: {e}", file=sys.stderr, flush=True)
            # Reap only when told: until then the exited child is a zombie whose pid (its
            # group id) cannot be reused, so the batch can clean up its group safely.
            reply = channel.receive()
            _, status = os.waitpid(pid, 0)
            if reply is None:
                return 0
            channel.send(event="reaped", rc=os.waitstatus_to_exitcode(status))
    finally:
        if spare is not None:
            spare.discard()


def _fork(child: Callable[[], None]) -> int:
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        child()  # never returns
    return pid


def _attempt_child(msg: dict, channel: _Channel) -> None:
    """The forked ``zlbench run``: a new session, output to the attempt's log."""
    os.setsid()
    channel.replies.close()
    _default_signals()
    _run_attempt(msg, fork_pytest)


def _exit_with(body: Callable[[], int]) -> None:
    """Run ``body`` in this forked process and leave with its code, like an interpreter
    would (an uncaught exception: its traceback and 1); never returns."""
    code = 1
    try:
        code = body()
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:  # noqa: BLE001 - reported in the process's output, like a crash
        traceback.print_exc()
        code = 1
    finally:
        _exit(code)


def _run_attempt(msg: dict, start, note: str = "") -> None:
    """``zlbench run`` for one attempt request, in this (forked) process; never returns.
    ``note`` goes to the attempt log first (how its benchmark process will start)."""

    def body() -> int:
        _redirect(msg["log"])
        if note:
            print(note, file=sys.stderr, flush=True)
        _replace_environ(msg["env"])
        os.chdir(msg.get("cwd") or os.getcwd())
        sys.argv = ["zlbench", "run", *msg["argv"]]
        from . import run_from_flags

        flags, run_dir = _run_flags(msg["argv"])
        return run_from_flags(flags, run_dir=run_dir, start=start)

    _exit_with(body)


def _run_flags(argv: List[str]) -> Tuple[dict, Optional[Path]]:
    """``zlbench run``'s flags from its argv, and its --run-dir."""
    from .command import run_command

    ctx = run_command.make_context("zlbench run", list(argv))
    flags = dict(ctx.params)
    run_dir = flags.pop("run_dir")
    return flags, Path(run_dir) if run_dir else None


class Spare:
    """The child of the next attempt, forked before that attempt exists (worker side).

    The child waits for its request on a pipe; closing the pipe unused makes it exit.
    """

    def __init__(self, pid: int, request_fd: int):
        self.pid = pid
        self.request_fd = request_fd
        self.reaped = False

    @classmethod
    def fork(cls, template: dict, library: List[str], channel: _Channel) -> "Spare":
        read_fd, write_fd = os.pipe()
        pid = _fork(lambda: _spare_child(template, library, read_fd, write_fd, channel))
        os.close(read_fd)
        return cls(pid, write_fd)

    def _exited(self) -> bool:
        """Reaps it if it has exited (it should not have: it waits for its request)."""
        if not self.reaped:
            try:
                self.reaped = os.waitpid(self.pid, os.WNOHANG)[0] != 0
            except ChildProcessError:
                self.reaped = True
        return self.reaped

    def hand(self, msg: dict) -> Optional[int]:
        """Give it the attempt; None (and it is discarded, the worker log says why) when
        it cannot take it: the attempt then forks plainly."""
        fd, self.request_fd = self.request_fd, -1
        if not self._exited():
            try:
                with os.fdopen(fd, "w") as pipe:
                    pipe.write(json.dumps(msg) + "\n")
                return self.pid
            except OSError as e:
                why = f"the request could not be written ({e})"
        else:
            os.close(fd)
            why = "it had exited"
        print(f"zlbench worker: spare {self.pid} not used: {why}", file=sys.stderr, flush=True)
        self.discard()
        return None

    def discard(self) -> None:
        """Stop it and its benchmark process (its own group), and reap it."""
        if self.request_fd >= 0:
            os.close(self.request_fd)
            self.request_fd = -1
        if self._exited():
            return
        kill_group_now(self.pid)
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass
        self.reaped = True


def _spare_child(template: dict, library: List[str], read_fd: int, write_fd: int, channel: _Channel) -> None:
    """A spare: fork the benchmark process for the environment ``template`` (the last
    attempt's request) would give, then wait for the real request. Never returns."""
    try:
        os.setsid()
        os.close(write_fd)
        channel.replies.close()
        _default_signals()
        set_parent_death_signal(signal.SIGKILL)  # a worker killed outright takes its spare along
        _quiet()
        benchmark, why_not = Prestarted.fork(template, library, close_fds=(read_fd,))
        with os.fdopen(read_fd, "r") as pipe:
            line = pipe.readline()
        if not line:
            if benchmark is not None:
                benchmark.drop()
            os._exit(0)
        msg = json.loads(line)
        set_parent_death_signal(0)  # from here on an attempt like any other
    except BaseException:  # noqa: BLE001 - a spare that cannot wait is not used
        os._exit(1)
    if benchmark is None:
        _run_attempt(msg, fork_pytest, f"zlbench worker: no prestarted benchmark process: {why_not}")
    else:
        # A run that never starts its benchmark (preflight failed) leaves no process behind.
        atexit.register(benchmark.drop)
        _run_attempt(msg, benchmark.start)


def _quiet() -> None:
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)


class Prestarted:
    """A benchmark process forked before its run's request, its library imported (the
    spare child's side): ``start`` hands it the run's argv, environment and output, or
    falls back to ``fork_pytest`` when it cannot serve that run unchanged."""

    def __init__(self, pid: int, sock, cwd: str, env: Dict[str, str]):
        self.pid = pid
        self.sock = sock
        self.cwd = cwd
        self.env = env
        self.handed = False

    @classmethod
    def fork(
        cls, template: dict, library: List[str], close_fds: Tuple[int, ...] = ()
    ) -> Tuple[Optional["Prestarted"], str]:
        """(the prestarted process, "") or (None, why there is none)."""
        import socket

        try:
            cwd, env = _planned_benchmark(template)
        except BaseException as e:  # noqa: BLE001 - no plan, no spare: the attempt forks plainly
            return None, f"{type(e).__name__}: {e}"
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        pid = os.fork()
        if pid == 0:
            ours.close()
            for fd in close_fds:
                os.close(fd)
            _prestarted_benchmark(theirs, cwd, env, library)  # never returns
        theirs.close()
        return cls(pid, ours, cwd, env), ""

    def drop(self) -> None:
        """Stop it unless it was handed its run (then the run owns it)."""
        if self.handed:
            return
        self.handed = True
        self.sock.close()
        try:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass

    def start(self, cmd: List[str], cwd: str, env: Dict[str, str], output_fd: int):
        """``start`` for ``zlbench.run._launch``."""
        import socket

        differ = sorted(
            k for k in set(env) | set(self.env) if k not in PER_RUN_KEYS and env.get(k) != self.env.get(k)
        )
        why = ""
        if cmd[1:3] != ["-m", "pytest"]:
            why = "not a pytest command"
        elif os.path.abspath(cwd) != os.path.abspath(self.cwd):
            why = f"directory {cwd} is not {self.cwd}"
        elif differ:
            why = f"environment differs in {', '.join(differ[:5])}"
        if not why:
            request = json.dumps({"args": cmd[3:], "cwd": cwd, "env": env}).encode()
            try:
                socket.send_fds(self.sock, [request], [output_fd])
                self.sock.close()
                self.handed = True
                print(
                    f"zlbench worker: prestarted benchmark process {self.pid} used",
                    file=sys.stderr,
                    flush=True,
                )
                return ForkedPytest(self.pid)
            except OSError as e:  # it died importing: a plain fork takes its place
                why = f"it is gone ({e})"
        print(f"zlbench worker: prestarted benchmark process not used: {why}", file=sys.stderr, flush=True)
        self.drop()
        return fork_pytest(cmd, cwd, env, output_fd)


def _planned_benchmark(template: dict) -> Tuple[str, Dict[str, str]]:
    """(cwd, environment) of the benchmark process of the run ``template`` asks for."""
    from . import planned_benchmark

    # Not the last attempt's tag: the batch reaps what carries it when that attempt ends.
    _replace_environ({k: v for k, v in template["env"].items() if k != ATTEMPT_TAG})
    os.chdir(template.get("cwd") or os.getcwd())
    flags, _ = _run_flags(template["argv"])
    return planned_benchmark(flags)


def _prestarted_benchmark(sock, cwd: str, env: Dict[str, str], library: List[str]) -> None:
    """Import the library as the run's benchmark process would, then wait for the run."""
    set_parent_death_signal(signal.SIGKILL)
    buffer = os.memfd_create("zlbench-prestart-output")
    os.dup2(buffer, 1)
    os.dup2(buffer, 2)

    def body() -> int:
        os.chdir(cwd)
        _replace_environ(env)
        _fresh_sys_path(cwd, env.get("PYTHONPATH"))
        # pytest imports -p plugins before any conftest: the vendor variables that
        # device_setup sets are there when a conftest imports the library.
        from ..plugins import device_setup  # noqa: F401

        started = time.monotonic()
        imported, failed = preimport(library)
        took = time.monotonic() - started
        print(
            f"zlbench worker: this benchmark process imported {', '.join(imported) or 'nothing'} "
            f"in {took:.1f} s, before its run began"
            + (f"; failed: {failed} (the run's conftest imports it again)" if failed else ""),
            flush=True,
        )
        import socket

        request, fds, _, _ = socket.recv_fds(sock, 1 << 20, 1)
        if not request or not fds:
            return 0  # dropped unused
        set_parent_death_signal(0)
        sys.stdout.flush()
        sys.stderr.flush()
        output_fd = fds[0]
        os.dup2(output_fd, 1)
        os.dup2(output_fd, 2)
        os.close(output_fd)
        _copy_out(buffer, 1)
        os.close(buffer)
        run = json.loads(request)
        return _pytest_main(run["args"], run["cwd"], run["env"])

    _exit_with(body)


def _copy_out(src_fd: int, dst_fd: int) -> None:
    os.lseek(src_fd, 0, os.SEEK_SET)
    while True:
        chunk = os.read(src_fd, 65536)
        if not chunk:
            return
        os.write(dst_fd, chunk)


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
    ``zlbench.run._launch`` uses (a ``proc.GroupChild`` this process reaps)."""

    own_child = True

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
    pid = os.fork()
    if pid:
        return ForkedPytest(pid)

    def body() -> int:
        os.dup2(output_fd, 1)
        os.dup2(output_fd, 2)
        if output_fd > 2:
            # As in a fresh process: fds 1 and 2 are its only hold on the output pipe, so
            # closing them reaches EOF (zlbench run tells that from an exit).
            os.close(output_fd)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        return _pytest_main(cmd[3:], cwd, env)

    _exit_with(body)
    raise AssertionError("unreachable")


def _pytest_main(args: List[str], cwd: str, env: Dict[str, str]) -> int:
    """``python -m pytest ARGS`` in ``cwd`` with ``env``, in this process."""
    os.chdir(cwd)
    _replace_environ(env)
    _fresh_sys_path(cwd, env.get("PYTHONPATH"))
    _forget_plugins()
    import pytest

    sys.argv = [pytest.__file__, *args]
    return int(pytest.main(args))


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

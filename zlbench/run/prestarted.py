"""The prestarted benchmark process (a warm worker's role): forked by a spare before
its run's request, it imports the library under test in the environment the last
attempt's benchmark process had, then serves the run if its environment and directory
match (per-run keys aside), else it is dropped and a plain fork takes its place."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from typing import Dict, List, Optional, Tuple

from .. import benchenv
from ..proc import ATTEMPT_TAG, set_parent_death_signal
from .attempt_child import run_flags
from .fork import copy_out, exit_with, fresh_sys_path, preimport, replace_environ
from .forked_pytest import ForkedPytest, fork_pytest, pytest_main

# Environment keys that differ between attempts by design and that the library under
# test never reads: a spare's benchmark process serves any attempt whose environment
# differs from its own in these only.
PER_RUN_KEYS = benchenv.per_run_keys([ATTEMPT_TAG])


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
            cwd, env = planned_benchmark_env(template)
        except BaseException as e:  # noqa: BLE001 - no plan, no spare: the attempt forks plainly
            return None, f"{type(e).__name__}: {e}"
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        pid = os.fork()
        if pid == 0:
            ours.close()
            for fd in close_fds:
                os.close(fd)
            prestarted_benchmark(theirs, cwd, env, library)  # never returns
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


def planned_benchmark_env(template: dict) -> Tuple[str, Dict[str, str]]:
    """(cwd, environment) of the benchmark process of the run ``template`` asks for."""
    from . import planned_benchmark

    # Not the last attempt's tag: the batch reaps what carries it when that attempt ends.
    replace_environ({k: v for k, v in template["env"].items() if k != ATTEMPT_TAG})
    os.chdir(template.get("cwd") or os.getcwd())
    flags, _ = run_flags(template["argv"])
    return planned_benchmark(flags)


def prestarted_benchmark(sock, cwd: str, env: Dict[str, str], library: List[str]) -> None:
    """Import the library as the run's benchmark process would, then wait for the run."""
    set_parent_death_signal(signal.SIGKILL)
    buffer = os.memfd_create("zlbench-prestart-output")
    os.dup2(buffer, 1)
    os.dup2(buffer, 2)

    def body() -> int:
        os.chdir(cwd)
        replace_environ(env)
        fresh_sys_path(cwd, env.get("PYTHONPATH"))
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
        from ..plugins.gc_freeze import freeze_import

        frozen = freeze_import()
        if frozen is not None:
            print(f"zlbench worker: froze the {frozen} objects the import left (ZL_GC_FREEZE)", flush=True)
        import select
        import socket

        from ..plugins.percall import start_tracer

        said = start_tracer(run_waiting=lambda: bool(select.select([sock], [], [], 0)[0]))
        if said:
            print(said, flush=True)
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
        copy_out(buffer, 1)
        os.close(buffer)
        run = json.loads(request)
        return pytest_main(run["args"], run["cwd"], run["env"])

    exit_with(body)

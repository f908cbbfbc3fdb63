"""The spare (a warm worker's role): the child of the next attempt, forked before that
attempt exists, with its prestarted benchmark process; handed the attempt when it
comes, discarded otherwise."""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import List, Optional, Sequence, Tuple

from ..proc import kill_group_now, set_parent_death_signal
from .attempt_child import run_attempt
from .fork import Channel, default_signals, fork_child, quiet
from .forked_pytest import fork_pytest
from .prestarted import Prestarted


class Spare:
    """The child of the next attempt, forked before that attempt exists (worker side).

    The child waits for its request on a pipe; closing the pipe unused makes it exit.
    """

    def __init__(self, pid: int, request_fd: int):
        self.pid = pid
        self.request_fd = request_fd
        self.reaped = False

    @classmethod
    def fork(
        cls, template: dict, library: List[str], channel: Channel, others: Sequence["Spare"] = ()
    ) -> "Spare":
        """``others``: the spares already waiting, whose request pipes this one must not
        hold open (the worker's end of each is that spare's only writer)."""
        read_fd, write_fd = os.pipe()
        theirs = tuple(o.request_fd for o in others if o.request_fd >= 0)
        pid = fork_child(lambda: spare_child(template, library, read_fd, write_fd, channel, theirs))
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


def spare_child(
    template: dict,
    library: List[str],
    read_fd: int,
    write_fd: int,
    channel: Channel,
    close_fds: Tuple[int, ...] = (),
) -> None:
    """A spare: fork the benchmark process for the environment ``template`` (the last
    attempt's request) would give, then wait for the real request. Never returns."""
    try:
        os.setsid()
        os.close(write_fd)
        for fd in close_fds:  # the other spares' request pipes
            os.close(fd)
        channel.replies.close()
        default_signals()
        set_parent_death_signal(signal.SIGKILL)  # a worker killed outright takes its spare along
        quiet()
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
        run_attempt(msg, fork_pytest, f"zlbench worker: no prestarted benchmark process: {why_not}")
    else:
        # A run that never starts its benchmark (preflight failed) leaves no process behind.
        run_attempt(msg, benchmark.start, cleanup=benchmark.drop)

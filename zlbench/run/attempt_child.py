"""The attempt child (a warm worker's role): ``zlbench run`` for one attempt request,
forked from the worker (or from a spare), in a new session, its output to the
attempt's log."""

from __future__ import annotations

import os
import sys
import traceback
from pathlib import Path
from typing import Callable, List, Optional, Tuple

from .fork import Channel, default_signals, exit_with, redirect_output, replace_environ
from .forked_pytest import fork_pytest


def attempt_child(msg: dict, channel: Channel) -> None:
    """The forked ``zlbench run``: a new session, output to the attempt's log."""
    os.setsid()
    channel.replies.close()
    default_signals()
    run_attempt(msg, fork_pytest)


def run_attempt(msg: dict, start, note: str = "", cleanup: Optional[Callable[[], None]] = None) -> None:
    """``zlbench run`` for one attempt request, in this (forked) process; never returns.
    ``note`` goes to the attempt log first (how its benchmark process will start);
    ``cleanup`` runs when the run is over, however it ended.

    It leaves without the exit handlers it inherited: the worker's imports (torch,
    logging, multiprocessing) registered them, a fresh ``zlbench run`` has none of them,
    and running them took 31 ms of every attempt on a 2-core CPU host. A benchmark
    process it forks keeps them, as a fresh ``python -m pytest`` has them."""

    def body() -> int:
        try:
            redirect_output(msg["log"])
            if note:
                print(note, file=sys.stderr, flush=True)
            replace_environ(msg["env"])
            os.chdir(msg.get("cwd") or os.getcwd())
            sys.argv = ["zlbench", "run", *msg["argv"]]
            from . import run_from_flags

            flags, run_dir = run_flags(msg["argv"])
            return run_from_flags(flags, run_dir=run_dir, start=start)
        finally:
            if cleanup is not None:
                try:
                    cleanup()
                except Exception:  # noqa: BLE001 - the run's own exit code stands
                    traceback.print_exc()

    exit_with(body, handlers=False)


def run_flags(argv: List[str]) -> Tuple[dict, Optional[Path]]:
    """``zlbench run``'s flags from its argv, and its --run-dir."""
    from .command import run_command

    ctx = run_command.make_context("zlbench run", list(argv))
    flags = dict(ctx.params)
    run_dir = flags.pop("run_dir")
    return flags, Path(run_dir) if run_dir else None

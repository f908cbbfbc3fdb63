"""How an attempt's process starts: one interface, two ways (asv's one spawner
interface is the model).

``FreshLauncher`` starts ``zlbench run`` anew; ``WorkerLauncher`` asks the device slot's
warm worker (batch/workers.py) to fork it, and starts it fresh itself when the slot
cannot (a worker that refused, failed or stopped answering). ``run_attempt`` sees a
``Launcher`` and the ``Launched`` it returns, never which way it went but by ``mode``
(recorded in attempts.jsonl and ops_status.csv). Either child is a ``proc.GroupChild``:
the driver waits for it, and stops its group, the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional, Protocol, Sequence

from .. import proc
from .workers import WorkerSlot


@dataclass
class Launched:
    child: proc.GroupChild
    mode: str  # "fresh": a new process; "worker": forked by a warm worker


class Launcher(Protocol):
    def prepare(self) -> None:
        """Wait for what must be ready before the attempt's clock starts."""

    def launch(self, cmd: Sequence[str], env: Mapping[str, str], log_path: Path) -> Launched:
        """Start the attempt ``cmd`` (a full ``zlbench run`` command line), its output to
        ``log_path``."""
        ...

    def finished(self, launched: Launched, trouble: str) -> None:
        """The attempt is over and its group is clean; ``trouble`` says why the process
        it came from should not serve again ("" when all was well)."""


class FreshLauncher:
    """Every attempt a new process (``--run-mode fresh``, or no worker for the slot)."""

    def prepare(self) -> None:
        pass

    def launch(self, cmd: Sequence[str], env: Mapping[str, str], log_path: Path) -> Launched:
        return Launched(proc.start_group(cmd, env, log_path), "fresh")

    def finished(self, launched: Launched, trouble: str) -> None:
        pass


FRESH = FreshLauncher()


class WorkerLauncher:
    """Attempts forked by the slot's warm worker, which runs the flags after
    ``run_command`` (the worker is ``zlbench run`` already); fresh when it cannot."""

    def __init__(self, slot: WorkerSlot, run_command: Sequence[str]):
        self.slot = slot
        self.prefix = len(run_command)

    def prepare(self) -> None:
        self.slot.ready()  # a worker still importing: that wait is not the attempt's

    def launch(self, cmd: Sequence[str], env: Mapping[str, str], log_path: Path) -> Launched:
        child = self.slot.fork(list(cmd[self.prefix :]), env, log_path)
        if child is None:
            return FRESH.launch(cmd, env, log_path)
        return Launched(child, "worker")

    def finished(self, launched: Launched, trouble: str) -> None:
        if launched.mode == "worker":
            self.slot.after_attempt(trouble)


def launcher_for(slots: Mapping[str, WorkerSlot], device: str, run_command: Sequence[str]) -> Launcher:
    """The device's warm worker where the batch keeps one, else fresh processes."""
    slot: Optional[WorkerSlot] = slots.get(device)
    return FRESH if slot is None else WorkerLauncher(slot, run_command)

"""Warm workers, the driver's side: one per device slot, each a long-lived
``python -m zlbench.run.worker`` that forks one ``zlbench run`` per attempt.

The driver still owns every attempt: it waits for the forked child's exit through a
pidfd, stops its process group on timeout, kills leftovers while the exited child is
an unreaped zombie (its pid cannot be reused), and only then asks the worker to reap
it. A worker is recycled (stopped; the next attempt starts a new one) after
``max_ops`` attempts and on any sign of trouble: a failed, crashed or timed-out
attempt, leftovers in its group, a reply that does not come. A worker that refuses to
fork (it found a device initialised) or cannot start leaves its slot to fresh
processes for the rest of the batch, and the batch says so with WORKER_FORK_REFUSED.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import time
from pathlib import Path
from typing import List, Mapping, Optional, Sequence

from .. import proc
from ..markers import WORKER_FORK_REFUSED, format_marker

# torch + triton + pytest on a loaded host can take a while; a worker that has not
# said "ready" by then is given up for fresh processes.
READY_TIMEOUT_S = 300.0
REPLY_TIMEOUT_S = 60.0
DEFAULT_MAX_OPS = 50
WORKER_MODULE = "zlbench.run.worker"


class WorkerGone(Exception):
    """The worker did not answer as the protocol says; the slot recycles it."""


class _Lines:
    """JSON lines from a pipe, with a timeout and an optional wake fd (the stopper)."""

    def __init__(self, fd: int):
        self.fd = fd
        self.buffer = b""

    def read(self, timeout_s: float, wake_fd: Optional[int] = None) -> Optional[dict]:
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise WorkerGone(f"no reply in {timeout_s:g} s")
            fds = [self.fd] + ([wake_fd] if wake_fd is not None else [])
            ready, _, _ = select.select(fds, [], [], left)
            if wake_fd is not None and wake_fd in ready:
                return None
            if self.fd in ready:
                chunk = os.read(self.fd, 65536)
                if not chunk:
                    raise WorkerGone("the worker exited")
                self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        try:
            return json.loads(line)
        except ValueError:
            raise WorkerGone(f"unreadable reply {line[:200]!r}") from None


class ForkedAttempt:
    """A warm worker's fork: a ``proc.GroupChild`` its worker reaps (``wait`` asks it)."""

    own_child = False

    def __init__(self, worker: "Worker", pid: int):
        self.worker = worker
        self.pid = pid

    def wait(self) -> Optional[int]:
        """Reap through the worker; None when the exit status is lost with the worker."""
        return self.worker.reap()


class Worker:
    """One worker process. Started at once; ``wait_ready`` reads its first reply, so
    its imports overlap whatever the slot is doing meanwhile."""

    def __init__(self, argv: Sequence[str], env: Mapping[str, str], log_path: Path):
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as log:
            # Its own session: Ctrl-C in the terminal does not reach it; the batch stops it.
            self.proc = proc.start(argv, env, subprocess.PIPE, stdin=subprocess.PIPE, stderr=log)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.stdin, self.stdout = self.proc.stdin, self.proc.stdout
        self.log_path = log_path
        self.lines = _Lines(self.stdout.fileno())
        self.ops = 0
        self.ready: Optional[dict] = None
        self.announced = False

    def wait_ready(self, wake_fd: Optional[int]) -> Optional[dict]:
        """The worker's first reply ("ready" or "refused"); None when woken first."""
        if self.ready is None:
            self.ready = self.lines.read(READY_TIMEOUT_S, wake_fd)
        return self.ready

    def _send(self, **msg) -> None:
        try:
            self.stdin.write((json.dumps(msg) + "\n").encode())
            self.stdin.flush()
        except (BrokenPipeError, ValueError, OSError) as e:
            raise WorkerGone(f"cannot write to the worker: {e}") from None

    def fork(self, argv: Sequence[str], env: Mapping[str, str], log_path: Path) -> ForkedAttempt:
        """Start one attempt; raises WorkerGone, or Refused when it will not fork."""
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._send(cmd="attempt", argv=list(argv), env=dict(env), cwd=os.getcwd(), log=str(log_path))
        reply = self.lines.read(REPLY_TIMEOUT_S)
        if reply is None or reply.get("event") == "refused":
            raise Refused(reply or {})
        if reply.get("event") != "started":
            raise WorkerGone(f"unexpected reply {reply!r}")
        self.ops += 1
        return ForkedAttempt(self, int(reply["pid"]))

    def reap(self) -> Optional[int]:
        try:
            self._send(cmd="reap")
            reply = self.lines.read(REPLY_TIMEOUT_S)
        except WorkerGone:
            return None
        if not reply or reply.get("event") != "reaped":
            return None
        return int(reply["rc"])

    def stop(self, grace_s: float) -> None:
        """Ask it to exit; then its group gets SIGTERM, then SIGKILL. A worker still
        importing has nothing to finish: it is stopped at once."""
        if self.proc.poll() is None:
            if self.ready is None:
                proc.stop([self.proc], min(grace_s, 1.0))
            else:
                try:
                    self._send(cmd="exit")
                    self.stdin.close()
                except (WorkerGone, OSError):
                    pass
                try:
                    self.proc.wait(timeout=max(grace_s, 1.0))
                except subprocess.TimeoutExpired:
                    proc.stop([self.proc], grace_s)
        for stream in (self.stdin, self.stdout):
            try:
                stream.close()
            except OSError:
                pass


class Refused(Exception):
    def __init__(self, reply: dict):
        super().__init__(reply.get("detail") or reply.get("reason") or "refused")
        self.reason = reply.get("reason") or "refused"
        self.detail = reply.get("detail") or ""


def worker_command(
    corpus_root: Optional[str], prestart: bool = False, backend: Optional[str] = None
) -> List[str]:
    cmd = proc.python_module(WORKER_MODULE)
    if corpus_root:
        cmd += ["--corpus-root", corpus_root]
    if backend:
        cmd += ["--backend", backend]
    if prestart:
        cmd.append("--prestart")
    return cmd


class WorkerSlot:
    """The warm worker of one device slot, started on first use."""

    def __init__(
        self,
        device: str,
        env: Mapping[str, str],
        log_dir: Path,
        log,
        corpus_root: Optional[str],
        max_ops: int,
        grace_s: float,
        wake_fd: Optional[int] = None,
        prestart: bool = False,
        backend: Optional[str] = None,
    ):
        self.device = device
        self.backend = backend
        self.env = dict(env)
        self.log_dir = log_dir
        self.log = log
        self.corpus_root = corpus_root
        self.prestart = prestart
        self.max_ops = max(1, int(max_ops))
        self.grace_s = grace_s
        self.wake_fd = wake_fd
        self.worker: Optional[Worker] = None
        self.fresh_only = False  # set once a worker refused or failed to start
        self.started = 0

    def _refuse(self, reason: str, detail: str) -> None:
        self.fresh_only = True
        self.log(
            format_marker(WORKER_FORK_REFUSED, device=self.device, reason=reason, detail=detail or None)
            + " (this slot goes on with fresh processes)",
            show=True,
        )

    def spawn(self) -> None:
        """Start a worker now (at batch start, and right after a recycle), so that its
        imports run while the slot's previous attempt is being classified."""
        if self.fresh_only or self.worker is not None:
            return
        self.started += 1
        log_path = self.log_dir / f"worker-{self.device}-{self.started}.log"
        self.worker = Worker(
            worker_command(self.corpus_root, self.prestart, self.backend),
            {**self.env, "PYTHONUNBUFFERED": "1"},
            log_path,
        )

    def ready(self) -> bool:
        """Wait until this slot's worker can fork; False: run the attempt fresh."""
        if self.fresh_only:
            return False
        self.spawn()
        worker = self.worker
        assert worker is not None
        try:
            reply = worker.wait_ready(self.wake_fd)
        except WorkerGone as e:
            self._drop()
            self._refuse("worker_failed", f"{e}; see {worker.log_path}")
            return False
        if reply is None:  # the batch is stopping
            return False
        if reply.get("event") != "ready":
            self._drop()
            self._refuse(reply.get("reason") or "worker_failed", reply.get("detail") or "")
            return False
        if not worker.announced:
            worker.announced = True
            self.log(
                f"worker {worker.proc.pid} for device {self.device}: ready, "
                f"{len(reply.get('imported') or [])} modules imported in {reply.get('import_s')} s"
            )
        return True

    def fork(self, argv: Sequence[str], env: Mapping[str, str], log_path: Path) -> Optional[ForkedAttempt]:
        """The attempt as a fork of the warm worker; None: run it as a fresh process."""
        if not self.ready():
            return None
        assert self.worker is not None
        try:
            return self.worker.fork(argv, env, log_path)
        except Refused as e:
            self._drop()
            self._refuse(e.reason, e.detail)
        except WorkerGone as e:
            self.recycle(f"worker stopped answering ({e})")
        return None

    def _drop(self) -> None:
        if self.worker is not None:
            self.worker.stop(self.grace_s)
            self.worker = None

    def after_attempt(self, trouble: str) -> None:
        """Recycle on trouble, and after max_ops attempts."""
        if self.worker is None:
            return
        if trouble:
            self.recycle(trouble)
        elif self.worker.ops >= self.max_ops:
            self.recycle(f"{self.worker.ops} attempts served")

    def recycle(self, why: str) -> None:
        if self.worker is not None:
            self.log(f"worker {self.worker.proc.pid} for device {self.device} recycled: {why}")
        self._drop()
        self.spawn()

    def close(self) -> None:
        self.fresh_only = True  # no replacement
        self._drop()

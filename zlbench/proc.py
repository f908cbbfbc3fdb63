"""The one way zlbench starts and stops child processes.

A child runs as the leader of its own session (and so process group) unless it must
share ours; stopping is one rule everywhere: a signal to the child's group, a grace
period, SIGKILL to what is left, then the group's other members (compile workers, a
pytest's own children) the same way, and the leader reaped. Used by ``zlbench run``
(the pytest child), the batch (each ``zlbench run``) and parallel warmup (its shards).

The leader is waited for through a pidfd where the kernel has them: it becomes
readable when the leader exits but before it is reaped, and while the leader is an
unreaped zombie its pid (= the group id) cannot be reused, so killing the group's
leftovers at that point can never hit an unrelated process.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Dict, List, Mapping, Optional, Protocol, Sequence, Tuple, Union

# Fallback polling period where pidfd_open is missing (not Linux, old kernels).
_POLL_S = 0.02
# The longest wait for SIGKILLed processes to vanish; an uninterruptible one (stuck in a
# driver call) can outlive it, and the batch reports it rather than hang.
KILL_SETTLE_S = 10.0
# The environment tag every process of a batch attempt carries (a fork inherits it in
# its environment; ``kill_tagged`` finds exec'd escapees by it).
ATTEMPT_TAG = "ZL_ATTEMPT"


class GroupChild(Protocol):
    """A group leader that ``stop`` and ``wait_group`` take: a child we started
    (``Child``), or a warm worker's fork (batch.workers.ForkedAttempt), which its worker
    reaps: the exit is seen through a pidfd either way, ``wait()`` reaps (and returns
    the exit code, None when a worker lost it)."""

    pid: int
    own_child: bool  # True: this process reaps it; False: its parent (a warm worker) does

    def wait(self) -> Optional[int]: ...


class Child(subprocess.Popen):
    """A Popen that says it is ours to reap (``GroupChild``)."""

    own_child = True


def python_module(module: str) -> List[str]:
    """``python -m module`` without the caller's cwd on sys.path: a folder named
    ``zlbench/`` (a checkout) in the cwd must not shadow the installed package in the
    batch's children. -P on Python >= 3.11; before that, a -c that drops sys.path[0]."""
    if sys.version_info >= (3, 11):
        return [sys.executable, "-P", "-m", module]
    return [
        sys.executable,
        "-c",
        "import runpy, sys; del sys.path[0]; "
        f"runpy.run_module({module!r}, run_name='__main__', alter_sys=True)",
    ]


def importable_pythonpath(pythonpath: Optional[str]) -> str:
    """PYTHONPATH for a child that loads zlbench's plugins with ``-p``.

    The child runs in the corpus root, so a zlbench found only through the caller's
    working directory (``python -m zlbench`` in a source tree) would be missing there;
    this zlbench's parent dir is appended then. An installed zlbench needs nothing, and
    a site-packages dir is never added (on PYTHONPATH it would precede the stdlib).
    """
    import site
    import sysconfig

    parent = str(Path(__file__).resolve().parents[1])
    site_dirs = {
        str(Path(p).resolve())
        for p in [*site.getsitepackages(), site.getusersitepackages(), sysconfig.get_paths()["purelib"]]
    }
    entries = [p for p in (pythonpath or "").split(os.pathsep) if p]
    if parent not in site_dirs and parent not in entries:
        entries.append(parent)
    return os.pathsep.join(entries)


def start(
    cmd: Sequence[str],
    env: Mapping[str, str],
    stdout: Union[int, IO],
    *,
    cwd: Optional[str] = None,
    new_group: bool = True,
    parent_death: bool = False,
    stdin: Union[int, IO] = subprocess.DEVNULL,
    stderr: Union[int, IO] = subprocess.STDOUT,
) -> Child:
    """Start ``cmd``; by default stdin is closed and stderr goes where stdout goes.

    ``new_group``: as the leader of a new session, so Ctrl-C in the terminal does not
    reach it (its owner decides when it stops) and its whole group can be killed.
    ``parent_death``: Linux SIGTERMs it if this process dies without reaping it.
    """
    return Child(
        list(cmd),
        cwd=cwd,
        env=dict(env),
        stdin=stdin,
        stdout=stdout,
        stderr=stderr,
        start_new_session=new_group,
        preexec_fn=_parent_death_signal() if parent_death else None,
    )


def start_group(cmd: Sequence[str], env: Mapping[str, str], log_path: Path) -> Child:
    """``start`` a group leader with stdout and stderr appended to ``log_path``."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        return start(cmd, env, log)


def stop(
    procs: Sequence[GroupChild],
    grace_s: float,
    sig: Optional[int] = signal.SIGTERM,
    group: bool = True,
    rcs: Optional[List[Optional[int]]] = None,
) -> int:
    """Stop children and reap them: ``sig`` to each (to its whole group when
    ``group``; None when it was delivered already, as Ctrl-C is to our own group), a
    shared grace period, SIGKILL to what is left, then the group's other members the
    same way. Returns how many group members outlived their leader; ``rcs`` receives
    each exit code (None when a warm worker lost it).

    Each child is a ``GroupChild``: one that ``start`` made, or a warm worker's."""
    watches = [_ExitWatch(p.pid, p.own_child) for p in procs]
    try:
        if sig is not None:
            for proc in procs:
                _signal(proc, sig, group)
        deadline = time.monotonic() + grace_s
        for proc, watch in zip(procs, watches):
            if watch.wait(max(0.0, deadline - time.monotonic()), None) != "exited":
                _signal(proc, signal.SIGKILL, group)
                watch.wait(None, None)
        # Each leader is a zombie now: its pgid is ours until we reap it.
        leftovers = sum(kill_group_members(p.pid, grace_s) for p in procs) if group else 0
    finally:
        for watch in watches:
            watch.close()
    for child in procs:
        rc = child.wait()
        if rcs is not None:
            rcs.append(rc)
    return leftovers


def _signal(proc, sig: int, group: bool) -> None:
    # group=False is for children that poll and send_signal themselves (Child, ForkedPytest).
    if group:
        _signal_group(proc.pid, sig)
    elif proc.poll() is None:
        try:
            proc.send_signal(sig)
        except ProcessLookupError:
            pass


def set_parent_death_signal(sig: int) -> bool:
    """Ask Linux to send ``sig`` to this process when its parent dies (0: never);
    False where prctl is not available."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return False
    return prctl(1, int(sig)) == 0  # PR_SET_PDEATHSIG


def _parent_death_signal():
    """A preexec function asking Linux to SIGTERM the child when this process dies
    (a SIGKILL leaves no chance to reap); None where prctl is not available."""
    if not sys.platform.startswith("linux"):
        return None
    parent = os.getpid()

    def preexec() -> None:
        set_parent_death_signal(signal.SIGTERM)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)

    return preexec


@dataclass
class Finished:
    returncode: Optional[int]  # None only if the leader could not be reaped
    timed_out: bool
    interrupted: bool
    leftovers_killed: int  # group members still alive after the leader exited
    stalled: bool = False  # stopped for making no progress (timed_out is True too)


class _ExitWatch:
    """Waits for a process to exit without reaping it: our child, or (``own=False``) a
    warm worker's child, which its parent reaps only when told."""

    def __init__(self, pid: int, own: bool = True):
        self.pid = pid
        self.own = own
        try:
            self.fd: Optional[int] = os.pidfd_open(pid)
        except (AttributeError, OSError):
            self.fd = None

    def wait(self, timeout: Optional[float], wake_fd: Optional[int]) -> str:
        """'exited', 'timeout' or 'woken' (wake_fd became readable)."""
        if self.fd is not None:
            poller = select.poll()
            poller.register(self.fd, select.POLLIN)
            if wake_fd is not None:
                poller.register(wake_fd, select.POLLIN)
            ms = None if timeout is None else max(0, int(timeout * 1000))
            while True:
                try:
                    events = poller.poll(ms)
                    break
                except InterruptedError:
                    continue
            fds = {fd for fd, _ in events}
            if self.fd in fds:
                return "exited"
            return "woken" if fds else "timeout"
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if self._exited_nowait():
                return "exited"
            if wake_fd is not None and select.select([wake_fd], [], [], 0)[0]:
                return "woken"
            if deadline is not None and time.monotonic() >= deadline:
                return "timeout"
            time.sleep(_POLL_S)

    def _exited_nowait(self) -> bool:
        if not self.own:
            return not is_alive(self.pid)
        try:
            info = os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return True
        return info is not None

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def wait_group(
    proc: GroupChild, timeout_s: Optional[float], grace_s: float, wake_fd: Optional[int] = None, stall=None
) -> Finished:
    """Wait for the leader, at most ``timeout_s``; on timeout, when ``stall.stalled()``
    says the run stopped making progress (asked every ``stall.tick_s``), or when
    ``wake_fd`` turns readable, stop the whole group (``stop``). Returns only once the
    leader is reaped and its group holds no live process.

    ``proc`` is a ``GroupChild``: one that ``start`` made, or a warm worker's."""
    watch = _ExitWatch(proc.pid, proc.own_child)
    stalled = False
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    try:
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            step = left if stall is None else (stall.tick_s if left is None else min(left, stall.tick_s))
            why = watch.wait(step, wake_fd)
            if why != "timeout" or (deadline is not None and time.monotonic() >= deadline):
                break
            if stall is not None and stall.stalled():
                stalled = True
                break
    finally:
        watch.close()
    # After a normal exit this only clears what the leader left in its group.
    rcs: List[Optional[int]] = []
    leftovers = stop([proc], grace_s, sig=None if why == "exited" else signal.SIGTERM, rcs=rcs)
    return Finished(rcs[0], why == "timeout", why == "woken", leftovers, stalled)


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def kill_group_now(pgid: int) -> None:
    """SIGKILL the whole group at once, leader included: for processes that have
    nothing to finish (a warm worker's unused spare)."""
    _signal_group(pgid, signal.SIGKILL)


def kill_group_members(pgid: int, grace_s: float) -> int:
    """SIGTERM, then SIGKILL, whatever still lives in group ``pgid`` besides its
    (exited) leader. Returns how many there were."""
    members = [p for p in live_group_members(pgid) if p != pgid]
    if not members:
        return 0
    _signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and [p for p in live_group_members(pgid) if p != pgid]:
        time.sleep(0.05)
    if [p for p in live_group_members(pgid) if p != pgid]:
        _signal_group(pgid, signal.SIGKILL)
        # SIGKILL is delivered at once but a busy machine can take a while to tear the
        # process down (its device memory with it): wait, so that "stopped" means gone.
        deadline = time.monotonic() + KILL_SETTLE_S
        while time.monotonic() < deadline and [p for p in live_group_members(pgid) if p != pgid]:
            time.sleep(0.05)
    return len(members)


def _stat(pid: str) -> Optional[List[str]]:
    """Fields of /proc/<pid>/stat after the command name: [state, ppid, pgrp, ...]."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rfind(")") + 2 :].split()


def holds_files(pid: int) -> bool:
    """True while ``pid`` runs with its file table: a process on its way out has released
    it (so has closed every fd) even before it is a zombie. False without /proc."""
    if not is_alive(pid):
        return False
    try:
        return bool(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return False


def is_alive(pid: int) -> bool:
    """True for a running process; a zombie or a missing pid is not alive."""
    fields = _stat(str(pid))
    if fields is None:
        return False
    return fields[0] not in ("Z", "X")


_warned_no_proc = False


def _warn_no_proc(what: str) -> None:
    """Without /proc (not Linux) the batch cannot see whole process groups: say so once."""
    global _warned_no_proc
    if not _warned_no_proc:
        _warned_no_proc = True
        print(
            f"zlbench: WARNING: no /proc on this system: {what} cannot be found; "
            "only Linux gives the batch full process cleanup",
            file=sys.stderr,
        )


def live_group_members(pgid: int) -> List[int]:
    """Pids in group ``pgid`` that are not zombies (a zombie holds no memory or device;
    some container inits never reap them)."""
    if not Path("/proc/self/stat").exists():
        _warn_no_proc("processes an operator's run left behind in its group")
        try:
            os.killpg(pgid, 0)
            return [pgid]
        except (ProcessLookupError, PermissionError):
            return []
    out = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        fields = _stat(entry.name)
        if fields and fields[2] == str(pgid) and is_alive(int(entry.name)):
            out.append(int(entry.name))
    return out


def tagged_processes(key: str, value: str) -> Dict[int, int]:
    """{pid: pgid} of live processes whose environment holds ``key=value``: the
    children a previous, killed driver left behind (every descendant inherits it)."""
    needle = f"{key}={value}".encode()
    found: Dict[int, int] = {}
    if not Path("/proc/self/environ").exists():
        _warn_no_proc("processes a killed driver left running")
        return found
    me = os.getpid()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            environ = Path(f"/proc/{entry.name}/environ").read_bytes()
        except OSError:
            continue
        if needle not in environ.split(b"\0"):
            continue
        fields = _stat(entry.name)
        if fields and fields[0] not in ("Z", "X"):
            found[int(entry.name)] = int(fields[2])
    return found


def _targets(key: str, value: str, cgroup: Optional["Cgroup"]) -> Dict[int, int]:
    """{pid: pgid} of live processes carrying the tag or living in ``cgroup``."""
    found = tagged_processes(key, value)
    if cgroup is not None:
        for pid in cgroup.pids():
            fields = _stat(str(pid))
            if pid != os.getpid() and fields and fields[0] not in ("Z", "X"):
                found.setdefault(pid, int(fields[2]))
    return found


def _kill(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


# SIGKILL sweeps before giving up on processes that keep appearing (a fork bomb).
_KILL_ROUNDS = 100


def kill_tagged(key: str, value: str, grace_s: float, cgroup: Optional["Cgroup"] = None) -> List[int]:
    """Stop every process carrying ``key=value`` in its environment (every descendant
    of a batch's child inherits it, whether or not it left the process group or the
    session), and everything in ``cgroup``: SIGTERM to each and its group, ``grace_s``,
    then SIGKILL sweeps until a scan finds none (a process forked during the sweep is
    caught by the next). Returns the pids found."""
    found = _targets(key, value, cgroup)
    if not found:
        return []
    seen = dict(found)
    own = os.getpgrp()
    for pid, pgid in found.items():
        if pgid != own:  # never our own group, whatever a caller's environment says
            _signal_group(pgid, signal.SIGTERM)
        _kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        live = _targets(key, value, cgroup)
        seen.update(live)
        if not live:
            break
        time.sleep(0.05)
    for _ in range(_KILL_ROUNDS):
        live = _targets(key, value, cgroup)
        seen.update(live)
        if not live:
            break
        if cgroup is not None:
            cgroup.kill()
        for pid, pgid in live.items():
            if pgid != own:
                _signal_group(pgid, signal.SIGKILL)
            _kill(pid, signal.SIGKILL)
        time.sleep(0.05)
    return sorted(seen)


class Cgroup:
    """A cgroup v2 of one attempt: every process the attempt starts stays in it,
    whatever it does with sessions, groups or its environment, so the whole tree can
    be found and killed. Only where the machine offers a writable cgroup v2."""

    def __init__(self, path: Path):
        self.path = path

    @classmethod
    def create(cls, base: Path, name: str) -> Optional["Cgroup"]:
        path = base / name
        try:
            path.mkdir()
        except OSError:
            return None
        return cls(path)

    def add(self, pid: int) -> bool:
        try:
            (self.path / "cgroup.procs").write_text(f"{pid}\n")
            return True
        except OSError:
            return False

    def pids(self) -> List[int]:
        try:
            return [int(p) for p in (self.path / "cgroup.procs").read_text().split()]
        except (OSError, ValueError):
            return []

    def kill(self) -> None:
        """cgroup.kill (Linux 5.14+) kills the whole tree at once, forks included."""
        try:
            (self.path / "cgroup.kill").write_text("1\n")
        except OSError:
            for pid in self.pids():
                _kill(pid, signal.SIGKILL)

    def remove(self) -> None:
        deadline = time.monotonic() + KILL_SETTLE_S
        while True:
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                if time.monotonic() >= deadline:
                    return
                time.sleep(0.05)


CGROUP_FS = Path("/sys/fs/cgroup")


def cgroup_base(probe_name: Optional[str] = None) -> Tuple[Optional[Path], str]:
    """(where per-attempt cgroups can be made, a description for the batch log).

    A cgroup v2 below this process's own, if the kernel mounts the unified hierarchy
    here and we may create a child and move a process into it; else (None, why)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None, "no /proc/self/cgroup"
    own = next((ln[3:] for ln in lines if ln.startswith("0::")), None)
    if own is None:
        return None, "no cgroup v2 hierarchy"
    base = CGROUP_FS / own.lstrip("/")
    if not (base / "cgroup.procs").is_file() or not (CGROUP_FS / "cgroup.controllers").is_file():
        return None, f"{CGROUP_FS} is not a cgroup v2 mount"
    probe = Cgroup.create(base, probe_name or f"zlbench-probe-{os.getpid()}")
    if probe is None:
        return None, f"{base} is not writable"
    try:
        # Moving a process needs write access to our own cgroup.procs too: try with a
        # short-lived child, never with ourselves.
        child = subprocess.Popen(
            [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
        )
        moved = probe.add(child.pid)
        child.communicate(b"")
    finally:
        probe.remove()
    if not moved:
        return None, f"cannot move processes into cgroups below {base}"
    return base, f"per-attempt cgroup v2 below {base}"

"""A Slurm cluster on loopback for the tests: munged, slurmctld and slurmd from Debian's
slurm-wlm and munge, with their key, sockets, config, state and logs in a temp dir (no
systemd, no cgroups, no /etc). Clients reach it through ``env`` (SLURM_CONF).

One node (``SlurmCluster(root)``): one slurmd on this host, node ``zlnode``.

Several nodes (``SlurmCluster(root, nodes=3)``): one slurmd per node ``zln1``..``zlnN``,
each in its own UTS namespace (its own hostname, which is its node name: what
``socket.gethostname()`` says in its jobs) and its own mount namespace, where
``<root>/node`` is that node's own disk (``<root>/nodes/<name>``: its slurmd spool, pid
file and log, and ``<root>/node/home``, the HOME its jobs see, so no two nodes share a
home dir). Each listens on its own port on 127.0.0.1. ``kill_node`` is a node lost:
SIGKILL to every process of its namespace (slurmd, slurmstepd, the job's processes).
Needs root (namespaces, bind mounts) and ``unshare`` from util-linux.
"""

from __future__ import annotations

import csv
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

from zlbench import proc

BINARIES = ("munged", "slurmctld", "slurmd", "slurmstepd", "sbatch", "squeue", "scancel",
            "sinfo")


def namespaces_unavailable() -> Optional[str]:
    """Why slurmd cannot get a UTS and mount namespace of its own here, or None."""
    if shutil.which("unshare") is None:
        return "unshare (util-linux) is not installed"
    probe = subprocess.run(["unshare", "--uts", "--mount", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"unshare --uts --mount failed: {probe.stderr.strip()} (needs root or CAP_SYS_ADMIN)"
    return None


def missing_binaries() -> List[str]:
    search = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
    return [b for b in BINARIES if shutil.which(b, path=search) is None]


def _which(name: str) -> str:
    search = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
    return shutil.which(name, path=search) or name


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _real_memory_mb() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) // 1024
    return 1024


class SlurmCluster:
    """Start with ``start()``, stop with ``stop()`` (idempotent; kills what it started)."""

    def __init__(self, root: Path, nodes: int = 1):
        self.root = Path(root)
        self.procs: Dict[str, subprocess.Popen] = {}
        self.conf = self.root / "slurm.conf"
        self.munge_socket = self.root / "munge" / "munge.socket"
        self.env: Dict[str, str] = {}
        self.nodes: List[str] = ["zlnode"] if nodes == 1 else [f"zln{i}" for i in range(1, nodes + 1)]
        self.multi = nodes > 1
        self.node_dir = self.root / "node"  # in a node's mount namespace: its own disk

    def node_disk(self, name: str) -> Path:
        """What node ``name`` sees at ``<root>/node`` (its spool, log, HOME)."""
        return self.root / "nodes" / name

    # -- config --------------------------------------------------------------
    def _write_config(self) -> None:
        host = socket.gethostname().split(".")[0]
        cpus = os.cpu_count() or 1
        # Below the real total: slurmd drains a node that reports less than configured.
        memory = max(256, int(_real_memory_mb() * 0.9))
        state, spool = self.root / "state", self.root / "spool"
        for d in (state, spool, self.root / "log"):
            d.mkdir(parents=True, exist_ok=True)
        if self.multi:
            # Each slurmd sees its own disk at <root>/node (a bind mount in its namespace).
            node_files = {"SlurmdSpoolDir": f"{self.node_dir}/spool",
                          "SlurmdPidFile": f"{self.node_dir}/slurmd.pid",
                          "SlurmdLogFile": f"{self.node_dir}/slurmd.log"}
            for name in self.nodes:
                for d in ("spool", "home"):
                    (self.node_disk(name) / d).mkdir(parents=True, exist_ok=True)
            (self.node_dir / "home").mkdir(parents=True, exist_ok=True)  # the submitting host's
            node_lines = "".join(
                f"NodeName={name} NodeHostname={name} NodeAddr=127.0.0.1 Port={_free_port()} "
                f"CPUs=1 RealMemory={memory} State=UNKNOWN\n" for name in self.nodes)
            partition = f"PartitionName=debug Nodes={','.join(self.nodes)} Default=YES MaxTime=INFINITE State=UP\n"
            # A lost node is DOWN after SlurmdTimeout; its batch jobs are requeued.
            timeouts = "SlurmdTimeout=10\nJobRequeue=1\n"
        else:
            node_files = {"SlurmdSpoolDir": f"{spool}/%n", "SlurmdPidFile": f"{self.root}/slurmd.pid",
                          "SlurmdLogFile": f"{self.root}/log/slurmd.log"}
            node_lines = (f"NodeName=zlnode NodeHostname={host} NodeAddr=127.0.0.1 CPUs={cpus} "
                          f"RealMemory={memory} State=UNKNOWN\n")
            partition = "PartitionName=debug Nodes=zlnode Default=YES MaxTime=INFINITE State=UP\n"
            timeouts = ""
        files = "".join(f"{k}={v}\n" for k, v in node_files.items())
        self.conf.write_text(f"""\
ClusterName=zltest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={self.munge_socket}
StateSaveLocation={state}
SlurmctldPidFile={self.root}/slurmctld.pid
SlurmctldLogFile={self.root}/log/slurmctld.log
{files}ProctrackType=proctrack/pgid
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
ReturnToService=2
MailProg=/bin/true
MinJobAge=600
KillWait=5
{timeouts}PlugStackConfig={self.root}/plugstack.conf
{node_lines}{partition}""")
        (self.root / "plugstack.conf").write_text("")

    # -- lifecycle -------------------------------------------------------------
    def start(self, timeout_s: float = 60.0) -> "SlurmCluster":
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o700)
        munge_dir = self.munge_socket.parent
        munge_dir.mkdir(mode=0o700, exist_ok=True)
        key = munge_dir / "munge.key"
        key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o400)
        self._write_config()
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        self.env["PATH"] = os.pathsep.join([self.env.get("PATH", ""), "/usr/sbin"])
        try:
            self._spawn("munged", [_which("munged"), "-F", "--force",
                                   f"--socket={self.munge_socket}", f"--key-file={key}",
                                   f"--log-file={munge_dir / 'munged.log'}",
                                   f"--pid-file={munge_dir / 'munged.pid'}",
                                   f"--seed-file={munge_dir / 'munged.seed'}"])
            self._wait(lambda: self.munge_socket.exists(), timeout_s, "munged socket")
            self._spawn("slurmctld", [_which("slurmctld"), "-D", "-i", "-f", str(self.conf)])
            self._wait(self._controller_up, timeout_s, "slurmctld answering")
            if self.multi:
                self.env["HOME"] = str(self.node_dir / "home")
                for name in self.nodes:
                    self._spawn(f"slurmd-{name}", self._node_argv(name))
            else:
                self._spawn("slurmd", [_which("slurmd"), "-D", "-N", "zlnode", "-f", str(self.conf)])
            self._wait(self._node_idle, timeout_s, f"node(s) {', '.join(self.nodes)} idle")
        except BaseException:
            self.stop()
            raise
        return self

    def _node_argv(self, name: str) -> List[str]:
        """slurmd of node ``name`` in a UTS and mount namespace of its own: its hostname
        is the node name, and <root>/node is its own disk."""
        script = (f"hostname {name} && mount --bind {self.node_disk(name)} {self.node_dir} && "
                  f"exec {_which('slurmd')} -D -f {self.conf}")
        return ["unshare", "--uts", "--mount", "--propagation", "private", "--", "sh", "-c", script]

    def node_processes(self, name: str) -> List[int]:
        """Every live process in node ``name``'s UTS namespace (its slurmd's)."""
        daemon = self.procs[f"slurmd-{name}"]
        try:
            ns = os.readlink(f"/proc/{daemon.pid}/ns/uts")
        except OSError:
            return []
        if ns == os.readlink("/proc/self/ns/uts"):
            return []  # not yet in its own namespace (or gone): nothing of the node's
        return self._pids_in(ns)

    def kill_node(self, name: str) -> List[int]:
        """Node ``name`` lost at once: SIGKILL every process of its namespace until none is
        left (a fork during the sweep is caught by the next). Returns the pids killed."""
        daemon = self.procs[f"slurmd-{name}"]
        ns = os.readlink(f"/proc/{daemon.pid}/ns/uts")
        killed: List[int] = []
        while True:
            pids = [p for p in self._pids_in(ns) if p not in killed or self._alive(p)]
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                killed.append(pid)
            time.sleep(0.05)
        daemon.wait(timeout=10)
        return sorted(set(killed))

    @staticmethod
    def _pids_in(ns: str) -> List[int]:
        out = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    if os.readlink(f"/proc/{entry}/ns/uts") == ns:
                        out.append(int(entry))
                except OSError:
                    continue
        return out

    @staticmethod
    def _alive(pid: int) -> bool:
        try:
            with open(f"/proc/{pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] != "Z"
        except OSError:
            return False

    def node_states(self) -> Dict[str, str]:
        """sinfo's state of each node (idle, alloc, down*, ...)."""
        out = self.run("sinfo", "-h", "-N", "-o", "%N %t").stdout.split("\n")
        return dict(line.split() for line in out if line.strip())

    def _spawn(self, name: str, argv: List[str]) -> None:
        self.procs[name] = proc.start_group(argv, self.env, self.root / "log" / f"{name}.stdout")

    def _wait(self, ready, timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not ready():
            for name, daemon in self.procs.items():
                if daemon.poll() is not None:
                    raise RuntimeError(f"{name} exited with {daemon.returncode} while waiting "
                                       f"for {what}:\n{self.logs()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out waiting for {what}:\n{self.logs()}")
            time.sleep(0.2)

    def run(self, *argv: str, timeout: float = 30) -> subprocess.CompletedProcess:
        return subprocess.run(list(argv), env=self.env, capture_output=True, text=True,
                              timeout=timeout)

    def _controller_up(self) -> bool:
        return self.run("scontrol", "ping").returncode == 0

    def _node_idle(self) -> bool:
        out = self.run("sinfo", "-h", "-N", "-o", "%t").stdout.split()
        return bool(out) and all(s in ("idle", "mix", "alloc") for s in out)

    def logs(self, tail: int = 30) -> str:
        parts = []
        for path in (sorted((self.root / "log").glob("*")) + [self.munge_socket.parent / "munged.log"]
                     + [self.node_disk(n) / "slurmd.log" for n in self.nodes if self.multi]):
            try:
                lines = path.read_text(errors="replace").splitlines()[-tail:]
            except OSError:
                continue
            parts.append(f"--- {path.name}\n" + "\n".join(lines))
        return "\n".join(parts)

    def stop(self) -> None:
        # Jobs first (their steps run under slurmstepd), then the daemons, last started first.
        if "slurmctld" in self.procs and self.procs["slurmctld"].poll() is None:
            self.run("scancel", "--full", "--user", str(os.getuid()))
        for name in [*(f"slurmd-{n}" for n in self.nodes), "slurmd", "slurmctld", "munged"]:
            daemon = self.procs.get(name)
            if daemon is not None and daemon.poll() is None:
                proc.stop([daemon], grace_s=15)
        # slurmstepd and job processes outlive slurmd by design: every one of this
        # cluster's carries its SLURM_CONF.
        if self.env:
            proc.kill_tagged("SLURM_CONF", str(self.conf), grace_s=5)


# ---- what the screens' tests compare --------------------------------------------------

# The ops_status.csv columns a screen must agree on with a one-host batch.
SAME = ("operator", "status", "attempts", "dtype_level", "dtypes", "exit_code", "reason")


def zl(env, *args, timeout=120, cwd=None):
    """``python -m zlbench ARGS`` in exactly ``env`` (the cluster's client environment)."""
    return subprocess.run([sys.executable, "-m", "zlbench", *map(str, args)], env=env,
                          capture_output=True, text=True, timeout=timeout, cwd=cwd)


def status_rows(path):
    """ops_status.csv's SAME columns per operator."""
    with open(path, newline="") as f:
        return {r["operator"]: tuple(r[c] for c in SAME) for r in csv.DictReader(f)}

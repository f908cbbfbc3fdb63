"""A one-node Slurm cluster on loopback for the tests: munged, slurmctld and slurmd
from Debian's slurm-wlm and munge, with their key, sockets, config, state and logs in a
temp dir (no systemd, no cgroups, no /etc). Clients reach it through ``env`` (SLURM_CONF).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Dict, List

from zlbench import proc

BINARIES = ("munged", "slurmctld", "slurmd", "slurmstepd", "sbatch", "squeue", "scancel",
            "sinfo")


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

    def __init__(self, root: Path):
        self.root = Path(root)
        self.procs: Dict[str, subprocess.Popen] = {}
        self.conf = self.root / "slurm.conf"
        self.munge_socket = self.root / "munge" / "munge.socket"
        self.env: Dict[str, str] = {}

    # -- config --------------------------------------------------------------
    def _write_config(self) -> None:
        host = socket.gethostname().split(".")[0]
        cpus = os.cpu_count() or 1
        # Below the real total: slurmd drains a node that reports less than configured.
        memory = max(256, int(_real_memory_mb() * 0.9))
        state, spool = self.root / "state", self.root / "spool"
        for d in (state, spool, self.root / "log"):
            d.mkdir(parents=True, exist_ok=True)
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
SlurmdSpoolDir={spool}/%n
SlurmctldPidFile={self.root}/slurmctld.pid
SlurmdPidFile={self.root}/slurmd.pid
SlurmctldLogFile={self.root}/log/slurmctld.log
SlurmdLogFile={self.root}/log/slurmd.log
ProctrackType=proctrack/pgid
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
PlugStackConfig={self.root}/plugstack.conf
NodeName=zlnode NodeHostname={host} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={memory} State=UNKNOWN
PartitionName=debug Nodes=zlnode Default=YES MaxTime=INFINITE State=UP
""")
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
            self._spawn("slurmd", [_which("slurmd"), "-D", "-N", "zlnode", "-f", str(self.conf)])
            self._wait(self._node_idle, timeout_s, "node zlnode idle")
        except BaseException:
            self.stop()
            raise
        return self

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
        for path in sorted((self.root / "log").glob("*")) + [self.munge_socket.parent / "munged.log"]:
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
        for name in ("slurmd", "slurmctld", "munged"):
            daemon = self.procs.get(name)
            if daemon is not None and daemon.poll() is None:
                proc.stop([daemon], grace_s=15)
        # slurmstepd and job processes outlive slurmd by design: every one of this
        # cluster's carries its SLURM_CONF.
        if self.env:
            proc.kill_tagged("SLURM_CONF", str(self.conf), grace_s=5)

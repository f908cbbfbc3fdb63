"""Process groups: timeouts kill the whole tree, leftovers of an exited leader are
stopped, a killed driver's children are found by their tag. Real processes, real signals."""

import os
import subprocess
import sys
import time
from pathlib import Path

from zlbench import proc as procs

# A leader that starts a grandchild, writes both pids, ignores SIGTERM and waits forever.
TREE = """
import os, signal, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"])
open(sys.argv[1], "w").write(f"{os.getpid()} {child.pid}")
signal.signal(signal.SIGTERM, signal.SIG_IGN)
time.sleep(600)
"""
# A leader that leaves a grandchild behind and exits at once.
ORPHANING = """
import subprocess, sys
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
open(sys.argv[1], "w").write(str(child.pid))
"""



def _wait_for_file(path: Path, timeout: float = 10.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return path.read_text()
        time.sleep(0.02)
    raise AssertionError(f"{path} never appeared")


def test_timeout_kills_the_whole_group_even_when_it_ignores_sigterm(tmp_path):
    pids_file = tmp_path / "pids"
    proc = procs.start_group([sys.executable, "-c", TREE, str(pids_file)], os.environ,
                             tmp_path / "log.txt")
    leader, grandchild = map(int, _wait_for_file(pids_file).split())
    started = time.monotonic()
    done = procs.wait_group(proc, timeout_s=0.5, grace_s=0.5)
    elapsed = time.monotonic() - started
    assert done.timed_out and not done.interrupted
    assert done.returncode == -9          # SIGTERM was ignored, SIGKILL was not
    assert elapsed < 5
    assert not procs.is_alive(leader) and not procs.is_alive(grandchild)
    assert procs.live_group_members(proc.pid) == []


def test_leftovers_of_an_exited_leader_are_killed(tmp_path):
    pid_file = tmp_path / "pid"
    proc = procs.start_group([sys.executable, "-c", ORPHANING, str(pid_file)], os.environ,
                             tmp_path / "log.txt")
    done = procs.wait_group(proc, timeout_s=30, grace_s=0.5)
    orphan = int(pid_file.read_text())
    assert done.returncode == 0 and not done.timed_out
    assert done.leftovers_killed == 1
    assert not procs.is_alive(orphan)


def test_wake_fd_interrupts_and_kills(tmp_path):
    read_fd, write_fd = os.pipe()
    try:
        proc = procs.start_group([sys.executable, "-c", "import time; time.sleep(600)"], os.environ,
                                 tmp_path / "log.txt")
        os.write(write_fd, b"x")
        done = procs.wait_group(proc, timeout_s=None, grace_s=1.0, wake_fd=read_fd)
        assert done.interrupted and not done.timed_out
        assert done.returncode == -15
    finally:
        os.close(read_fd)
        os.close(write_fd)


def test_output_goes_to_the_log_and_exit_code_passes_through(tmp_path):
    log = tmp_path / "log.txt"
    proc = procs.start_group([sys.executable, "-c", "import sys; print('hello'); sys.exit(7)"],
                             os.environ, log)
    assert procs.wait_group(proc, timeout_s=30, grace_s=1).returncode == 7
    assert "hello" in log.read_text()


def test_tagged_processes_are_found_and_stopped(tmp_path):
    tag = str(tmp_path)
    env = {**os.environ, "ZL_BATCH_DIR": tag}
    pids_file = tmp_path / "pids"
    # Detached like the children of a driver that was killed: nobody waits for it.
    subprocess.Popen([sys.executable, "-c", TREE, str(pids_file)], env=env, start_new_session=True,
                     stdout=subprocess.DEVNULL)
    leader, grandchild = map(int, _wait_for_file(pids_file).split())
    assert set(procs.tagged_processes("ZL_BATCH_DIR", tag)) == {leader, grandchild}
    assert procs.tagged_processes("ZL_BATCH_DIR", tag + "-other") == {}
    killed = procs.kill_tagged("ZL_BATCH_DIR", tag, grace_s=0.3)
    assert set(killed) == {leader, grandchild}
    time.sleep(0.1)
    assert not procs.is_alive(leader) and not procs.is_alive(grandchild)

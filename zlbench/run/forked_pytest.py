"""The benchmark process as a fork that calls ``pytest.main`` (a warm worker's role):
the exact argv, cwd, environment and sys.path the fresh ``python -m pytest`` would get,
zlbench's ``-p`` plugins imported again in that environment."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Dict, List, Optional

from .fork import exit_with, fresh_sys_path, replace_environ

PLUGIN_PACKAGE = "zlbench.plugins"


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
        return pytest_main(cmd[3:], cwd, env)

    exit_with(body)
    raise AssertionError("unreachable")


def pytest_main(args: List[str], cwd: str, env: Dict[str, str]) -> int:
    """``python -m pytest ARGS`` in ``cwd`` with ``env``, in this process."""
    os.chdir(cwd)
    replace_environ(env)
    fresh_sys_path(cwd, env.get("PYTHONPATH"))
    forget_plugins()
    import pytest

    sys.argv = [pytest.__file__, *args]
    return int(pytest.main(args))


def forget_plugins() -> None:
    """zlbench's -p plugins act on the environment when imported (device_setup sets the
    vendor variables from ZL_BACKEND): pytest imports them again, in the run's own
    environment, exactly as in a fresh process. What they import stays loaded."""
    for name in [m for m in sys.modules if m.startswith(PLUGIN_PACKAGE + ".")]:
        del sys.modules[name]

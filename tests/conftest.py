"""Shared test helpers: running zlbench as users do, in real subprocesses."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures"


def zlbench(*args, env=None, cwd=None, timeout=120, check=False):
    """Run ``python -m zlbench ARGS`` and return the CompletedProcess (text)."""
    full_env = dict(os.environ)
    full_env.pop("ZL_BACKEND", None)
    full_env.update(env or {})
    proc = subprocess.run([sys.executable, "-m", "zlbench", *map(str, args)], cwd=cwd,
                          env=full_env, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"zlbench {' '.join(map(str, args))} -> {proc.returncode}\n"
                             f"{proc.stdout}\n{proc.stderr}")
    return proc


def pytest_configure(config):
    # A suite started as a background job of a non-interactive shell (`cmd &` in a
    # script, nohup) inherits SIGINT ignored, and so would every process it starts: the
    # Ctrl-C tests would then fail for the shell's reason. Python's handler restored here
    # is reset to the default in each exec'd child, which installs its own.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    # Importing torch costs a second or more: only when some selected test needs a GPU.
    if not any("gpu" in item.keywords for item in items) or _cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _own_history_db(monkeypatch, tmp_path_factory):
    """No test reads the user's history database: `summary --ab` looks noise floors up
    there (ZL_HISTORY_DB, else under XDG_DATA_HOME)."""
    monkeypatch.delenv("ZL_HISTORY_DB", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path_factory.mktemp("xdg-data")))


# One real batch of the bundled sample corpus per test session, shared by the report and
# history tests: four operators of four families, float32, two worker slots.
SAMPLE_OPS = "abs,add,mm,softmax"


@pytest.fixture(scope="session")
def sample_screen(tmp_path_factory):
    out = tmp_path_factory.mktemp("screen") / "batch"
    # --provider sample: the bundled corpus even where FLAGGEMS_DIR is set (for the tests
    # that read FlagGems' tools).
    zlbench("batch", "--provider", "sample", "--backend", "cpu", "--ops", SAMPLE_OPS, "--dtypes", "float32",
            "--devices", "0,1", "--progress", "off", "--out", out, timeout=600, check=True)
    return out


def _cannot_run_slurm(reason):
    """Skip, or fail under CI=true: .ci/run installs what the Slurm tests need."""
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(reason)
    pytest.skip(reason)


def _check_slurm_can_run(namespaces=False):
    from slurm_cluster import missing_binaries, namespaces_unavailable

    missing = missing_binaries()
    if missing:
        _cannot_run_slurm(f"Slurm tests need Debian's slurm-wlm and munge (missing: "
                          f"{', '.join(missing)}): apt-get install -y slurm-wlm munge")
    if os.geteuid() != 0:
        _cannot_run_slurm("the Slurm test cluster runs slurmd, which starts jobs, as root")
    why = namespaces_unavailable() if namespaces else None
    if why:
        _cannot_run_slurm(f"the several-node Slurm cluster gives each slurmd its own "
                          f"namespaces: {why}")


@pytest.fixture(scope="session")
def slurm(tmp_path_factory):
    """A one-node Slurm cluster (munged, slurmctld, slurmd) on loopback for this session;
    clients reach it through ``slurm.env``. Skipped where Debian's slurm-wlm and munge are
    not installed; a failure under CI=true, which installs them (.ci/run)."""
    from slurm_cluster import SlurmCluster

    _check_slurm_can_run()
    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm"))
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def slurm_nodes(tmp_path_factory):
    """A three-node Slurm cluster (zln1..zln3, each slurmd in its own UTS and mount
    namespace with its own hostname, port and home dir) under one slurmctld, for one
    test module: its tests lose nodes."""
    from slurm_cluster import SlurmCluster

    _check_slurm_can_run(namespaces=True)
    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm-nodes"), nodes=3)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def nights(sample_screen, tmp_path):
    """Two nights of the session's screen; on the second, mm's gems side is 1.5x slower."""
    from summary_logwriter import night_copy

    one = night_copy(sample_screen, tmp_path, "night1", "2026-11-29T02:00:00+0000")
    two = night_copy(sample_screen, tmp_path, "night2", "2026-11-30T02:00:00+0000", slower=("mm", 1.5))
    return one, two


@pytest.fixture
def staged_tree(tmp_path):
    """tests/fixtures/flaggems_head with a conf/operators.yaml (abs: Math, mm: BLAS)."""
    root = tmp_path / "FlagGems"
    shutil.copytree(FIXTURES / "flaggems_head", root)
    (root / "conf").mkdir()
    shutil.copy(FIXTURES / "flaggems_conf" / "operators.yaml", root / "conf" / "operators.yaml")
    return root


def load_script(name: str):
    """benchmarks/<name>.py as a module (the scripts are not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

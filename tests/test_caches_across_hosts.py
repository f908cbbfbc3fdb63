"""Caches in a screen over several hosts: FlagGems' sqlite tuning DB per host by default
(its file is named by vendor and Triton version, not GPU model, and sqlite's locks do
not hold across hosts); Triton's content-addressed cache left where the caller put it."""

import json
import os
import socket
import subprocess
import sys

from zlbench import rundir
from zlbench.tuner_cache import per_host_flaggems_cache


def test_a_shard_gets_a_flaggems_cache_dir_of_its_host():
    env = {"HOME": "/shared/home/me", "TRITON_CACHE_DIR": "/shared/triton"}
    assert per_host_flaggems_cache(env, "gpu-node-07") == {
        "FLAGGEMS_CACHE_DIR": "/shared/home/me/.flaggems/hosts/gpu-node-07"}
    # A pod name or an odd hostname stays one path component.
    assert per_host_flaggems_cache(env, "a/b c")["FLAGGEMS_CACHE_DIR"].endswith("/hosts/a-b-c")


def test_a_cache_the_caller_chose_is_theirs():
    assert per_host_flaggems_cache({"FLAGGEMS_CACHE_DIR": "/local/fg"}, "n1") == {}
    assert per_host_flaggems_cache({"FLAGGEMS_DB_URL": "sqlite:////local/t.db"}, "n1") == {}


def _batch(tmp_path, *extra):
    env = {**os.environ, "HOME": str(tmp_path / "home"), "TRITON_CACHE_DIR": str(tmp_path / "triton"),
           "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    for key in ("ZL_BACKEND", "FLAGGEMS_CACHE_DIR", "FLAGGEMS_DB_URL"):
        env.pop(key, None)
    cmd = [sys.executable, "-m", "zlbench", "batch", "--backend", "cpu", "--devices", "0",
           "--dtypes", "float32", "--dismiss", "none", "--progress", "off", *extra]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)


def test_a_sharded_batch_keeps_flaggems_per_host(tmp_path):
    done = _batch(tmp_path, "--ops", "abs,add,gelu,silu", "--shard", "0/2", "--out", tmp_path / "s")
    assert done.returncode == 0, done.stdout + done.stderr
    shard = tmp_path / "s" / "shard-0-of-2"
    ops = [op for op in ("abs", "add", "gelu", "silu") if (shard / op).is_dir()]
    assert ops
    host = socket.gethostname()
    for op in ops:
        ident = json.loads((shard / op / rundir.IDENTITY).read_text())
        assert ident["tuner_cache"] == f"shared:{tmp_path}/home/.flaggems/hosts/{host}"
    assert f"FlagGems tuning DB per host: FLAGGEMS_CACHE_DIR={tmp_path}/home/.flaggems/hosts/" \
           in (shard / rundir.BATCH_LOG).read_text()
    # Not a shard: FlagGems' own default, as on a workstation.
    plain = _batch(tmp_path, "--ops", "abs", "--out", tmp_path / "plain")
    assert plain.returncode == 0, plain.stdout + plain.stderr
    ident = json.loads((tmp_path / "plain" / "abs" / rundir.IDENTITY).read_text())
    assert ident["tuner_cache"] == f"shared:{tmp_path}/home/.flaggems"

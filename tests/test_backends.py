import os
import stat

import pytest

from zlbench import backends
from zlbench.backends import base


@pytest.mark.parametrize("alias,name", [
    ("nvidia", "cuda"), ("gpu", "cuda"), ("CUDA", "cuda"), ("mthreads", "musa"), ("moore", "musa"),
    ("amd", "rocm"), ("hip", "rocm"), ("npu", "ascend"), ("huawei", "ascend"), ("cpu", "cpu"),
])
def test_aliases(alias, name):
    assert backends.canonical_name(alias) == name


def test_unknown_backend_lists_accepted_names():
    with pytest.raises(backends.UnknownBackend, match="mthreads"):
        backends.canonical_name("tpu")


@pytest.mark.parametrize("name,key", [
    ("cuda", "CUDA_VISIBLE_DEVICES"), ("musa", "MUSA_VISIBLE_DEVICES"),
    ("rocm", "HIP_VISIBLE_DEVICES"), ("ascend", "ASCEND_RT_VISIBLE_DEVICES"), ("cpu", None),
])
def test_visibility_key(name, key):
    b = backends.get_backend(name)
    assert b.visible_key == key
    # The caller's own selection maps index 3 to its fourth entry.
    dev = b.devices({key: "0,1,2,3"} if key else {}, ["3"], probed=[])[0]
    env = backends.visibility_env(b, dev)
    assert env == ({} if key is None else {key: "3", "ZL_VISIBLE_KEY": key})


def test_plugin_plan_compat_first_and_capture_only_where_possible():
    cuda = backends.plugin_plan(backends.get_backend("cuda"))
    assert "zlbench.plugins.graph_timer" in cuda and "zlbench.plugins.direct_timer" not in cuda
    assert "zlbench.plugins.direct_timer" in backends.plugin_plan(backends.get_backend("cuda"), False)
    for name in ("cpu", "musa", "rocm", "ascend"):
        plan = backends.plugin_plan(backends.get_backend(name))
        assert "zlbench.plugins.graph_timer" not in plan and "zlbench.plugins.direct_timer" in plan
    musa = backends.plugin_plan(backends.get_backend("musa"))
    assert musa[0] == "zlbench.plugins.compat_musa"
    for name in ("cuda", "cpu", "rocm", "ascend"):
        assert "zlbench.plugins.compat_musa" not in backends.plugin_plan(backends.get_backend(name))


def test_caller_selection_is_never_replaced_by_a_bare_index():
    cuda = backends.get_backend("cuda")
    devs = cuda.devices({"CUDA_VISIBLE_DEVICES": "6,7"}, ["0", "1"])
    assert [(d.index, d.visible) for d in devs] == [("0", "6"), ("1", "7")]
    with pytest.raises(backends.DeviceError, match="CUDA_VISIBLE_DEVICES=6,7"):
        cuda.devices({"CUDA_VISIBLE_DEVICES": "6,7"}, ["6"])


def test_cpu_slots():
    cpu = backends.get_backend("cpu")
    assert [d.index for d in cpu.devices({})] == ["0"]
    assert [d.index for d in cpu.devices({}, ["0", "1"])] == ["0", "1"]


def _fake_tool(tmp_path, name, body):
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def test_enumeration_through_the_vendor_tool(tmp_path, monkeypatch):
    _fake_tool(tmp_path, "nvidia-smi", 'printf "0, NVIDIA H200\\n1, NVIDIA H200\\n"\n')
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    cuda = backends.get_backend("cuda")
    assert cuda.present()
    assert [(d.index, d.model) for d in cuda.devices({})] == [("0", "NVIDIA H200"), ("1", "NVIDIA H200")]
    assert backends.detect_backend().name == "cuda"


def test_a_hung_vendor_tool_times_out(tmp_path, monkeypatch):
    _fake_tool(tmp_path, "nvidia-smi", "sleep 30\n")
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(base, "TOOL_TIMEOUT_S", 0.5)
    assert backends.get_backend("cuda").probe_devices() == []


def test_vendor_tool_parsers():
    from zlbench.backends import ascend, musa

    assert musa.parse_mthreads_gmi("GPU 0: MTT S5000 (UUID: x)\nGPU 1: MTT S5000 (UUID: y)") == [
        ("0", "MTT S5000"), ("1", "MTT S5000")]
    assert ascend.parse_npu_smi("NPU ID : 0\n Product Name : Ascend910B\nNPU ID : 1\n") == [
        ("0", "Ascend910B"), ("1", "Ascend")]


@pytest.mark.parametrize("name", ["cuda", "musa", "rocm", "ascend"])
def test_an_explicit_device_on_a_host_without_the_vendor_is_refused(name, monkeypatch):
    b = backends.get_backend(name)
    monkeypatch.setattr(base.Backend, "present", lambda self: False)
    monkeypatch.setattr(base.Backend, "nodes_present", lambda self: False)
    with pytest.raises(backends.DeviceError, match=f"no {name} device on this host"):
        b.devices({}, ["0"], probed=[])
    monkeypatch.setattr(base.Backend, "nodes_present", lambda self: True)
    assert [d.visible for d in b.devices({}, ["0"], probed=[])] == ["0"]


def test_keep_memory_is_applied_here_and_said_where_it_cannot_be(monkeypatch, capsys):
    from zlbench.backends import cpu
    from zlbench.plugins.direct_timer import keep_host_memory

    monkeypatch.delenv("ZL_CPU_KEEP_MEMORY", raising=False)
    assert keep_host_memory() is None                      # not a cpu run: nothing asked
    monkeypatch.setenv("ZL_CPU_KEEP_MEMORY", "0")
    assert keep_host_memory() is None
    monkeypatch.setenv("ZL_CPU_KEEP_MEMORY", "1")
    assert keep_host_memory() is True                      # glibc here (Debian)
    monkeypatch.setattr(cpu, "keep_freed_memory", lambda: False)
    assert keep_host_memory() is False
    assert "ZL_CPU_KEEP_MEMORY=1 not applied" in capsys.readouterr().out


def test_a_process_asks_the_vendor_tool_once_and_its_forks_inherit_the_answer(tmp_path, monkeypatch):
    from zlbench.run.worker import list_devices

    calls = tmp_path / "calls"
    tool = _fake_tool(tmp_path, "nvidia-smi", f'echo x >> {calls}\nprintf "0, NVIDIA H200\\n"\n')
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    cuda = backends.get_backend("cuda")
    # A worker of a batch on another backend, or on none, asks nothing.
    assert list_devices("cpu") is None and list_devices(None) is None and list_devices("nope") is None
    assert not calls.exists()
    assert list_devices("nvidia") == "cuda devices listed: 1"  # a worker's start
    assert calls.read_text().count("x") == 1
    pid = os.fork()
    if pid == 0:  # an attempt the worker forked
        os._exit(0 if cuda.probe_devices() == [("0", "NVIDIA H200")] else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert cuda.devices({})[0].model == "NVIDIA H200"
    assert calls.read_text().count("x") == 1
    # Another tool binary (a driver update put a new one in place) is asked again.
    tool.write_text(f'#!/bin/sh\necho x >> {calls}\nprintf "0, NVIDIA H100\\n"\n')
    os.utime(tool, ns=(0, tool.stat().st_mtime_ns + 1_000_000_000))
    assert cuda.probe_devices() == [("0", "NVIDIA H100")]
    assert calls.read_text().count("x") == 2


def test_a_failed_listing_is_not_kept(tmp_path, monkeypatch):
    calls = tmp_path / "calls"
    _fake_tool(tmp_path, "nvidia-smi", f"echo x >> {calls}\nexit 9\n")
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    cuda = backends.get_backend("cuda")
    assert cuda.probe_devices() == [] and cuda.probe_devices() == []
    assert calls.read_text().count("x") == 2

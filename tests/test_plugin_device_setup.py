"""GEMS_VENDOR / FLAGGEMS_VENDOR from the backend, before flag_gems is imported."""

import pytest

from zlbench.plugins.device_setup import apply, plan_vendor_env


@pytest.mark.parametrize("backend,vendor,source", [
    ("cuda", "nvidia", "backend"), ("musa", "mthreads", "backend"), ("ascend", "ascend", "backend"),
    # rocm asks torch whether it is a hygon build; this CPU torch is not.
    ("rocm", "amd", "probe"),
])
def test_each_backend_sets_its_vendor_in_both_variables(backend, vendor, source):
    plan = plan_vendor_env({}, backend)
    assert plan["vendor"] == vendor
    assert plan["set"] == {"GEMS_VENDOR": vendor, "FLAGGEMS_VENDOR": vendor}
    assert plan["source"] == f"{source}:{backend}"


def test_cpu_sets_nothing():
    assert plan_vendor_env({}, "cpu") == {"vendor": None, "source": "backend:cpu", "set": {}}


def test_unknown_backend_sets_nothing_and_says_so():
    plan = plan_vendor_env({}, "tpu")
    assert plan["set"] == {} and "unknown" in plan["source"]


def test_a_valid_user_value_is_kept_and_mirrored():
    plan = plan_vendor_env({"GEMS_VENDOR": "metax"}, "cuda")
    assert plan["vendor"] == "metax" and plan["source"] == "env:GEMS_VENDOR"
    assert plan["set"] == {"FLAGGEMS_VENDOR": "metax"}


def test_a_value_flaggems_would_ignore_is_replaced():
    # v5.0.2 ignores anything outside its list (case included) and would run its probe
    plan = plan_vendor_env({"GEMS_VENDOR": "NVIDIA"}, "cuda")
    assert plan["set"] == {"GEMS_VENDOR": "nvidia", "FLAGGEMS_VENDOR": "nvidia"}


def test_flaggems_vendor_alone_is_honoured_and_copied_to_gems_vendor():
    plan = plan_vendor_env({"FLAGGEMS_VENDOR": "hygon"}, "rocm")
    assert plan["set"] == {"GEMS_VENDOR": "hygon"}


def test_a_backend_probe_refines_the_vendor():
    plan = plan_vendor_env({}, "rocm", lookup=lambda name: ("hygon", f"probe:{name}"))
    assert plan["vendor"] == "hygon" and plan["source"] == "probe:rocm"


def test_backend_vendor_uses_a_probe_when_the_backend_has_one(monkeypatch):
    from zlbench import backends

    rocm = backends.BACKENDS["rocm"]
    probed = type("Probed", (), {"gems_vendor": rocm.gems_vendor,
                                 "gems_vendor_probe": staticmethod(lambda: "hygon")})()
    monkeypatch.setitem(backends.BACKENDS, "rocm", probed)
    assert backends.gems_vendor("rocm") == ("hygon", "probe:rocm")
    failing = type("Failing", (), {"gems_vendor": "amd",
                                   "gems_vendor_probe": staticmethod(lambda: 1 / 0)})()
    monkeypatch.setitem(backends.BACKENDS, "rocm", failing)
    assert backends.gems_vendor("rocm") == ("amd", "backend:rocm")


def test_apply_is_a_no_op_without_a_run_dir():
    env = {"ZL_BACKEND": "cuda"}
    assert apply(env) is None
    assert env == {"ZL_BACKEND": "cuda"}


def test_apply_sets_the_environment_and_returns_the_record(tmp_path):
    env = {"ZL_RUN_DIR": str(tmp_path), "ZL_BACKEND": "musa", "GEMS_VENDOR": "bogus"}
    record = apply(env)
    assert env["GEMS_VENDOR"] == env["FLAGGEMS_VENDOR"] == "mthreads"
    assert record["before"] == {"GEMS_VENDOR": "bogus", "FLAGGEMS_VENDOR": None}
    assert record["backend"] == "musa" and record["vendor"] == "mthreads"

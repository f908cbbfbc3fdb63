"""Knob scopes: what a resume may change, what plan.json records, and what the
benchmark process is given (zlbench/benchenv.py)."""

from pathlib import Path

from zlbench import backends, benchenv, knobs
from zlbench.batch.driver import resume_changes
from zlbench.rundir import caliber_diffs


def test_every_knob_has_a_scope_and_the_caliber_ones_are_fixed_on_resume():
    for knob in knobs.BY_NAME.values():
        assert knob.scope in knobs.SCOPES, knob.name
        assert knob.fixed_on_resume == (knob.scope in (knobs.CALIBER, knobs.CORPUS))
    assert knobs.BY_NAME["level"].caliber and knobs.BY_NAME["flaggems_dir"].fixed_on_resume
    assert not knobs.BY_NAME["run_mode"].fixed_on_resume and not knobs.BY_NAME["compile_workers"].fixed_on_resume
    # Batch knobs never reach the benchmark process, nor run_identity.json's caliber.
    assert not any(k.child for k in knobs.BATCH_KNOBS)
    assert "ZL_RUN_MODE" not in knobs.resolve({}, {}).caliber()


def test_a_resume_records_batch_changes_and_refuses_caliber_ones():
    saved = {"settings": {"level": "core", "compile_workers": 0}, "run_mode": "worker", "retries": 1}
    doc = {"settings": {"level": "core", "compile_workers": 4}, "run_mode": "fresh", "retries": 1}
    assert caliber_diffs(saved, doc, knobs.fixed_on_resume) == []
    assert resume_changes(saved, doc) == {"run_mode": ["worker", "fresh"], "compile_workers": [0, 4]}
    doc["settings"]["level"] = "comprehensive"
    assert caliber_diffs(saved, doc, knobs.fixed_on_resume) == ["level: 'core' -> 'comprehensive'"]


def _child_env(backend_name, **values):
    settings = knobs.resolve(values, {})
    backend = backends.get_backend(backend_name)
    return benchenv.child_env(
        {"REPLAY_FROM": "/stale", "ZL_CPU_THREADS": ""}, settings, run_dir=Path("/r"), backend=backend,
        device=backends.Device(index="0", visible=None, model=None), timer="direct",
        autotune_mode="record", target_env={}, extra={}, replay_from=None, warmup_pool=[],
        autoload=False)


def test_the_benchmark_process_gets_the_child_knobs_and_its_own_variables():
    env = _child_env("cpu", direct_noise="1.5", cpu_threads="3")
    assert env["ZL_RUN_DIR"] == "/r" and env["ZL_TIMER"] == "direct" and env["ZL_AUTOTUNE_MODE"] == "record"
    assert env["ZL_DIRECT_NOISE"] == "1.5" and env["ZL_BACKEND"] == "cpu" and env["USE_FLAGTUNE"] == "0"
    assert env["ZL_CPU_THREADS"] == "3" and env["ZL_CPU_KEEP_MEMORY"] == "1" and env["OMP_NUM_THREADS"] == "3"
    assert "REPLAY_FROM" not in env                       # none planned: the caller's is dropped
    assert env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] == "1"
    assert "ZL_ENABLE_CUDAGRAPH" not in env and "ZL_RUN_MODE" not in env
    # A backend-only knob stays absent elsewhere ("not asked").
    cuda = _child_env("cuda")
    assert "ZL_CPU_THREADS" not in cuda or cuda["ZL_CPU_THREADS"] == ""
    assert benchenv.run_dir(env) == Path("/r") and benchenv.autotune_mode(env) == "record"


def test_triton_keeps_its_autotune_winners_unless_the_knob_says_not():
    assert _child_env("cuda")["TRITON_CACHE_AUTOTUNING"] == "1"
    assert _child_env("cuda", autotune_cache="0")["TRITON_CACHE_AUTOTUNING"] == "0"
    assert knobs.BY_NAME["autotune_cache"].caliber  # which config a row runs can come from an earlier process


def test_every_batch_knob_is_recorded_in_the_plan_and_a_resume_keeps_it():
    from zlbench.batch.command import resume_batch_settings
    from zlbench.batch.config import PLAN_KEYS, BatchConfig

    assert set(PLAN_KEYS) == set(knobs.BATCH_OPTIONS)  # a new batch knob needs its plan key
    assert all(key in BatchConfig.__dataclass_fields__ for key in PLAN_KEYS.values())
    now = knobs.resolve({}, {}, names=knobs.BATCH_OPTIONS)
    saved = {"kill_grace_s": 3.0, "timeout_s": None, "retries": 4}
    resumed = resume_batch_settings(now, saved)
    assert resumed.kill_grace == 3.0 and resumed.timeout == 0.0 and resumed.retries == 4
    assert resumed.sources["kill_grace"] == "plan"
    given = knobs.resolve({"kill_grace": "7"}, {}, names=knobs.BATCH_OPTIONS)
    assert resume_batch_settings(given, saved).kill_grace == 7.0  # a flag given now wins


def test_a_plan_that_predates_a_knob_resumes_at_its_default_without_a_change_said():
    saved = {"settings": {"run_mode": "worker"}}  # written before tracer_prestart existed
    assert resume_changes(saved, {"settings": {"run_mode": "worker", "tracer_prestart": False}}) == {}
    # Turned on now: a change, said and recorded.
    assert resume_changes(saved, {"settings": {"run_mode": "worker", "tracer_prestart": True}}) == {
        "tracer_prestart": [None, True]}

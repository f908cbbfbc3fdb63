"""`zlbench batch` flags become the right BatchConfig (run_batch replaced by a recorder)."""

import json

import pytest
from click.testing import CliRunner

from zlbench import knobs
from zlbench.batch import BatchResult, command


@pytest.fixture
def recorded(monkeypatch, tmp_path):
    seen = []

    def fake_run_batch(config):
        seen.append(config)
        return BatchResult(config.out, {}, [], False, 0.0)

    monkeypatch.setattr(command, "run_batch", fake_run_batch)
    monkeypatch.chdir(tmp_path)
    return seen


def test_flags(recorded, tmp_path):
    (tmp_path / "ops").mkdir()
    (tmp_path / "ops" / "dismiss.yaml").write_text("dismissed: []\n")
    result = CliRunner().invoke(command.batch_command, [
        "--gpus", "3,1", "--backend", "cpu", "--ops", "abs,mm", "--op-timeout", "mm=3600",
        "--timeout", "0", "--retries", "3", "--fallback-dtypes", "bfloat16",
        "--fallback-dtypes", "float32,float16", "--level", "comprehensive", "--out", "b"],
        env={"ZL_OPS_DIR": str(tmp_path / "ops")})
    assert result.exit_code == 0, result.output
    config = recorded[0]
    assert list(config.devices) == ["3", "1"] and list(config.ops) == ["abs", "mm"]
    assert config.op_timeouts == {"mm": 3600.0} and config.timeout_s is None
    assert config.retries == 3
    assert config.fallback_dtypes == (("bfloat16",), ("float32", "float16"))
    assert config.settings.level == "comprehensive"
    assert config.dismiss == tmp_path / "ops" / "dismiss.yaml"     # the default list
    result = CliRunner().invoke(command.batch_command, ["--dismiss", "none", "--out", "c"])
    assert result.exit_code == 0 and recorded[1].dismiss is None


def test_bad_flags_name_the_flag(recorded):
    result = CliRunner().invoke(command.batch_command, ["--fallback-dtypes", "float64"])
    assert result.exit_code == 2 and "--fallback-dtypes" in result.output
    result = CliRunner().invoke(command.batch_command, ["--op-timeout", "mm"])
    assert result.exit_code == 2 and "OP=SECONDS" in result.output
    result = CliRunner().invoke(command.batch_command, ["--resume"])
    assert result.exit_code == 2 and "--resume needs --out" in result.output
    assert not recorded


def _saved_batch(tmp_path, **extra):
    batch = tmp_path / "b"
    batch.mkdir()
    (batch / "plan.json").write_text(json.dumps({
        "settings": {"backend": "cpu", "level": "comprehensive", "dtypes": ["float16"], "use_flagtune": False,
                     "compile_workers": 0},
        "devices": ["0", "1"], "ops": [{"op": "abs"}, {"op": "mm"}], "dismissed": {"gelu": "bug"},
        "timeout_s": 60, "op_timeouts": {"mm": 600}, "retries": 2, "fallback_dtypes": [["float32"]],
        "extra_env": {"MY_SWITCH": "1"}, "dismiss_file": None, "run_mode": "worker", **extra}))
    return batch


def test_resume_takes_the_saved_plan(recorded, tmp_path):
    batch = _saved_batch(tmp_path)
    # A variable that says what the plan says is no change.
    result = CliRunner().invoke(command.batch_command, ["--resume", "--out", str(batch), "--retries", "0"],
                                env={"BENCH_LEVEL": "comprehensive", "DTYPES": ""})
    assert result.exit_code == 0, result.output
    config = recorded[0]
    assert config.resume and list(config.ops) == ["abs", "mm", "gelu"]
    assert config.settings.level == "comprehensive"
    assert config.settings.dtypes == ("float16",)
    assert list(config.devices) == ["0", "1"] and config.timeout_s == 60
    assert config.op_timeouts == {"mm": 600} and config.retries == 0
    assert config.fallback_dtypes == (("float32",),) and config.extra_env == {"MY_SWITCH": "1"}


@pytest.mark.parametrize("args, env, named, fix", [
    (["--level", "core"], {}, "--level core", "drop --level"),
    ([], {"BENCH_LEVEL": "core"}, "BENCH_LEVEL=core (from the environment)", "unset BENCH_LEVEL"),
    ([], {"ZL_PROVIDER": "flaggems"}, "ZL_PROVIDER=flaggems (from the environment)", "unset ZL_PROVIDER"),
])
def test_resume_refuses_a_caliber_flag_or_variable_that_differs(recorded, tmp_path, args, env, named, fix):
    batch = _saved_batch(tmp_path)
    doc = json.loads((batch / "plan.json").read_text())
    doc["settings"]["provider"] = "sample"
    (batch / "plan.json").write_text(json.dumps(doc))
    result = CliRunner().invoke(command.batch_command, ["--resume", "--out", str(batch), *args], env=env)
    assert result.exit_code == 2 and not recorded
    message = result.output.strip()
    assert len(message.splitlines()) == 1, message          # one line: knob, plan's value, given, fix
    assert named in message and fix in message and "start a new --out" in message
    plan_value = "--provider sample" if "PROVIDER" in named else "--level comprehensive"
    assert f"plan.json, which has {plan_value}" in message


def test_resume_takes_batch_settings_given_now(recorded, tmp_path):
    batch = _saved_batch(tmp_path, stall_timeout_s=30, worker_prestart=False)
    result = CliRunner().invoke(
        command.batch_command, ["--resume", "--out", str(batch), "--compile-workers", "2"],
        env={"ZL_RUN_MODE": "fresh", "ZL_WORKER_MAX_OPS": ""})
    assert result.exit_code == 0, result.output
    config = recorded[0]
    assert config.run_mode == "fresh"                       # the variable, not the plan's worker
    assert config.settings.compile_workers == 2             # batch scope: the flag wins
    assert config.stall_timeout_s == 30 and config.worker_prestart is False   # the plan's
    assert config.timeout_s == 60 and config.retries == 2
    assert config.batch_settings.sources["run_mode"] == "env"


def test_batch_options_come_from_the_knobs_table():
    names = {p.name for p in command.batch_command.params}
    assert set(knobs.BATCH_OPTIONS) <= names and set(knobs.MEASURE_KNOBS) <= names
    prestart = next(p for p in command.batch_command.params if p.name == "worker_prestart")
    assert prestart.secondary_opts == ["--no-worker-prestart"]
    result = CliRunner().invoke(command.batch_command, ["--worker-max-ops", "0"])
    assert result.exit_code == 2 and "--worker-max-ops" in result.output and "at least 1" in result.output

"""`zlbench batch` flags become the right BatchConfig (run_batch replaced by a recorder)."""

import json

import pytest
from click.testing import CliRunner

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


def test_resume_takes_the_saved_plan(recorded, tmp_path):
    batch = tmp_path / "b"
    batch.mkdir()
    (batch / "plan.json").write_text(json.dumps({
        "settings": {"backend": "cpu", "level": "comprehensive", "dtypes": ["float16"], "use_flagtune": False},
        "devices": ["0", "1"], "ops": [{"op": "abs"}, {"op": "mm"}], "dismissed": {"gelu": "bug"},
        "timeout_s": 60, "op_timeouts": {"mm": 600}, "retries": 2, "fallback_dtypes": [["float32"]],
        "extra_env": {"MY_SWITCH": "1"}, "dismiss_file": None}))
    result = CliRunner().invoke(command.batch_command, ["--resume", "--out", str(batch), "--retries", "0"],
                                env={"BENCH_LEVEL": "core"})
    assert result.exit_code == 0, result.output
    config = recorded[0]
    assert config.resume and list(config.ops) == ["abs", "mm", "gelu"]
    assert config.settings.level == "comprehensive"    # the plan's, not the environment's
    assert config.settings.dtypes == ("float16",)
    assert list(config.devices) == ["0", "1"] and config.timeout_s == 60
    assert config.op_timeouts == {"mm": 600} and config.retries == 0
    assert config.fallback_dtypes == (("float32",),) and config.extra_env == {"MY_SWITCH": "1"}

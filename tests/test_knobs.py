import pytest

from zlbench import knobs


def test_flag_beats_env_beats_default():
    env = {"BENCH_LEVEL": "comprehensive", "ZL_DIRECT_REPEAT": "5"}
    s = knobs.resolve({"level": "core"}, env)
    assert s.level == "core" and s.sources["level"] == "flag"
    assert s.direct_repeat == 5 and s.sources["direct_repeat"] == "env"
    assert s.use_flagtune is False and s.sources["use_flagtune"] == "default"


def test_defaults_match_the_contract():
    s = knobs.resolve({}, {})
    assert (s.level, s.use_flagtune, s.isolate_tuner_cache, s.direct_repeat) == ("core", False, False, 1)
    assert s.enable_cudagraph is True and s.parallel_warmup_gpus == 0
    assert s.provider == "sample" and s.shape_mode == "upstream"


def test_flaggems_dir_implies_provider_and_shape_file_implies_file_mode():
    s = knobs.resolve({"flaggems_dir": "/x", "shape_file": "s.yaml"}, {})
    assert s.provider == "flaggems" and s.shape_mode == "file"


@pytest.mark.parametrize("name,env,raw", [
    ("level", "BENCH_LEVEL", "fast"),
    ("dtypes", "DTYPES", "float16,float64x"),
    ("direct_repeat", "ZL_DIRECT_REPEAT", "0"),
    ("direct_repeat", "ZL_DIRECT_REPEAT", "three"),
    ("use_flagtune", "USE_FLAGTUNE", "maybe"),
    ("shape_mode", "SHAPE_MODE", "both"),
])
def test_bad_values_are_rejected_naming_flag_and_env(name, env, raw):
    with pytest.raises(knobs.KnobError) as info:
        knobs.resolve({}, {env: raw})
    message = info.value.format_message()
    assert env in message and knobs.BY_NAME[name].flag in message and raw in message


def test_dtypes_accept_torch_prefix_and_spaces():
    assert knobs.resolve({"dtypes": "torch.float16, bfloat16"}, {}).dtypes == ("float16", "bfloat16")


def test_every_knob_has_flag_env_and_caliber_flag():
    envs = [k.env for k in knobs.KNOBS]
    assert len(envs) == len(set(envs))
    for required in ("FLAGGEMS_DIR", "OP", "OP_FILE", "TEST_NODE", "ZL_BACKEND", "BENCH_LEVEL",
                     "DTYPES", "SHAPE_FILE", "SHAPE_MODE", "REPLAY_FROM", "USE_FLAGTUNE",
                     "ZL_ISOLATE_TUNER_CACHE", "ZL_DIRECT_REPEAT", "ZL_ENABLE_CUDAGRAPH",
                     "PARALLEL_WARMUP_GPUS"):
        assert required in envs
    caliber = knobs.resolve({}, {}).caliber()
    assert "BENCH_LEVEL" in caliber and "ZL_DIRECT_REPEAT" in caliber and "OP" not in caliber

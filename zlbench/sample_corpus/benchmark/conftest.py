"""Options and configuration of the sample corpus, as FlagGems' benchmark/conftest.py."""

import torch

from . import base, consts


def pytest_addoption(parser):
    parser.addoption("--mode", default="kernel", choices=[m.value for m in consts.BenchMode],
                     help="kernel: device timer; operator/wrapper: wall clock around a loop.")
    parser.addoption("--level", default="comprehensive",
                     choices=[lv.value for lv in consts.BenchLevel],
                     help="core, or comprehensive (adds each class's set_more_shapes).")
    parser.addoption("--warmup", default=consts.DEFAULT_WARMUP_TIME, help="Warmup time (ms).")
    parser.addoption("--iter", default=consts.DEFAULT_ITER_TIME, help="Timed time (ms).")
    parser.addoption("--dtypes", action="append", default=None,
                     choices=["float16", "float32", "bfloat16", "int16", "int32", "bool"],
                     help="Data types to measure (repeatable).")
    parser.addoption("--shape_file", default=str(base.SHAPE_FILE), help="Shape file (yaml).")


def pytest_configure(config):
    cfg = base.Config
    cfg.mode = consts.BenchMode(config.getoption("--mode"))
    cfg.bench_level = consts.BenchLevel(config.getoption("--level"))
    cfg.warm_up = int(config.getoption("--warmup"))
    cfg.repetition = int(config.getoption("--iter"))
    names = config.getoption("--dtypes")
    cfg.user_desired_dtypes = [getattr(torch, n) for n in names] if names else None
    cfg.shape_file = config.getoption("--shape_file")
    # Operator marks are not registered one by one (as in FlagGems); keep pytest quiet.
    config.addinivalue_line("filterwarnings", "ignore::pytest.PytestUnknownMarkWarning")

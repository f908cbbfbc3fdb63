"""Options and configuration of the sample corpus, as FlagGems' benchmark/conftest.py
(its --record json output included: the same file format, written the same way)."""

import json
import os

import pytest
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
    parser.addoption("--record", default="none", choices=["none", "log", "json"],
                     help="Benchmark info recorded in log/json files or not")
    parser.addoption("--output", default="benchmark_result.json",
                     help="Path to report file for JSON output")


def pytest_configure(config):
    cfg = base.Config
    cfg.mode = consts.BenchMode(config.getoption("--mode"))
    cfg.bench_level = consts.BenchLevel(config.getoption("--level"))
    cfg.warm_up = int(config.getoption("--warmup"))
    cfg.repetition = int(config.getoption("--iter"))
    names = config.getoption("--dtypes")
    cfg.user_desired_dtypes = [getattr(torch, n) for n in names] if names else None
    cfg.shape_file = config.getoption("--shape_file")
    cfg.record_json = config.getoption("--record") == "json"
    cfg.output = config.getoption("--output")
    # Operator marks are not registered one by one (as in FlagGems); keep pytest quiet.
    config.addinivalue_line("filterwarnings", "ignore::pytest.PytestUnknownMarkWarning")


BUILTIN_MARKS = ("parametrize", "skip", "skipif", "xfail", "usefixtures", "filterwarnings",
                 "timeout", "tryfirst", "trylast")


def _reason(report):
    if hasattr(report.longrepr, "reprcrash"):
        return report.longrepr.reprcrash.message
    if isinstance(report.longrepr, tuple):
        return report.longrepr[2]
    return str(report.longrepr)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    out = yield
    report = out.get_result()
    marks = [m.name for m in item.iter_markers() if m.name not in BUILTIN_MARKS]
    report.opid = marks[0] if marks else item.nodeid


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_logreport(report):
    if not base.Config.record_json:
        return
    entry = base.TEST_RESULTS.setdefault(report.opid, {})
    if report.when == "setup" and report.outcome == "skipped":
        entry.update(result="skipped", reason=_reason(report), test_case=report.nodeid)
    elif report.when == "call":
        entry.update(result=report.outcome, test_case=report.nodeid,
                     reason=_reason(report) if report.outcome in ("skipped", "failed") else None)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not base.Config.record_json:
        return
    data = base.TEST_RESULTS
    if os.path.exists(base.Config.output):
        with open(base.Config.output) as f:
            data = {**json.load(f), **base.TEST_RESULTS}
    with open(base.Config.output, "w") as f:
        json.dump(data, f, indent=2, default=str)

"""Benchmark classes of the sample corpus, with FlagGems' Benchmark API.

The same names and hooks as FlagGems' benchmark/base.py (op_name, get_latency,
record_shapes, get_input_iter(dtype), set_shapes by op name then class chain,
set_more_shapes at comprehensive level), so zlbench's plugins treat both alike.
"""

import gc
import time
from dataclasses import asdict
from pathlib import Path

import pytest
import torch
import yaml

from . import consts

SHAPE_FILE = Path(__file__).with_name("core_shapes.yaml")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


class _Config:
    mode = consts.BenchMode.KERNEL
    bench_level = consts.BenchLevel.COMPREHENSIVE
    warm_up = consts.DEFAULT_WARMUP_TIME
    repetition = consts.DEFAULT_ITER_TIME
    user_desired_dtypes = None
    shape_file = str(SHAPE_FILE)
    record_json = False
    output = "benchmark_result.json"


Config = _Config()
# --record json: {op id: {"result", "reason", "test_case", "details": [...]}}, as FlagGems.
TEST_RESULTS = {}


def _do_bench():
    """The device timer, looked up at call time so that plugins can replace it."""
    if DEVICE == "cuda":
        try:
            import triton.testing

            return triton.testing.do_bench
        except ImportError:
            pass
    from zlbench import cpu_timer

    return cpu_timer.do_bench


def _synchronize():
    if DEVICE == "cuda":
        torch.cuda.synchronize()


class Benchmark:
    DEFAULT_DTYPES = consts.FLOAT_DTYPES
    DEFAULT_SHAPES = consts.DEFAULT_SHAPES
    DEFAULT_SHAPE_DESC = "M, N"

    def __init__(self, op_name, torch_op, dtypes=None, gems_op=None, **kwargs):
        self.op_name = op_name
        self.torch_op = torch_op
        self.gems_op = gems_op
        self.dtypes = dtypes if dtypes is not None else self.DEFAULT_DTYPES
        self.shapes = self.DEFAULT_SHAPES
        self.shape_desc = self.DEFAULT_SHAPE_DESC
        self.gbps_fn = kwargs.get("gbps_fn")
        self.flops_fn = kwargs.get("flops_fn")

    # -- configuration -----------------------------------------------------
    def set_dtypes(self, wanted):
        if wanted and not all(d in self.dtypes for d in wanted):
            bad = [str(d) for d in wanted if d not in self.dtypes]
            raise ValueError(f"Given dtype(s) '{', '.join(bad)}'can't be supported by this op '{self.op_name}'")
        self.to_bench_dtypes = wanted or self.dtypes

    def set_shapes(self, shape_file_path):
        if not Path(shape_file_path).is_file():
            raise FileNotFoundError(f"Shape file '{shape_file_path}' does not exist.")
        table = yaml.safe_load(Path(shape_file_path).read_text()) or {}
        entry = table.get(self.op_name)
        if entry is None:
            entry = next((table[c.__name__] for c in type(self).__mro__ if c.__name__ in table), None)
        if entry is not None:
            self.shapes = entry.get("shapes", self.DEFAULT_SHAPES)
            self.shape_desc = entry.get("shape_desc", self.DEFAULT_SHAPE_DESC)
        self.shapes = [tuple(s) for s in self.shapes]
        if Config.bench_level == consts.BenchLevel.COMPREHENSIVE:
            more = self.set_more_shapes() or []
            self.shapes = list(dict.fromkeys(self.shapes + [tuple(s) for s in more]))

    def set_more_shapes(self):
        return []

    def init_user_config(self):
        self.set_dtypes(Config.user_desired_dtypes)
        self.set_shapes(Config.shape_file)

    # -- inputs --------------------------------------------------------------
    def get_input_iter(self, dtype):
        raise NotImplementedError

    def record_shapes(self, *args, **kwargs):
        def parse(item):
            if isinstance(item, torch.Tensor):
                return item.size()
            if isinstance(item, (int, float, str, torch.dtype)):
                return item
            if isinstance(item, (list, tuple)):
                return [parse(i) for i in item]
            if isinstance(item, dict):
                return {k: parse(v) for k, v in item.items()}
            return None

        parsed_args = [parse(a) for a in args]
        parsed_kwargs = {k: parse(v) for k, v in kwargs.items()}
        if parsed_args and parsed_kwargs:
            return parsed_args, parsed_kwargs
        return parsed_args if parsed_args else parsed_kwargs

    @staticmethod
    def unpack(inputs):
        args = [i for i in inputs if not isinstance(i, dict)]
        kwargs = {}
        for i in inputs:
            if isinstance(i, dict):
                kwargs.update(i)
        return args, kwargs

    # -- timing ----------------------------------------------------------------
    def get_latency(self, op, *args, **kwargs):
        fn = lambda: op(*args, **kwargs)  # noqa: E731
        if Config.mode == consts.BenchMode.KERNEL:
            return _do_bench()(fn, warmup=Config.warm_up, rep=Config.repetition,
                               return_mode="median")
        n = 10
        for _ in range(n):
            fn()
        _synchronize()
        start = time.perf_counter()
        for _ in range(n):
            fn()
        if Config.mode == consts.BenchMode.OPERATOR:
            _synchronize()
        return (time.perf_counter() - start) / n * 1000

    def run(self):
        self.init_user_config()
        for dtype in self.to_bench_dtypes:
            metrics = []
            for inputs in self.get_input_iter(dtype):
                metric = consts.BenchmarkMetrics()
                try:
                    args, kwargs = self.unpack(inputs)
                    metric.shape_detail = self.record_shapes(*args, **kwargs)
                    metric.latency_base = self.get_latency(self.torch_op, *args, **kwargs)
                    metric.latency = self.get_latency(self.gems_op, *args, **kwargs)
                    metric.speedup = metric.latency_base / metric.latency
                    if self.gbps_fn is not None:
                        moved = self.gbps_fn(*args)
                        metric.gbps_base = moved / metric.latency_base / 1e6
                        metric.gbps = moved / metric.latency / 1e6
                    if self.flops_fn is not None:
                        metric.tflops = self.flops_fn(*args) / metric.latency / 1e9
                except Exception as e:  # as FlagGems: the whole (op, dtype) table is lost
                    metric.error_msg = str(e)
                    pytest.fail(str(e))
                finally:
                    metrics.append(metric)
                    gc.collect()
            result = consts.BenchmarkResult(
                op_name=self.op_name, dtype=str(dtype), mode=Config.mode.value,
                level=Config.bench_level.value, result=metrics,
            )
            print(result)
            update_result(self.op_name, asdict(result))


def update_result(op, data):
    """As FlagGems' conftest.update_result: one record per (op, dtype) for --record json."""
    if not Config.record_json:
        return
    TEST_RESULTS.setdefault(op, {}).setdefault("details", []).append(data)


def _randn(shape, dtype):
    return torch.randn(shape, dtype=dtype, device=DEVICE)


class UnaryPointwiseBenchmark(Benchmark):
    def set_more_shapes(self):
        return [(4096,), (32, 64, 64)]

    def get_input_iter(self, dtype):
        for shape in self.shapes:
            yield (_randn(shape, dtype),)


class BinaryPointwiseBenchmark(Benchmark):
    def get_input_iter(self, dtype):
        for shape in self.shapes:
            yield _randn(shape, dtype), _randn(shape, dtype)


class ReductionBenchmark(Benchmark):
    def set_more_shapes(self):
        return [(16, 4096)]

    def get_input_iter(self, dtype):
        for shape in self.shapes:
            yield _randn(shape, dtype), {"dim": -1}


class NormBenchmark(Benchmark):
    def get_input_iter(self, dtype):
        for m, n in self.shapes:
            x = _randn((m, n), dtype)
            yield x, [n], _randn((n,), dtype), _randn((n,), dtype), {"eps": 1e-5}


class BlasBenchmark(Benchmark):
    DEFAULT_SHAPE_DESC = "M, N, K"

    def set_more_shapes(self):
        return [(32, 512, 64)]

    def get_input_iter(self, dtype):
        for m, n, k in self.shapes:
            yield _randn((m, k), dtype), _randn((k, n), dtype)


class AddmmBenchmark(BlasBenchmark):
    def get_input_iter(self, dtype):
        for m, n, k in self.shapes:
            yield _randn((m, n), dtype), _randn((m, k), dtype), _randn((k, n), dtype)

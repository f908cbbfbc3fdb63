"""The row a timing call belongs to, learned by wrapping a FlagGems-like Benchmark."""

import types

import pytest
import torch

from zlbench.plugins import row_context

SEEN = []
# The state the wrapped methods share (a timer session owns one in a real run).
ROWS = row_context.RowContext()


def _timer(fn):
    SEEN.append(ROWS.current())
    fn()
    return 1.0


def make_module():
    class Benchmark:
        def __init__(self, op_name, shapes, dtypes):
            self.op_name, self.shapes, self.dtypes = op_name, shapes, dtypes

        def get_input_iter(self, dtype):
            for shape in self.shapes:
                yield torch.zeros(shape, dtype=dtype), 3

        def record_shapes(self, *args, **kwargs):
            return [a.size() if isinstance(a, torch.Tensor) else a for a in args]

        def get_latency(self, op, *args, **kwargs):
            return _timer(lambda: op(*args, **kwargs))

        def run(self):
            for dtype in self.dtypes:
                for args in self.get_input_iter(dtype):
                    self.record_shapes(*args)
                    self.get_latency(torch.mul, *args)
                    self.get_latency(torch.mul, *args)

    module = types.ModuleType("benchmark.base")
    module.Benchmark = Benchmark
    return module


@pytest.fixture
def bench_module():
    SEEN.clear()
    module = make_module()
    yield module
    ROWS.uninstall()


def test_rows_carry_op_dtype_exact_shape_and_side(bench_module):
    assert ROWS.install({"benchmark.base": bench_module}) == [bench_module.Benchmark]
    bench_module.Benchmark("mul", [(4, 4), (8,)], [torch.float16, torch.bfloat16]).run()
    rows = [t.row for t in SEEN]
    assert [r.side for r in rows] == ["torch", "gems"] * 4
    assert rows[0] == ("mul", "torch.float16", "[torch.Size([4, 4]), 3]", "torch", None)
    assert rows[3].dtype == "torch.float16" and rows[3].shape == "[torch.Size([8]), 3]"
    assert rows[4].dtype == "torch.bfloat16"
    # both sides of a row share its id; rows differ from each other
    ids = [t.row_id for t in SEEN]
    assert ids[0] == ids[1] and len(set(ids)) == 4
    assert ROWS.stats["latency_calls"] == 8
    assert ROWS.current() is None


def test_subclasses_defined_after_install_are_wrapped_and_super_calls_count_once(bench_module):
    ROWS.install({"benchmark.base": bench_module})

    class Inner(bench_module.Benchmark):  # like FlagGems classes defined inside a test
        def get_input_iter(self, dtype):
            yield torch.ones(2, dtype=dtype), 2

        def get_latency(self, op, *args, **kwargs):
            return super().get_latency(op, *args, **kwargs)

    Inner("neg", [], [torch.float32]).run()
    assert [(t.row.op, t.row.dtype, t.row.side) for t in SEEN] == [
        ("neg", "torch.float32", "torch"), ("neg", "torch.float32", "gems")]
    assert ROWS.stats["latency_calls"] == 2


def test_without_record_shapes_the_shape_is_derived_and_sides_alternate(bench_module):
    ROWS.install({"benchmark.base": bench_module})
    bench = bench_module.Benchmark("mul", [], [])
    x = torch.zeros(3, dtype=torch.int32)
    for _ in range(2):
        bench.get_latency(torch.mul, x, x)
    bench.get_latency(torch.mul, x[:2], x[:2])
    rows = [t.row for t in SEEN]
    assert [r.side for r in rows] == ["torch", "gems", "torch"]
    assert rows[0].shape == "[torch.Size([3]), torch.Size([3])]"
    assert rows[2].shape == "[torch.Size([2]), torch.Size([2])]"
    # no get_input_iter call: the dtype is a guess from the first tensor, and says so
    assert (rows[0].dtype, rows[0].dtype_source) == ("torch.int32", "guess")
    assert SEEN[0].row_id == SEEN[1].row_id != SEEN[2].row_id


def test_side_order_follows_the_metrics_asked_for():
    assert row_context.sides_for(["latency", "speedup"]) == ["gems"]
    assert row_context.side_for_call(0, None) == "torch"
    assert row_context.side_for_call(1, None) == "gems"
    assert row_context.side_for_call(2, None) == "call3"


def test_uninstall_restores_the_class(bench_module):
    cls = bench_module.Benchmark
    original = cls.__dict__["get_latency"]
    ROWS.install({"benchmark.base": bench_module})
    assert cls.__dict__["get_latency"] is not original
    ROWS.uninstall()
    assert cls.__dict__["get_latency"] is original
    assert "__init_subclass__" not in cls.__dict__


def test_only_real_benchmark_bases_are_found():
    decoy = types.ModuleType("decoy")

    class Benchmark:  # noqa: D401 - a pytest-benchmark style name clash
        pass

    decoy.Benchmark = Benchmark
    real = make_module()
    assert row_context.find_benchmark_bases({"decoy": decoy, "x.base": real}) == [real.Benchmark]


def test_dtype_text_only_for_torch_dtypes():
    assert row_context.dtype_text(torch.bfloat16) == "torch.bfloat16"
    assert row_context.dtype_text("float16") is None
    assert row_context.first_tensor_dtype([[1, torch.ones(1, dtype=torch.bool)]], {}) == "torch.bool"

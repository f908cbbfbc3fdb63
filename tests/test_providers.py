
import pytest

from zlbench import knobs, providers
from zlbench.providers import ResolveError, resolve_node

HEAD_TEST_ABS = '''
import pytest
from . import base

@pytest.mark.abs
def test_abs():
    base.UnaryPointwiseBenchmark(op_name="abs", torch_op=None).run()


@pytest.mark.abs_
def test_abs_inplace():
    base.UnaryPointwiseBenchmark(op_name="abs_", torch_op=None).run()
'''

V502_UNARY = '''
import pytest
from .performance_utils import Benchmark

@pytest.mark.parametrize("op_name, torch_op", [
    pytest.param(name, op, marks=getattr(pytest.mark, name, None)) for name, op in [
        ("abs", None), ("exp", None)]])
def test_general_unary_pointwise_perf(op_name, torch_op):
    pass
'''


@pytest.fixture
def head_tree(tmp_path):
    bench = tmp_path / "head" / "benchmark"
    bench.mkdir(parents=True)
    (bench / "base.py").write_text("class Benchmark: pass\n")
    (bench / "test_abs.py").write_text(HEAD_TEST_ABS)
    (bench / "test_mm.py").write_text("import pytest\n\n@pytest.mark.mm\ndef test_mm():\n    pass\n")
    (bench / "core_shapes.yaml").write_text("Benchmark: {shapes: [[64, 64]]}\n")
    return tmp_path / "head"


@pytest.fixture
def v502_tree(tmp_path):
    bench = tmp_path / "v502" / "benchmark"
    bench.mkdir(parents=True)
    (bench / "performance_utils.py").write_text("class Benchmark: pass\n")
    (bench / "test_unary_pointwise_perf.py").write_text(V502_UNARY)
    blas = '@pytest.mark.parametrize("op", [pytest.param("mm", marks=pytest.mark.mm)])\ndef test_blas(op): pass\n'
    (bench / "test_blas_perf.py").write_text("import pytest\n" + blas)
    (bench / "test_blas_perf_parallel.py").write_text("import pytest\n" + blas)
    return tmp_path / "v502"


def test_head_layout_resolves_file_and_functions(head_tree):
    t = resolve_node(head_tree, "abs", None, None)
    assert t.layout == "head"
    assert t.pytest_args == ["benchmark/test_abs.py", "-m", "abs"]
    assert t.test_node == "benchmark/test_abs.py::test_abs"


def test_head_op_without_its_own_file_is_found_by_mark(head_tree):
    t = resolve_node(head_tree, "abs_", None, None)
    assert t.pytest_args == ["benchmark/test_abs.py", "-m", "abs_"]
    assert t.test_node == "benchmark/test_abs.py::test_abs_inplace"


def test_v502_layout_selects_by_mark_and_skips_the_parallel_duplicate(v502_tree):
    t = resolve_node(v502_tree, "abs", None, None)
    assert t.layout == "v5.0.2"
    assert t.pytest_args == ["benchmark/test_unary_pointwise_perf.py", "-m", "abs"]
    mm = resolve_node(v502_tree, "mm", None, None)
    assert mm.pytest_args == ["benchmark/test_blas_perf.py", "-m", "mm"]


def test_test_node_is_taken_as_is(head_tree):
    t = resolve_node(head_tree, None, None, "benchmark/test_mm.py::test_mm")
    assert t.pytest_args == ["benchmark/test_mm.py::test_mm"]


def test_op_file(head_tree):
    t = resolve_node(head_tree, "abs", "test_abs.py", None)
    assert t.bench_files == [head_tree / "benchmark" / "test_abs.py"]


@pytest.mark.parametrize("op,op_file,node,check", [
    ("nosuchop", None, None, "benchmark_file"),
    ("abs", "test_nope.py", None, "benchmark_file"),
    (None, None, "benchmark/test_nope.py::test_x", "benchmark_file"),
    (None, None, None, "op"),
])
def test_resolution_failures_name_their_check(head_tree, op, op_file, node, check):
    with pytest.raises(ResolveError) as info:
        resolve_node(head_tree, op, op_file, node)
    assert info.value.check == check


def test_flaggems_provider_puts_src_on_pythonpath(head_tree):
    (head_tree / "src").mkdir()
    s = knobs.resolve({"flaggems_dir": str(head_tree), "op": "mm"}, {})
    t = providers.make_provider(s).resolve("mm")
    assert t.env["PYTHONPATH"].split(":")[0] == str(head_tree / "src")


def test_flaggems_provider_rejects_a_dir_without_benchmark(tmp_path):
    with pytest.raises(ResolveError) as info:
        providers.FlagGemsProvider(str(tmp_path))
    assert info.value.check == "flaggems_dir"


def test_sample_corpus_has_the_promised_families():
    ops = providers.SampleProvider().operators()
    assert len(ops) >= 8
    for op in ("abs", "add", "sum", "softmax", "layer_norm", "rms_norm", "mm", "addmm"):
        assert op in ops
    assert (providers.SampleProvider().root / "benchmark" / "conftest.py").is_file()


def test_list_ops_on_head_tree(head_tree):
    assert providers.list_ops(head_tree) == ["abs", "abs_", "mm"]


def test_list_ops_reads_v502_marks_inside_parametrize(v502_tree):
    ops = providers.list_ops(v502_tree)
    assert {"abs", "exp", "mm"} <= set(ops)


def test_installed_flaggems_benchmark_package_lists_and_resolves(head_tree, tmp_path, monkeypatch):
    # The wheel ships benchmark/ as the package flaggems_benchmark/: same tree, other name.
    site = tmp_path / "site"
    site.mkdir()
    (head_tree / "benchmark").rename(site / "flaggems_benchmark")
    (site / "flaggems_benchmark" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(site))
    provider = providers.FlagGemsProvider(None)
    assert provider.root == site and "abs" in provider.operators()
    t = provider.resolve("abs")
    assert t.pytest_args == ["flaggems_benchmark/test_abs.py", "-m", "abs"]
    assert t.upstream_shape_file == site / "flaggems_benchmark" / "core_shapes.yaml"

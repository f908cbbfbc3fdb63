"""AST scan of both FlagGems layouts, on the hand-written fixture trees."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import yaml

from zlbench.corpus.scan import resolve_shape_key, scan_tree
from zlbench.corpus.layout import TreeError, detect_layout

FIXTURES = Path(__file__).parent / "fixtures"
HEAD = FIXTURES / "flaggems_head"
V502 = FIXTURES / "flaggems_v502"


def _by_node(root):
    return {e.node: e for e in scan_tree(root)}


def _shapes(root):
    return yaml.safe_load((root / "benchmark" / "core_shapes.yaml").read_text())


def test_layouts_are_told_apart():
    assert detect_layout(HEAD) == "head"
    assert detect_layout(V502) == "v5.0.2"


def test_head_layout_functions_marks_and_classes():
    entries = _by_node(HEAD)
    assert len(entries) == 11
    assert len({m for e in entries.values() for m in e.marks}) == 9
    mm = entries["benchmark/test_mm.py::test_mm"]
    assert mm.marks == ["mm"]
    assert mm.op_names == ["mm"]
    assert mm.class_chain == ["BlasBenchmark", "Benchmark"]
    self_t = entries["benchmark/test_mm.py::test_mm_self_transpose_benchmark"]
    assert self_t.marks == ["mm"] and self_t.op_names == ["mm_self_transpose"]
    assert self_t.class_chain == ["MmSelfTransposeBenchmark", "GenericBenchmark2DOnly",
                                  "GenericBenchmarkFilterShapes", "GenericBenchmark", "Benchmark"]
    # two operator marks on one test; skipif is not an operator
    assert entries["benchmark/test_tril.py::test_tril_out_transposed"].marks == ["tril", "tril_out"]


def test_head_op_name_through_positional_args_super_init_and_backward():
    entries = _by_node(HEAD)
    assert entries["benchmark/test_top_k_per_row_prefill.py::test_top_k_per_row_prefill"].op_names \
        == ["top_k_per_row_prefill"]
    unmarked = entries["benchmark/test_fused_q_kv_rmsnorm.py::test_fused_q_kv_rmsnorm_benchmark"]
    assert unmarked.marks == [] and unmarked.op_names == ["fused_q_kv_rmsnorm"]
    assert entries["benchmark/test_fft.py::test_perf_fft_backward"].op_names == ["fft_backward"]


def test_mirror_file_classes_resolve_through_its_own_bases():
    entry = _by_node(HEAD)["benchmark/test_blas_perf_parallel.py::test_blas_benchmark"]
    assert entry.mirror
    assert entry.marks == ["mm", "router_gemm"]
    assert [c.marks for c in entry.cases] == [["mm"], ["router_gemm"]]
    assert entry.class_chain == ["ParallelBlasBenchmark", "ParallelBenchmarkMixin", "BlasBenchmark",
                                 "Benchmark"]


def test_v502_marks_inside_parametrize_from_list_comprehension():
    entry = _by_node(V502)["benchmark/test_unary_pointwise_perf.py::test_general_unary_pointwise"]
    # the commented-out triu is not an operator; each param has its own case
    assert entry.marks == ["abs", "exp", "gelu"]
    assert [(c.marks, c.constructions[0].op_name) for c in entry.cases] == [
        (["abs"], "abs"), (["exp"], "exp"), (["gelu"], "gelu")]
    assert entry.class_chain == ["UnaryPointwiseBenchmark", "Benchmark"]


def test_v502_bench_class_from_a_parameter_and_a_marks_list():
    entry = _by_node(V502)["benchmark/test_blas_perf.py::test_blas_benchmark"]
    cases = {c.marks[0]: c.constructions[0] for c in entry.cases}
    assert sorted(cases) == ["baddbmm", "bmm", "mm"]
    assert cases["baddbmm"].class_chain == ["BaddbmmBenchmark", "BlasBenchmark", "Benchmark"]
    assert cases["mm"].class_chain == ["BlasBenchmark", "Benchmark"]


def test_v502_cross_module_base_conditional_class_and_local_class():
    entries = _by_node(V502)
    parallel = entries["benchmark/test_blas_perf_parallel.py::test_blas_benchmark"]
    assert parallel.class_chain == ["ParallelBlasBenchmark", "ParallelBenchmarkMixin",
                                    "BlasBenchmark", "Benchmark"]
    special = entries["benchmark/test_special_perf.py::test_special_operations_benchmark"]
    chains = {c.marks[0]: c.constructions[0].bench_class for c in special.cases}
    assert chains == {"resolve_neg": "GenericBenchmarkExcluse1D", "topk": "TopKBenchmark"}
    kron = entries["benchmark/test_special_perf.py::test_kron"]
    assert kron.class_chain[:2] == ["KronBenchmark", "GenericBenchmark2DOnly"]


def test_resolve_shape_key_walks_op_name_then_class_chain():
    shapes = _shapes(HEAD)
    assert resolve_shape_key(HEAD, "benchmark/test_mm.py", "test_mm", shapes) == (
        "BlasBenchmark", ["mm", "BlasBenchmark"])
    assert resolve_shape_key(HEAD, "test_mm.py", "test_mm_self_transpose_benchmark", shapes) == (
        "mm_self_transpose", ["mm_self_transpose"])
    assert resolve_shape_key(HEAD, "benchmark/test_abs.py", "test_abs", shapes)[0] \
        == "UnaryPointwiseBenchmark"
    # a file without BlasBenchmark sends mm on to Benchmark
    trimmed = {k: v for k, v in shapes.items() if k != "BlasBenchmark"}
    assert resolve_shape_key(HEAD, "benchmark/test_mm.py", "test_mm", trimmed) == (
        "Benchmark", ["mm", "BlasBenchmark", "Benchmark"])
    assert resolve_shape_key(HEAD, "benchmark/test_mm.py", "test_mm", {}) == (
        None, ["mm", "BlasBenchmark", "Benchmark"])


def test_resolve_shape_key_per_op_in_a_parametrized_v502_test():
    shapes = _shapes(V502)
    key, tried = resolve_shape_key(V502, "benchmark/test_blas_perf.py", "test_blas_benchmark[mm]",
                                   shapes, op="baddbmm")
    assert key == "BlasBenchmark"
    assert tried == ["baddbmm", "BaddbmmBenchmark", "BlasBenchmark"]
    key, _ = resolve_shape_key(V502, "benchmark/test_special_perf.py", "test_kron", shapes)
    assert key == "KronBenchmark"


def test_resolve_shape_key_when_set_shapes_is_overridden_or_test_is_missing():
    assert resolve_shape_key(HEAD, "benchmark/test_fft.py", "test_perf_fft", _shapes(HEAD)) == (None, [])
    with pytest.raises(LookupError, match="no test function test_nope"):
        resolve_shape_key(HEAD, "benchmark/test_fft.py", "test_nope", {})


def test_a_tree_without_benchmark_dir_is_refused(tmp_path):
    with pytest.raises(TreeError, match="no benchmark/"):
        scan_tree(tmp_path)


def test_unreadable_parametrize_values_keep_function_marks(tmp_path):
    bench = tmp_path / "benchmark"
    bench.mkdir()
    (bench / "base.py").write_text("class Benchmark:\n    pass\n")
    (bench / "test_x.py").write_text(textwrap.dedent("""
        import pytest
        from .base import Benchmark

        @pytest.mark.x_op
        @pytest.mark.parametrize("case", make_cases())
        def test_x(case):
            Benchmark(op_name="x_op", torch_op=None).run()
    """))
    (entry,) = scan_tree(tmp_path)
    assert entry.marks == ["x_op"] and entry.op_names == ["x_op"]
    assert any("not static" in n for n in entry.notes)


def test_a_truncated_parametrize_product_says_so(tmp_path):
    bench = tmp_path / "benchmark"
    bench.mkdir()
    (bench / "base.py").write_text("class Benchmark:\n    pass\n")
    # 100 x 50 literal values: past the 4096 cases the scan evaluates.
    (bench / "test_x.py").write_text(
        "import pytest\nfrom .base import Benchmark\n\n"
        "@pytest.mark.x_op\n"
        f"@pytest.mark.parametrize('a', {list(range(100))})\n"
        f"@pytest.mark.parametrize('b', {list(range(50))})\n"
        "def test_x(a, b):\n"
        "    Benchmark(op_name='x_op', torch_op=None).run()\n")
    (entry,) = scan_tree(tmp_path)
    assert entry.marks == ["x_op"]
    assert "parametrize product has 5000 cases; only the first 4096 were scanned" in entry.notes

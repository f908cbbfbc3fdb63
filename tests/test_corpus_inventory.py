"""Inventories: selection per operator, duplicates, round trip, diff, the committed data."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from zlbench.corpus import inventory as inv
from zlbench.opsdata import OpsDataError
from zlbench.corpus.scan import scan_tree
from zlbench.corpus.shapes import load_shape_file

FIXTURES = Path(__file__).parent / "fixtures"
HEAD = FIXTURES / "flaggems_head"
V502 = FIXTURES / "flaggems_v502"


def _inventory(root, layout):
    shapes = load_shape_file(root / "benchmark" / "core_shapes.yaml")
    return inv.build_inventory(scan_tree(root), "fixture", layout, "test", None, shapes)


@pytest.fixture(scope="module")
def head():
    return _inventory(HEAD, "head")


@pytest.fixture(scope="module")
def v502():
    return _inventory(V502, "v5.0.2")


def test_head_selects_by_node_and_leaves_the_mirror_file_out(head):
    sel = inv.select_op(head, "mm")
    assert sel.nodes == ["benchmark/test_mm.py::test_mm",
                         "benchmark/test_mm.py::test_mm_self_transpose_benchmark"]
    assert sel.mark is None
    assert sel.pytest_args == sel.nodes
    assert sel.duplicates == ["benchmark/test_blas_perf_parallel.py::test_blas_benchmark"]
    assert inv.select_op(head, "mm").nodes == sel.nodes


def test_an_operator_only_the_mirror_file_measures_runs_there(head):
    sel = inv.select_op(head, "router_gemm")
    assert sel.nodes == ["benchmark/test_blas_perf_parallel.py::test_blas_benchmark"]
    assert sel.mark == "router_gemm"  # that node also measures mm
    assert sel.duplicates == []


def test_v502_selects_with_mark_and_never_runs_blas_twice(v502):
    sel = inv.select_op(v502, "mm")
    assert sel.pytest_args == ["benchmark/test_blas_perf.py::test_blas_benchmark",
                               "benchmark/test_blas_perf.py::test_mm_self_transpose_benchmark",
                               "-m", "mm"]
    assert sel.files == ["benchmark/test_blas_perf.py"]
    assert not any("parallel" in n for n in sel.nodes)
    assert inv.select_op(v502, "abs").pytest_args == [
        "benchmark/test_unary_pointwise_perf.py::test_general_unary_pointwise", "-m", "abs"]
    only_parallel = inv.select_op(v502, "w8a8_block_fp8_matmul_deepgemm")
    assert only_parallel.files == ["benchmark/test_blas_perf_parallel.py"]


def test_shared_nodes_shape_keys_and_unmarked_tests(head):
    tril = head["ops"]["tril"]
    assert tril["shared"] == {"benchmark/test_tril.py::test_tril_out_transposed": ["tril_out"]}
    keys = {t["node"]: t.get("shape_key") for t in head["ops"]["mm"]["tests"]}
    assert keys["benchmark/test_mm.py::test_mm"] == "BlasBenchmark"
    assert keys["benchmark/test_mm.py::test_mm_self_transpose_benchmark"] == "mm_self_transpose"
    fft = head["ops"]["fft"]["tests"][0]
    assert fft["shapes_from"] == "FFTBenchmark.set_shapes" and "shape_key" not in fft
    rms = head["ops"]["fused_q_kv_rmsnorm"]
    assert rms["unmarked"] is True and rms["mark"] is None
    assert head["shape_class_keys"] == ["Benchmark", "BlasBenchmark", "GenericBenchmark2DOnly",
                                        "UnaryPointwiseBenchmark"]
    assert head["verified"]["status"] == "unverified"


def test_write_is_stable_and_loads_back(head, tmp_path):
    path = tmp_path / "fixture.yaml"
    inv.write_inventory(head, path)
    first = path.read_text()
    inv.write_inventory(_inventory(HEAD, "head"), path)
    assert path.read_text() == first
    assert "&id" not in first  # no YAML anchors: each entry reads on its own
    assert inv.load_inventory(path) == head


def test_unknown_operator_and_missing_inventory_say_what_to_do(head, tmp_path):
    with pytest.raises(inv.UnknownOperator, match="did you mean mm"):
        inv.select_op(head, "mmm")
    with pytest.raises(OpsDataError, match="zlbench ops scan"):
        inv.load_inventory(tmp_path / "nope.yaml")


def test_diff_names_added_removed_and_changed(head):
    newer = yaml.safe_load(yaml.safe_dump(head))
    del newer["ops"]["abs_"]
    newer["ops"]["sqrt"] = newer["ops"]["abs"]
    newer["ops"]["mm"]["nodes"] = newer["ops"]["mm"]["nodes"][:1]
    diff = inv.diff_inventories(head, newer)
    assert diff.added == ["sqrt"] and diff.removed == ["abs_"]
    assert list(diff.changed) == ["mm"]
    assert inv.diff_inventories(head, head).empty


def test_committed_flaggems_inventories():
    head = inv.load_inventory("flaggems")
    assert head["layout"] == "head"
    assert head["counts"]["operators"] > 1000
    assert inv.select_op(head, "abs").nodes == ["benchmark/test_abs.py::test_abs"]
    assert all("test_blas_perf_parallel" not in n for n in inv.select_op(head, "mm").nodes)
    assert "BlasBenchmark" in head["shape_class_keys"]
    v502 = inv.load_inventory("flaggems-v5.0.2")
    assert v502["layout"] == "v5.0.2"
    assert inv.select_op(v502, "mm").files == ["benchmark/test_blas_perf.py"]


def test_checkout_commit_only_for_a_tree_that_is_its_own_checkout(tmp_path):
    import subprocess

    from zlbench.corpus.inventory import checkout_commit, git_ref

    outer = tmp_path / "project"
    inner = outer / "FlagGems"
    inner.mkdir(parents=True)
    (inner / "x").write_text("x")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(git + ["init", "-q", str(outer)], check=True)
    subprocess.run(git + ["-C", str(outer), "add", "-A"], check=True)
    subprocess.run(git + ["-C", str(outer), "commit", "-qm", "outer"], check=True)
    # A snapshot copied inside another repository is no checkout of its own.
    assert checkout_commit(inner) is None
    assert git_ref(inner) == "unknown"
    sha = subprocess.run(["git", "-C", str(outer), "rev-parse", "HEAD"], capture_output=True,
                         text=True, check=True).stdout.strip()
    assert checkout_commit(outer) == sha

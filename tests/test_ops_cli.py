"""`zlbench ops scan / diff / show` end to end on the fixture trees."""

from __future__ import annotations

from pathlib import Path

import yaml
from click.testing import CliRunner

from zlbench.ops.command import ops_group

FIXTURES = Path(__file__).parent / "fixtures"


def test_scan_writes_both_layouts_and_diff_compares_them(tmp_path):
    runner = CliRunner()
    res = runner.invoke(ops_group, [
        "scan", "--no-verify", "--out-dir", str(tmp_path),
        "--repo", f"head={FIXTURES / 'flaggems_head'}", "--ref", "head=fixture",
        "--repo", f"v502={FIXTURES / 'flaggems_v502'}"])
    assert res.exit_code == 0, res.output
    assert "head: 11 test functions, 10 operators (head layout)" in res.output
    head = yaml.safe_load((tmp_path / "head.yaml").read_text())
    assert head["ref"] == "fixture" and head["verified"]["status"] == "unverified"
    res = runner.invoke(ops_group, ["diff", str(tmp_path / "head.yaml"), str(tmp_path / "v502.yaml")])
    assert res.exit_code == 0, res.output
    assert "+ kron" in res.output and "- tril_out" in res.output
    assert "~ mm: nodes" in res.output


def test_scan_refuses_a_malformed_repo_or_ref(tmp_path):
    runner = CliRunner()
    res = runner.invoke(ops_group, ["scan", "--repo", str(FIXTURES / "flaggems_head")])
    assert res.exit_code == 2 and "NAME=DIR" in res.output
    res = runner.invoke(ops_group, ["scan", "--repo", f"a={FIXTURES / 'flaggems_head'}",
                                    "--ref", "b=x", "--out-dir", str(tmp_path)])
    assert res.exit_code == 2 and "no --repo named b" in res.output


def test_scan_exits_1_when_collection_disagrees(tmp_path):
    root = tmp_path / "checkout"
    (root / "benchmark").mkdir(parents=True)
    (root / "benchmark" / "base.py").write_text("class Benchmark:\n    pass\n")
    (root / "benchmark" / "conftest.py").write_text(
        "def pytest_collection_modifyitems(items):\n"
        "    for item in items:\n"
        "        item.add_marker('added_at_collection')\n")
    (root / "benchmark" / "test_a.py").write_text(
        "import pytest\n\n@pytest.mark.a_op\ndef test_a():\n    pass\n")
    res = CliRunner().invoke(ops_group, ["scan", "--repo", f"t={root}", "--out-dir", str(tmp_path)])
    assert res.exit_code == 1, res.output
    assert "operators only pytest found: added_at_collection" in res.output
    written = yaml.safe_load((tmp_path / "t.yaml").read_text())
    assert written["verified"]["mismatches"]["marks"]["benchmark/test_a.py::test_a"] == {
        "scan_only": [], "collect_only": ["added_at_collection"]}


def test_show_prints_the_pytest_selection():
    res = CliRunner().invoke(ops_group, ["show", "mm", "--inventory", "flaggems-v5.0.2"])
    assert res.exit_code == 0, res.output
    assert res.output.splitlines()[0] == (
        "pytest benchmark/test_blas_perf.py::test_blas_benchmark "
        "benchmark/test_blas_perf.py::test_mm_self_transpose_benchmark -m mm")
    assert "left out (re-measures the same operator): benchmark/test_blas_perf_parallel.py" in res.output


def _no_traceback(res):
    # A ClickException ends in SystemExit; anything else escaped the command.
    assert isinstance(res.exception, SystemExit), res.exc_info
    assert "Traceback" not in res.output


def test_a_checkout_without_benchmark_dir_is_a_clean_error(tmp_path):
    runner = CliRunner()
    res = runner.invoke(ops_group, ["scan", "--no-verify", "--repo", f"x={tmp_path}",
                                    "--out-dir", str(tmp_path / "out")])
    assert res.exit_code == 1
    assert f"Error: {tmp_path.resolve()} has no benchmark/" in res.output
    _no_traceback(res)
    res = runner.invoke(ops_group, ["guards", str(tmp_path)])
    assert res.exit_code == 1 and "has no benchmark/" in res.output
    _no_traceback(res)


def test_a_malformed_inventory_is_a_clean_error(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("ops: [unclosed\n")
    res = CliRunner().invoke(ops_group, ["diff", str(bad), str(bad)])
    assert res.exit_code == 1
    assert f"Error: inventory {bad} is not valid YAML" in res.output
    _no_traceback(res)


def test_a_file_that_does_not_parse_is_reported_not_dropped(tmp_path):
    root = tmp_path / "checkout"
    (root / "benchmark").mkdir(parents=True)
    (root / "benchmark" / "base.py").write_text("class Benchmark:\n    pass\n")
    (root / "benchmark" / "test_a.py").write_text(
        "import pytest\n\n@pytest.mark.a_op\ndef test_a():\n    pass\n")
    (root / "benchmark" / "test_b.py").write_text("def test_b(:\n    pass\n")
    runner = CliRunner()
    res = runner.invoke(ops_group, ["scan", "--no-verify", "--repo", f"t={root}",
                                    "--out-dir", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "warning: " in res.output and "benchmark/test_b.py does not parse" in res.output
    written = yaml.safe_load((tmp_path / "t.yaml").read_text())
    assert list(written["verified"]["unparsed_files"]) == ["benchmark/test_b.py"]
    assert written["verified"]["unparsed_files"]["benchmark/test_b.py"].startswith("SyntaxError")
    res = runner.invoke(ops_group, ["diff", str(tmp_path / "t.yaml"), "--tree", str(root)])
    assert res.exit_code == 0 and "benchmark/test_b.py does not parse" in res.output
    res = runner.invoke(ops_group, ["guards", str(root)])
    assert res.exit_code == 0, res.output
    assert "benchmark/test_b.py does not parse; its guards are left out" in res.output

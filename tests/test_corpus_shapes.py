"""Shape files must carry upstream's class keys; merge adds the missing ones."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from zlbench.ops.command import ops_group
from zlbench.corpus.shapes import (ShapeFileError, check_shape_file, class_keys, load_shape_file,
                                merge_class_keys)

UPSTREAM = Path(__file__).parent / "fixtures" / "flaggems_head"
UPSTREAM_KEYS = ["Benchmark", "BlasBenchmark", "GenericBenchmark2DOnly", "UnaryPointwiseBenchmark"]

CURATED = """\
# trace-derived shapes for two operators
mm:
  shapes:
    - [1, 4096, 7168, 2048]
abs:
  shapes:
    - [4096, 7168]
Benchmark:
  shapes:
    - [64, 64]
"""


def _upstream():
    return load_shape_file(UPSTREAM / "benchmark" / "core_shapes.yaml")


def test_class_keys_are_the_camel_case_keys():
    assert class_keys(_upstream()) == UPSTREAM_KEYS  # not single_dim_shapes, not mm_self_transpose


def test_check_names_every_missing_class_key(tmp_path):
    path = tmp_path / "curated.yaml"
    path.write_text(CURATED)
    result = check_shape_file(path, UPSTREAM_KEYS)
    assert not result.ok
    assert result.missing_class_keys == ["BlasBenchmark", "GenericBenchmark2DOnly",
                                         "UnaryPointwiseBenchmark"]
    assert check_shape_file(path, ["Benchmark"]).ok


def test_unknown_keys_are_reported_separately(tmp_path):
    path = tmp_path / "curated.yaml"
    path.write_text(CURATED + "mmm:\n  shapes:\n    - [1]\n")
    result = check_shape_file(path, UPSTREAM_KEYS, known_keys=["mm", "abs"])
    assert result.unknown_keys == ["mmm"]


def test_merge_appends_upstream_entries_and_keeps_the_file(tmp_path):
    path = tmp_path / "curated.yaml"
    path.write_text(CURATED)
    added = merge_class_keys(path, _upstream())
    assert added == ["BlasBenchmark", "GenericBenchmark2DOnly", "UnaryPointwiseBenchmark"]
    text = path.read_text()
    assert text.startswith(CURATED)  # comments and own entries untouched
    merged = yaml.safe_load(text)
    assert merged["BlasBenchmark"] == _upstream()["BlasBenchmark"]
    assert merged["Benchmark"] == {"shapes": [[64, 64]]}  # its own Benchmark wins
    # the anchor-based upstream entry arrives as plain values
    assert merged["UnaryPointwiseBenchmark"]["shapes"] == [[1024], [65536]]
    assert check_shape_file(path, UPSTREAM_KEYS).ok
    assert merge_class_keys(path, _upstream()) == []


def test_a_shape_file_that_is_not_a_mapping_is_refused(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("- [1, 2]\n")
    with pytest.raises(ShapeFileError, match="must map keys"):
        load_shape_file(path)


def test_cli_check_fails_then_merge_fixes_it(tmp_path):
    path = tmp_path / "curated.yaml"
    path.write_text(CURATED)
    runner = CliRunner()
    res = runner.invoke(ops_group, ["shapes", "check", str(path), "--upstream", str(UPSTREAM)])
    assert res.exit_code == 1
    assert "BlasBenchmark" in res.output and "zlbench ops shapes merge" in res.output
    out = tmp_path / "merged.yaml"
    res = runner.invoke(ops_group, ["shapes", "merge", str(path), "--upstream", str(UPSTREAM),
                                    "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert path.read_text() == CURATED  # -o leaves the input alone
    res = runner.invoke(ops_group, ["shapes", "check", str(out), "--upstream", str(UPSTREAM)])
    assert res.exit_code == 0, res.output


def test_cli_check_uses_the_inventory_class_keys_by_default(tmp_path):
    path = tmp_path / "curated.yaml"
    path.write_text(CURATED)
    res = CliRunner().invoke(ops_group, ["shapes", "check", str(path)])
    assert res.exit_code == 1
    assert "BlasBenchmark" in res.output


def test_cli_check_with_upstream_warns_when_the_unknown_key_check_is_skipped(tmp_path):
    path = tmp_path / "curated.yaml"
    path.write_text(CURATED)
    res = CliRunner().invoke(ops_group, ["shapes", "check", str(path), "--upstream", str(UPSTREAM),
                                         "--inventory", str(tmp_path / "missing.yaml")])
    assert res.exit_code == 1  # still checked against upstream's class keys
    assert "warning: unknown-key check skipped" in res.stderr
    assert "no inventory at" in res.stderr


def test_a_shape_file_that_is_not_yaml_is_an_ops_data_error(tmp_path):
    from zlbench.opsdata import OpsDataError

    path = tmp_path / "bad.yaml"
    path.write_text("mm: [unclosed\n")
    with pytest.raises(OpsDataError, match="shape file .* is not valid YAML"):
        merge_class_keys(path, _upstream())

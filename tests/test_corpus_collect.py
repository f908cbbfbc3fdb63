"""The scan checked against pytest --collect-only, in a subprocess."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from zlbench.corpus.collect import compare, format_comparison, run_collect
from zlbench.corpus.inventory import build_inventory
from zlbench.corpus.scan import scan_tree

FIXTURES = Path(__file__).parent / "fixtures"

needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                 reason="the fixture's test modules import torch")


@needs_torch
def test_v502_fixture_scan_matches_collection_item_by_item():
    root = FIXTURES / "flaggems_v502"
    collected = run_collect(root)
    assert collected.ok, collected.reason
    assert len(collected.items) == 17
    cmp = compare(scan_tree(root), collected)
    assert cmp.clean, format_comparison(cmp)
    assert cmp.collected_functions == cmp.ast_functions == 10


def test_a_scan_mark_pytest_does_not_see_is_reported(tmp_path):
    root = _tree(tmp_path, conftest="", tests={
        "test_a.py": "import pytest\n\n@pytest.mark.a_op\ndef test_a():\n    pass\n"})
    entries = scan_tree(root)
    entries[0].marks.append("ghost_op")
    entries[0].cases[0].marks.append("ghost_op")
    cmp = compare(entries, run_collect(root))
    assert cmp.verified and not cmp.clean
    assert cmp.ast_only_ops == ["ghost_op"]
    assert cmp.mark_mismatches == {"benchmark/test_a.py::test_a": (["ghost_op"], [])}


def test_flag_gems_that_cannot_import_leaves_the_scan_unverified(tmp_path):
    root = _tree(tmp_path, conftest="import flag_gems_not_installed_here\n", tests={
        "test_a.py": "import pytest\n\n@pytest.mark.a_op\ndef test_a():\n    pass\n"})
    collected = run_collect(root)
    assert not collected.ok
    assert "flag_gems_not_installed_here" in collected.reason
    cmp = compare(scan_tree(root), collected)
    assert not cmp.verified
    assert "UNVERIFIED" in format_comparison(cmp)[0]
    inventory = build_inventory(scan_tree(root), "t", "head", "x", cmp)
    assert inventory["verified"]["status"] == "unverified"
    assert "a_op" in inventory["ops"]


def test_a_file_that_fails_to_import_is_unverified_not_missing(tmp_path):
    root = _tree(tmp_path, conftest="", tests={
        "test_a.py": "import pytest\n\n@pytest.mark.a_op\ndef test_a():\n    pass\n",
        "test_b.py": "import pytest\nraise AssertionError('Torch not compiled with CUDA enabled')\n\n"
                     "@pytest.mark.b_op\ndef test_b():\n    pass\n"})
    cmp = compare(scan_tree(root), run_collect(root))
    assert cmp.verified and cmp.clean
    assert list(cmp.unverified_files) == ["benchmark/test_b.py"]
    inventory = build_inventory(scan_tree(root), "t", "head", "x", cmp)
    assert inventory["verified"]["status"] == "partial"
    assert inventory["ops"]["b_op"]["tests"][0]["unverified"] is True


def _tree(tmp_path, conftest, tests):
    root = tmp_path / "checkout"
    bench = root / "benchmark"
    bench.mkdir(parents=True)
    (bench / "__init__.py").write_text("")
    (bench / "base.py").write_text("class Benchmark:\n    pass\n")
    (bench / "conftest.py").write_text(conftest)
    for name, text in tests.items():
        (bench / name).write_text(text)
    return root

"""The dismiss list: every entry says what, why, and how it was verified."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from zlbench.ops.command import ops_group
from zlbench.ops.dismiss import DismissError, check_against_inventory, load_dismiss

GOOD = """\
dismissed:
  - operator: fft
    reason: needs complex64 support the backend lacks
    verified: {date: 2026-11-29, backend: musa, seen: "RuntimeError: complex not supported"}
"""


def _write(tmp_path, text):
    path = tmp_path / "dismiss.yaml"
    path.write_text(text)
    return path


def test_a_valid_entry_loads_by_operator(tmp_path):
    entries = load_dismiss(_write(tmp_path, GOOD))
    assert list(entries) == ["fft"]
    assert entries["fft"]["verified"]["backend"] == "musa"


@pytest.mark.parametrize("entry, message", [
    ('{operator: fft, verified: {date: 2026-11-29, backend: musa, seen: x}}', "non-empty `reason:`"),
    ('{operator: fft, reason: "  ", verified: {date: 2026-11-29, backend: musa, seen: x}}',
     "non-empty `reason:`"),
    ('{operator: fft, reason: r}', "needs `verified:"),
    ('{operator: fft, reason: r, verified: {date: yesterday, backend: musa, seen: x}}', "YYYY-MM-DD"),
    ('{operator: fft, reason: r, verified: {date: 2026-11-29, seen: x}}', "verified.backend"),
    ('{reason: r, verified: {date: 2026-11-29, backend: musa, seen: x}}', "needs `operator:`"),
])
def test_invalid_entries_are_rejected_with_the_field_named(tmp_path, entry, message):
    with pytest.raises(DismissError, match=message):
        load_dismiss(_write(tmp_path, f"dismissed:\n  - {entry}\n"))


def test_duplicates_and_a_wrong_top_level_are_rejected(tmp_path):
    twice = GOOD + GOOD.split("\n", 1)[1]
    with pytest.raises(DismissError, match="listed twice"):
        load_dismiss(_write(tmp_path, twice))
    with pytest.raises(DismissError, match="top level must be `dismissed:`"):
        load_dismiss(_write(tmp_path, "- operator: fft\n"))


def test_operators_missing_from_the_inventory_are_reported(tmp_path):
    entries = load_dismiss(_write(tmp_path, GOOD))
    assert check_against_inventory(entries, {"repo": "flaggems", "ops": {"fft": {}}}) == []
    problems = check_against_inventory(entries, {"repo": "flaggems", "ops": {"abs": {}}})
    assert problems and "'fft' is not in the flaggems inventory" in problems[0]


def test_committed_dismiss_list_and_cli_check(tmp_path):
    load_dismiss()  # the committed file is valid
    runner = CliRunner()
    res = runner.invoke(ops_group, ["check"])
    assert res.exit_code == 0, res.output
    bad = _write(tmp_path, GOOD.replace("operator: fft", "operator: no_such_op"))
    res = runner.invoke(ops_group, ["check", "--dismiss", str(bad)])
    assert res.exit_code == 1
    assert "no_such_op" in res.output

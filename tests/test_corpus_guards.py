"""torch.cuda guards in a benchmark tree, and the musa decision table."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from zlbench.ops.command import ops_group
from zlbench.corpus.guards import CompatTableError, coverage, find_guards, load_table, removals

HEAD = Path(__file__).parent / "fixtures" / "flaggems_head"


def test_guards_are_found_with_kind_test_and_exact_reason():
    found = {(g.file, g.kind, g.test or g.where, g.reason) for g in find_guards(HEAD)}
    assert found == {
        ("benchmark/consts.py", "runtime", "get_fp8_dtype", None),
        ("benchmark/test_fft.py", "skipif", "test_perf_fft", "CUDA is not available"),
        ("benchmark/test_fft.py", "skipif", "test_perf_fft_backward", "CUDA is required here"),
        ("benchmark/test_fused_q_kv_rmsnorm.py", "skipif", "test_fused_q_kv_rmsnorm_benchmark",
         "requires cuda and vllm deepseek_v4_ops.fused_q_kv_rmsnorm"),
        ("benchmark/test_top_k_per_row_prefill.py", "module-skipif", "*", "CUDA device required"),
    }


def _table(tmp_path, guards):
    path = tmp_path / "musa_skip_overrides.yaml"
    path.write_text(yaml.safe_dump({"vendor": "mthreads", "guards": guards}))
    return path


FFT = {"file": "benchmark/test_fft.py", "kind": "skipif", "test": "test_perf_fft",
       "reason": "CUDA is not available", "decision": "remove", "why": "generic"}


def test_coverage_names_undecided_and_stale_guards(tmp_path):
    stale = dict(FFT, reason="CUDA is not available!")
    table = load_table(_table(tmp_path, [FFT, stale]))
    undecided, stale_entries = coverage(table, find_guards(HEAD), HEAD)
    assert len(undecided) == 4 and FFT["test"] not in {g.test for g in undecided}
    assert stale_entries == [stale]


@pytest.mark.parametrize("change, message", [
    ({"decision": "maybe"}, "remove or keep"),
    ({"why": ""}, "`why:`"),
    ({"reason": None}, "exact skip `reason:`"),
    ({"kind": "runtime", "where": "f"}, "only skipif markers can be removed"),
])
def test_invalid_table_entries_are_refused(tmp_path, change, message):
    with pytest.raises(CompatTableError, match=message):
        load_table(_table(tmp_path, [dict(FFT, **change)]))


def test_committed_musa_table_removes_only_vetted_markers():
    table = load_table("musa")
    assert table["vendor"] == "mthreads"
    removed = {(g["file"], g["test"], g["reason"]) for g in removals(table)}
    assert ("benchmark/test_fft.py", "test_perf_fft", "CUDA is not available") in removed
    assert all(g["kind"] in ("skipif", "module-skipif") for g in removals(table))
    # CUDA-only baselines stay guarded
    kept = {g["file"] for g in table["guards"] if g["decision"] == "keep"}
    assert "benchmark/test_cudnn_attention_forward.py" in kept
    assert "benchmark/test_flash_attention_backward.py" in kept


def test_cli_guards_lists_decisions():
    res = CliRunner().invoke(ops_group, ["guards", str(HEAD)])
    assert res.exit_code == 0, res.output
    assert "remove    skipif        benchmark/test_fft.py:15 test_perf_fft" in res.output
    assert "UNDECIDED skipif        benchmark/test_fft.py:22 test_perf_fft_backward" in res.output
    assert "5 guards in 4 files" in res.output

"""The `summary` command: files it writes, formats, exit codes, --ab refusal, --plot."""

import csv
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from summary_logwriter import identity, op_log, write_run
from zlbench.summary.command import summary_command

LOGS = Path(__file__).parent / "fixtures" / "logs"
SHAPES = ["[torch.Size([64, 64])]", "[torch.Size([4096, 4096])]"]


def invoke(*args):
    try:
        runner = CliRunner(mix_stderr=False)  # click < 8.2
    except TypeError:
        runner = CliRunner()
    return runner.invoke(summary_command, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture
def run_dir(tmp_path):
    dst = tmp_path / "run"
    shutil.copytree(LOGS / "fallback-run", dst)
    return dst


def test_summary_writes_summary_csv_into_the_run_dir_and_prints_a_table(run_dir):
    result = invoke(run_dir)
    assert result.exit_code == 0, result.stderr
    assert "By operator" in result.stdout and "nonzero" in result.stdout
    assert f"wrote {run_dir / 'summary.csv'}" in result.stderr
    with open(run_dir / "summary.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ["op", "dtype", "mode", "level", "shape", "torch_ms", "gems_ms",
                             "speedup", "tflops", "torch_gbps", "gems_gbps", "status",
                             "timer", "markers", "run_dir", "torch_samples", "torch_spread",
                             "gems_samples", "gems_spread", "torch_clock", "gems_clock", "line", "problem"]
    assert len(rows) == 4
    first = rows[0]
    assert (first["shape"], first["gems_ms"], first["timer"]) == (
        "[torch.Size([64, 64])]", "0.04", "direct")
    assert first["markers"].startswith("BENCHMARK_DIRECT_NO_CUDAGRAPH phase=capture")
    assert "op=" not in first["markers"]


def test_out_flag_and_json_format(run_dir, tmp_path):
    out = tmp_path / "elsewhere.csv"
    result = invoke(run_dir, "--format", "json", "--out", out)
    assert result.exit_code == 0
    assert out.is_file() and not (run_dir / "summary.csv").exists()
    doc = json.loads(result.stdout)
    assert len(doc["rows"]) == 4
    assert doc["by_op"][0]["direct_fallback"] == 1
    assert doc["issues"][0]["kind"] == "unattached_marker"


def test_csv_format_prints_exactly_the_file(run_dir):
    result = invoke(run_dir, "--format", "csv")
    assert result.stdout == (run_dir / "summary.csv").read_text()


def test_markdown_format_lists_rows_aggregates_and_issues(tmp_path):
    result = invoke(LOGS / "odd" / "truncated.log", "--format", "markdown",
                    "--out", tmp_path / "s.csv")
    assert result.exit_code == 0
    # Shapes as people read them; summary.csv keeps FlagGems' text.
    assert "| exp | torch.float32 | 4096×4096 |" in result.stdout
    assert "[torch.Size([4096, 4096])]" in (tmp_path / "s.csv").read_text()
    assert "### Issues (3)" in result.stdout
    assert "| partial_row | exp | torch.float32 |" in result.stdout


def test_input_without_run_log_fails_with_the_path_and_the_fix(tmp_path):
    result = invoke(tmp_path)
    assert result.exit_code == 2
    assert f"no run.log under {tmp_path}" in result.stderr
    assert "batch dir" in result.stderr


def test_unwritable_default_location_names_the_out_flag(run_dir):
    (run_dir / "summary.csv").mkdir()  # a dir where the file should go
    result = invoke(run_dir)
    assert result.exit_code == 1 and "--out FILE" in result.stderr


def test_usage_errors():
    assert invoke().exit_code == 2
    assert invoke(LOGS / "fallback-run", "--ab", "a", "b").exit_code == 2
    result = invoke(LOGS / "fallback-run", "--plot", "x.png")
    assert result.exit_code == 2 and "need --ab" in result.stderr


def _pair(tmp_path, b_ident):
    a = write_run(tmp_path / "a", op_log("abs", ["torch.float16"], SHAPES,
                                         lambda *_: 0.02), identity())
    b = write_run(tmp_path / "b", op_log("abs", ["torch.float16"], SHAPES,
                                         lambda *_: 0.01), b_ident)
    return a, b


def test_ab_refuses_a_caliber_mismatch_unless_allowed(tmp_path):
    a, b = _pair(tmp_path, identity(level="comprehensive", tuner_cache="shared"))
    refused = invoke("--ab", a, b)
    assert refused.exit_code == 2
    assert refused.stdout == ""
    assert "CALIBER MISMATCH" in refused.stderr
    assert "level: A=core B=comprehensive" in refused.stderr
    assert "--allow-caliber-mismatch" in refused.stderr
    allowed = invoke("--ab", a, b, "--allow-caliber-mismatch", "--format", "markdown")
    assert allowed.exit_code == 0
    # Said first, before any range.
    assert allowed.stdout.startswith("CALIBER MISMATCH")
    assert "| all | 2 | +100.0% | +100.0% | +100.0% | +100.0% | 2 unknown |  |" in allowed.stdout
    assert "median |gain| 100.0%" in allowed.stdout.splitlines()[-1]


def test_ab_markdown_rows_and_csv_out(tmp_path):
    a, b = _pair(tmp_path, identity())
    out = tmp_path / "ab.csv"
    result = invoke("--ab", a, b, "--format", "markdown", "--out", out)
    assert result.exit_code == 0, result.stderr
    assert "| verdict | operator | dtype | shape | A ms | A ± | B ms | B ± | gain | note |" \
        in result.stdout
    # These logs carry no row_stats.jsonl: no spread, so no verdict, and it says so.
    assert ("| UNKNOWN | abs | torch.float16 | 64×64 | 0.020000 |  | "
            "0.010000 |  | +100.0% |") in result.stdout
    assert "2 of 2 rows have no verdict (UNKNOWN): no spread recorded for A and B" in result.stdout
    with open(out, newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["pairing"], r["gain"], r["verdict"]) for r in rows] == [
        ("paired", "1.000000", "UNKNOWN")] * 2


def test_ab_json_carries_the_caliber_and_noise(tmp_path):
    a, b = _pair(tmp_path, identity(repeat=7))
    result = invoke("--ab", a, b, "--format", "json", "--allow-caliber-mismatch")
    doc = json.loads(result.stdout)
    assert doc["caliber"]["mismatch"] is True
    assert doc["caliber"]["common"] == [{"field": "repeat", "a": "3", "b": "7"}]
    assert doc["noise"]["median_abs_gain"] == pytest.approx(1.0)
    assert "repeat: A=3 B=7" in result.stderr


def test_plot_without_matplotlib_says_how_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import fails
    a, b = _pair(tmp_path, identity())
    result = invoke("--ab", a, b, "--plot", tmp_path / "gain.png")
    assert result.exit_code == 1
    assert "pip install 'zlbench[plot]'" in result.stderr


def test_plot_draws_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    png = tmp_path / "gain.png"
    result = invoke("--ab", LOGS / "h200" / "kernel-1.log", LOGS / "h200" / "kernel-2.log",
                    "--plot", png)
    assert result.exit_code == 0, result.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_summary_modules_import_no_torch_triton_or_flag_gems():
    code = (
        "import sys\n"
        "import zlbench.summary, zlbench.summary.command, zlbench.summary.plot\n"
        "from zlbench.summary.command import summary_command\n"
        "bad = [m for m in ('torch', 'triton', 'flag_gems') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_real_process_exit_codes(tmp_path):
    entry = "from zlbench.summary.command import summary_command; summary_command()"
    ok = subprocess.run([sys.executable, "-c", entry, str(LOGS / "h200" / "abs-head.log"),
                         "--out", str(tmp_path / "s.csv"), "--format", "csv"],
                        capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.count("\n") == 31
    bad = subprocess.run([sys.executable, "-c", entry, str(tmp_path / "missing")],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "does not exist" in bad.stderr

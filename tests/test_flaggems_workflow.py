"""FlagGems' workflow: its operator list (stages, kinds), its result files both ways
(the benchmark's --record json in every run dir, run_tests.py's summary.json for a
batch, a run_tests.py output dir as a summary input), and the CLI around them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import zlbench

from zlbench.corpus import operators as fg_ops
from zlbench.corpus import results as fg

FIXTURES = Path(__file__).parent / "fixtures"
RESULTS = FIXTURES / "flaggems_results"


# -- the operator list ----------------------------------------------------------------


def test_operator_list_gives_each_operator_its_current_stage_and_first_kind(staged_tree):
    entries = fg_ops.load_operators(staged_tree)
    assert entries["abs"].stage == "stable" and entries["abs"].kind == "Math"
    assert entries["tril"].stage == "removed"
    assert entries["fft"].kinds == ("LinearAlg", "Math") and entries["fft"].kind == "LinearAlg"
    assert entries["no_stage"].stage is None and entries["no_stage"].kind is None
    assert fg_ops.ops_in_stages(entries, ("stable",)) == ["abs", "abs_", "not_benchmarked"]
    assert fg_ops.parse_stages("all") == ("stable", "beta", "alpha")
    assert fg_ops.parse_stages(" Beta,stable,beta ") == ("beta", "stable")
    with pytest.raises(ValueError, match="unknown stage 'stabel'"):
        fg_ops.parse_stages("stabel")
    assert fg_ops.kinds(staged_tree)["mm"] == "BLAS"
    assert fg_ops.kinds(FIXTURES / "flaggems_head") == {}  # no conf/: the class scan decides


def test_batch_stages_select_by_operators_yaml(staged_tree, tmp_path):
    out = tmp_path / "never"
    proc = zlbench("batch", "--flaggems-dir", staged_tree, "--backend", "cpu", "--stages", "stable,beta",
                   "--dry-run", "--out", out, "--dismiss", "none")
    assert proc.returncode == 0, proc.stderr
    listed = [line.strip() for line in proc.stdout.splitlines() if line.startswith("    ")]
    assert listed == ["abs", "abs_", "mm"], proc.stdout
    assert "stages stable,beta" in proc.stdout
    # Listed as stable but without a benchmark: said, not run.
    assert "1 operators of conf/operators.yaml have no benchmark in the corpus (not run): " \
           "not_benchmarked" in proc.stdout
    assert not out.exists()


def test_stages_are_checked_before_anything_runs(staged_tree, tmp_path):
    base = ["batch", "--flaggems-dir", staged_tree, "--backend", "cpu", "--out", tmp_path / "b"]
    typo = zlbench(*base, "--stages", "stabel")
    assert typo.returncode == 2 and "unknown stage 'stabel'" in typo.stderr
    both = zlbench(*base, "--stages", "stable", "--ops", "abs")
    assert both.returncode == 2 and "give one of them" in both.stderr
    no_list = zlbench("batch", "--flaggems-dir", FIXTURES / "flaggems_head", "--backend", "cpu",
                      "--stages", "stable", "--out", tmp_path / "c")
    assert no_list.returncode == 2 and "conf/operators.yaml" in no_list.stderr
    assert not (tmp_path / "b").exists() and not (tmp_path / "c").exists()


def test_report_families_come_from_kind_where_the_checkout_has_it(staged_tree):
    from zlbench.corpus.families import operator_families

    by_kind = operator_families(["abs", "mm", "fft"], [str(staged_tree)], ["head"])
    assert (by_kind.get("abs"), by_kind.get("mm"), by_kind.get("fft")) == ("Math", "BLAS", "LinearAlg")
    assert "operators.yaml" in by_kind.source
    by_class = operator_families(["abs", "mm"], [str(FIXTURES / "flaggems_head")], ["head"])
    assert "Benchmark classes" in by_class.source and by_class.get("mm") != "BLAS"


def test_an_operator_list_that_cannot_be_read_is_named_where_the_class_scan_decides(staged_tree):
    from zlbench.corpus.families import operator_families

    (staged_tree / "conf" / "operators.yaml").write_text("ops: [unclosed\n")
    fams = operator_families(["abs", "mm"], [str(staged_tree)], ["head"])
    assert "Benchmark classes scanned" in fams.source and "operators.yaml" in fams.source
    with pytest.raises(fg_ops.OperatorListError):
        fg_ops.kinds(staged_tree)


# -- the plan without running ------------------------------------------------------------


def test_dry_run_prints_the_plan_and_writes_nothing(tmp_path):
    dismiss = tmp_path / "dismiss.yaml"
    dismiss.write_text("dismissed:\n  - operator: add\n    reason: broken on this host\n    verified:\n"
                       "      date: 2026-11-30\n      backend: cpu\n      seen: a crash\n"
                       "    inventory: none\n")
    out = tmp_path / "batch"
    proc = zlbench("batch", "--provider", "sample", "--backend", "cpu", "--devices", "0,1", "--ops", "abs,mm,add,softmax",
                   "--op-timeout", "mm=60", "--timeout", "900", "--dismiss", dismiss, "--dry-run",
                   "--out", out)
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert "nothing runs, nothing is written" in text
    assert "3 operators on 2 device(s):" in text
    assert "device 0:" in text and "device 1:" in text
    assert "mm  (timeout 60 s)" in text and "900 s per attempt" in text
    assert "dismissed (1), not run:\n  add: broken on this host" in text
    assert "level = core" in text
    assert not out.exists()


# -- mistakes caught early ------------------------------------------------------------


def test_misspelt_operators_are_refused_with_the_near_names_before_anything_runs(tmp_path):
    out = tmp_path / "batch"
    proc = zlbench("batch", "--provider", "sample", "--backend", "cpu", "--ops", "abs,softmx", "--out", out)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "softmx (did you mean softmax?)" in proc.stderr
    assert "--op-file" not in proc.stderr  # run's flags are no advice for a batch
    op_list = tmp_path / "ops.txt"
    op_list.write_text("abs\nlayer_nrom 60\n")
    listed = zlbench("batch", "--provider", "sample", "--backend", "cpu", "--op-list", op_list, "--out", out)
    assert listed.returncode == 2 and "layer_nrom (did you mean layer_norm?)" in listed.stderr
    assert not out.exists()


def test_an_error_names_the_variable_the_value_came_from(tmp_path):
    out = tmp_path / "batch"
    proc = zlbench("batch", "--provider", "sample", "--ops", "abs", "--out", out, env={"ZL_BACKEND": "cdua"})
    assert proc.returncode == 2 and "ZL_BACKEND=cdua: unknown backend 'cdua'" in proc.stderr, proc.stderr
    mode = zlbench("batch", "--provider", "sample", "--backend", "cpu", "--ops", "abs", "--out", out,
                   env={"ZL_RUN_MODE": "frsh"})
    assert mode.returncode == 2 and "ZL_RUN_MODE='frsh'" in mode.stderr, mode.stderr
    level = zlbench("batch", "--provider", "sample", "--backend", "cpu", "--dry-run", "--out", out,
                    env={"BENCH_LEVEL": "cor"})
    assert level.returncode == 2
    assert "BENCH_LEVEL='cor' (from the environment; the flag is --level): choose one of" in level.stderr
    flag = zlbench("batch", "--provider", "sample", "--backend", "cdua", "--ops", "abs", "--out", out)
    assert flag.returncode == 2 and "--backend: unknown backend" in flag.stderr
    assert not out.exists()


def test_a_misspelt_command_is_answered_with_the_near_one():
    proc = zlbench("reprot")
    assert proc.returncode == 2 and "Did you mean report?" in proc.stderr


def test_batch_help_shows_the_common_options_first():
    proc = zlbench("batch", "--help", env={"COLUMNS": "80"})
    assert proc.returncode == 0
    head = proc.stdout.splitlines()[:40]
    for flag in ("--out", "--resume", "--devices", "--ops", "--timeout", "--stages", "--dry-run"):
        assert any(line.lstrip().startswith(flag) for line in head), (flag, "\n".join(head))
    # Grouped: the caliber and worker flags come under their own headings, after.
    text = proc.stdout
    assert text.index("Common options:") < text.index("Measurement caliber") < text.index("Workers:")
    assert text.index("Workers:") < text.index("Scheduler")
    assert "--direct-timer" in text and "--worker-max-ops" in text and "--shard" in text


# -- FlagGems' result files, written -------------------------------------------------------


def test_every_run_dir_keeps_the_benchmarks_own_record(sample_screen):
    for op in ("abs", "add", "mm", "softmax"):
        record = fg.read_record(sample_screen / op / "performance_result.json")
        assert record[op]["result"] == "passed"
        details = record[op]["details"]
        assert [d["dtype"] for d in details] == ["torch.float32"]
        assert all(r["latency"] > 0 and r["latency_base"] > 0 for r in details[0]["result"])


def test_batch_writes_run_tests_summary_json(sample_screen):
    doc = json.loads((sample_screen / "summary.json").read_text())
    assert set(doc) >= {"timestamp", "total_duration", "env", "result"}
    assert sorted(doc["result"]) == ["abs", "add", "mm", "softmax"]
    mm = doc["result"]["mm"]
    assert mm["accuracy"]["status"] == "NotFound"  # zlbench runs no accuracy tests
    perf = mm["performance"]
    assert perf["status"] == "Passed" and perf["data_file"] == "mm/performance_result.json"
    record = fg.read_record(sample_screen / perf["data_file"])
    # The numbers are the record's, arranged as run_tests.py's parse_perf_data does.
    assert perf["data"] == fg.perf_entry("mm", record)["data"]
    shapes = perf["data"]["fp32"]["details"]
    assert all(" " not in s for s in shapes) and len(shapes) == len(record["mm"]["details"][0]["result"])
    assert doc["env"]["torch"]["version"] and doc["env"]["triton"] == {"version": None}


def test_perf_entry_matches_run_tests_summary_for_its_own_record():
    """The fixture's summary.json was written by hand from run_tests.py's parse_perf_data:
    perf_entry must build the same entry from the same record."""
    doc = json.loads((RESULTS / "summary.json").read_text())
    for op in ("abs", "mm"):
        built = fg.perf_entry(op, fg.read_record(RESULTS / op / "performance_result.json"))
        expected = doc["result"][op]["performance"]
        assert built["status"] == expected["status"]
        assert built["data"] == expected["data"]
    failed = fg.perf_entry("add", fg.read_record(RESULTS / "add" / "performance_result.json"))
    assert failed["status"] == "Failed" and failed["reason"].startswith("RuntimeError")
    assert fg.perf_entry("gone", {}) == {"status": "NotFound"}


def _run_tests_parse_perf_data():
    """FlagGems' own parse_perf_data, taken from tools/run_tests.py of FLAGGEMS_DIR (the
    function alone: the script's module level starts its runner)."""
    import ast
    import importlib.util

    tools = _flaggems_tools()
    source = (tools / "run_tests.py").read_text()
    func = next(n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name == "parse_perf_data")
    spec = importlib.util.spec_from_file_location("flaggems_tools_consts", tools / "consts.py")
    consts = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(consts)
    namespace = {"json": json, "consts": consts}
    exec(compile(ast.Module([func], []), str(tools / "run_tests.py"), "exec"), namespace)
    return namespace["parse_perf_data"]


def test_perf_entry_is_what_flaggems_own_parser_makes_of_the_same_record(sample_screen):
    parse_perf_data = _run_tests_parse_perf_data()
    records = [(op, RESULTS / op / "performance_result.json") for op in ("abs", "mm", "add")]
    records += [(p.parent.name, p) for p in sorted(sample_screen.glob("*/performance_result.json"))]
    assert len(records) > 3
    for op, path in records:
        theirs = parse_perf_data(op, path)
        ours = fg.perf_entry(op, fg.read_record(path))
        assert {k: ours.get(k) for k in theirs} == theirs, op


def test_failed_and_timed_out_operators_carry_what_psum_reads(tmp_path):
    from zlbench.batch.flaggems_summary import build_summary

    rows = {
        "hang": {"status": "timeout", "total_s": "1800.5", "exit_code": "", "reason": "timeout", "run_dir": ""},
        "bad": {"status": "failed", "total_s": "3", "exit_code": "1", "reason": "NO_MEASUREMENT", "run_dir": ""},
        "off": {"status": "dismissed", "reason": "broken kernel", "run_dir": ""},
    }
    doc = build_summary(tmp_path, rows, ["0"], 12.0)
    perf = {op: doc["result"][op]["performance"] for op in rows}
    assert perf["hang"]["status"] == "Timeout" and perf["hang"]["exit_code"] == fg.TIMEOUT_EXIT_CODE
    assert perf["bad"]["status"] == "Failed" and perf["bad"]["reason"] == "NO_MEASUREMENT"
    assert perf["off"]["status"] == "Skipped" and perf["off"]["reason"] == "dismissed: broken kernel"
    assert doc["total_duration"] == "0:00:12"


def test_an_unreadable_record_of_an_ok_operator_says_why_in_its_entry(tmp_path):
    from zlbench import rundir
    from zlbench.batch.flaggems_summary import build_summary

    (tmp_path / "abs").mkdir()
    rundir.perf_result_path(tmp_path / "abs").write_text("{not json")
    rows = {"abs": {"status": "ok", "total_s": "3", "exit_code": "0", "run_dir": "abs"}}
    perf = build_summary(tmp_path, rows, ["0"], 3.0)["result"]["abs"]["performance"]
    assert perf["status"] == fg.ERROR  # not "NotFound": it wrote one, and it cannot be read
    assert perf["reason"].startswith(f"{rundir.perf_result_path(tmp_path).name} unreadable:")


def _flaggems_tools() -> Path:
    root = os.environ.get("FLAGGEMS_DIR")
    if not root or not (Path(root) / "tools" / "psum_text").is_file():
        pytest.skip("set FLAGGEMS_DIR to a FlagGems checkout with tools/psum_* to run its readers")
    return Path(root) / "tools"


def test_flaggems_psum_tools_read_a_zlbench_batch(sample_screen, tmp_path):
    tools = _flaggems_tools()
    csv = subprocess.run([sys.executable, tools / "psum_text", sample_screen], capture_output=True,
                         text=True, cwd=tools, timeout=60)
    assert csv.returncode == 0, csv.stdout + csv.stderr
    lines = csv.stdout.splitlines()
    header = lines[0].split(",")
    assert header[:5] == ["No.", "ID", "AccRes", "AccStat(pass/fail/skip)", "PerfRes"]
    rows = {cells[1]: dict(zip(header, cells)) for cells in (line.split(",") for line in lines[1:])}
    assert sorted(rows) == ["abs", "add", "mm", "softmax"]
    doc = json.loads((sample_screen / "summary.json").read_text())
    for op, row in rows.items():
        assert row["PerfRes"] == "Passed"
        assert float(row["fp32"]) == pytest.approx(doc["result"][op]["performance"]["data"]["fp32"]["speedup"],
                                                   abs=5e-4)
    md = subprocess.run([sys.executable, tools / "psum_text", sample_screen, "-f", "markdown"],
                        capture_output=True, text=True, cwd=tools, timeout=60)
    assert md.returncode == 0 and "### Test Environment" in md.stdout
    page = tmp_path / "psum.html"
    html = subprocess.run([sys.executable, tools / "psum_html", sample_screen, "-o", page],
                          capture_output=True, text=True, cwd=tools, timeout=60)
    assert html.returncode == 0, html.stdout + html.stderr
    assert all(op in page.read_text() for op in rows)
    # psum_web's own converter (it reads one dir per platform).
    import importlib.util
    from importlib.machinery import SourceFileLoader

    loader = SourceFileLoader("psum_web", str(tools / "psum_web"))
    web = importlib.util.module_from_spec(importlib.util.spec_from_loader("psum_web", loader))
    loader.exec_module(web)
    converted = web.convert_summary(sample_screen, "zlbench-cpu", None)
    assert [o["id"] for o in converted["operators"]] == ["abs", "add", "mm", "softmax"]
    assert all(o["perf_status"] == "Passed" and o["fp32"] for o in converted["operators"])


# -- FlagGems' result files, read --------------------------------------------------------


def test_summary_reads_a_run_tests_output_dir(tmp_path):
    results = tmp_path / "results"
    shutil.copytree(RESULTS, results)
    proc = zlbench("summary", results, "--format", "json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    rows = doc["rows"]
    assert sorted({r["op"] for r in rows}) == ["abs", "mm", "softmax"]
    assert len(rows) == 9
    abs_64 = next(r for r in rows if r["op"] == "abs" and r["shape"] == "[[64, 64]]")
    assert abs_64["gems_ms"] == pytest.approx(0.01) and abs_64["timer"] == "flaggems do_bench"
    # softmax has no data_file: summary.json's own (space-less) shapes.
    assert any(r["op"] == "softmax" and r["shape"] == "[[[64,64]],{'dim':-1}]" for r in rows)
    kinds = {(i["kind"], i.get("op")) for i in doc["issues"]}
    assert {("op_failed", "add"), ("op_timeout", "gelu"), ("op_skipped", "silu")} <= kinds


def test_summary_ab_pairs_a_run_tests_dir_with_a_zlbench_batch(sample_screen, tmp_path):
    results = tmp_path / "results"
    shutil.copytree(RESULTS, results)
    refused = zlbench("summary", "--ab", results, sample_screen)
    # Timed by FlagGems' do_bench on an H200 against zlbench's timer here: refused.
    assert refused.returncode == 2 and "timer: A=flaggems do_bench" in refused.stderr
    for a, b in ((results, sample_screen), (sample_screen, results)):
        proc = zlbench("summary", "--ab", a, b, "--allow-caliber-mismatch", "--format", "json")
        assert proc.returncode == 0, proc.stderr
        doc = json.loads(proc.stdout)
        paired = {(p["op"], p["dtype"]) for p in doc["pairs"]}
        assert paired == {("abs", "torch.float32"), ("mm", "torch.float32"), ("softmax", "torch.float32")}
        assert len(doc["pairs"]) == 9, doc["pairs"]


def test_report_ab_takes_a_run_tests_dir_on_either_side(sample_screen, tmp_path):
    pytest.importorskip("jinja2")
    pytest.importorskip("matplotlib")
    for a, b in ((RESULTS, sample_screen), (sample_screen, RESULTS)):
        page = tmp_path / "ab.html"
        proc = zlbench("report", a, "--ab", b, "--allow-caliber-mismatch", "-o", page)
        assert proc.returncode == 0, proc.stderr
        assert "A/B of 9 paired rows" in proc.stderr


def test_docs_cli_explains_every_knob_the_help_shortens():
    from zlbench import knobs

    text = (Path(__file__).parents[1] / "docs" / "cli.md").read_text()
    missing = [k.flag for k in knobs.KNOBS + knobs.READER_KNOBS if f"`{k.flag}` / `{k.env}`" not in text]
    assert not missing, f"docs/cli.md lacks {missing}"


def test_summary_groups_by_family_kind_first_class_scan_otherwise(sample_screen, staged_tree, tmp_path):
    scanned = json.loads(zlbench("summary", sample_screen, "--format", "json", "--out", tmp_path / "a.csv",
                                 check=True).stdout)
    assert "Benchmark classes" in scanned["families"]["source"]
    assert scanned["families"]["of"]["mm"] == "Blas"
    screen = tmp_path / "screen"
    shutil.copytree(sample_screen, screen)
    for ident in screen.glob("*/run_identity.json"):
        doc = json.loads(ident.read_text())
        doc["corpus_root"] = str(staged_tree)
        ident.write_text(json.dumps(doc))
    by_kind = json.loads(zlbench("summary", screen, "--format", "json", check=True).stdout)
    assert "operators.yaml" in by_kind["families"]["source"]
    assert by_kind["families"]["of"] == {"abs": "Math", "add": "other", "mm": "BLAS", "softmax": "other"}
    assert {a["group"] for a in by_kind["by_family"]} == {"Math", "BLAS", "other"}
    table = zlbench("summary", screen, check=True).stdout
    assert "By family (kind in" in table


def test_record_json_is_asked_only_of_corpora_that_take_it(tmp_path):
    assert fg.records_json(Path(__file__).parents[1] / "zlbench" / "sample_corpus")
    # --record without --output (a corpus of another shape), and trees without --record.
    for name in ("hostile_corpus", "faulty_corpus", "flaggems_head", "flaggems_v502"):
        assert not fg.records_json(FIXTURES / name), name
    root = tmp_path / "c"
    (root / "benchmark").mkdir(parents=True)
    (root / "benchmark" / "conftest.py").write_text(
        'def pytest_addoption(parser):\n    parser.addoption("--record", choices=["none", "log"])\n'
        '    parser.addoption("--output")\n')
    assert not fg.records_json(root)  # no json among its choices


def test_short_help_names_real_knobs():
    from zlbench import knobs

    assert set(knobs.SHORT_HELP) <= set(knobs.BY_NAME)
    assert all(len(text) <= 130 for text in knobs.SHORT_HELP.values())


def test_history_records_a_run_tests_output_dir_as_a_night_of_its_own_caliber(tmp_path):
    results = tmp_path / "weekly"
    shutil.copytree(RESULTS, results)
    db = tmp_path / "h.sqlite"
    added = zlbench("history", "add", results, "--db", db, check=True).stdout
    # Its night is summary.json's time, its caliber FlagGems' timer on its device.
    assert "recorded night '2026-11-30 03:12 weekly': 9 rows" in added
    assert "level=core timer=flaggems do_bench" in added and "device model=NVIDIA H200" in added
    assert added.count("caliber ") == 1


def test_a_sharded_screen_gets_one_summary_json(tmp_path):
    screen = tmp_path / "screen"
    for k in (0, 1):
        zlbench("batch", "--provider", "sample", "--backend", "cpu", "--ops", "abs,mm,add", "--dtypes", "float32",
                "--shard", f"{k}/2", "--out", screen, "--progress", "off", "--dismiss", "none",
                timeout=300, check=True)
    shard_docs = [json.loads(p.read_text()) for p in screen.glob("shard-*-of-2/summary.json")]
    assert len(shard_docs) == 2
    zlbench("summary", screen, check=True)
    doc = json.loads((screen / "summary.json").read_text())
    assert sorted(doc["result"]) == ["abs", "add", "mm"]
    for op, item in doc["result"].items():
        assert item["performance"]["status"] == "Passed"
        assert (screen / item["performance"]["data_file"]).is_file()
        assert item["performance"]["data_file"].startswith("shard-")
    assert sorted(op for d in shard_docs for op in d["result"]) == ["abs", "add", "mm"]


def test_dry_run_of_a_resume_marks_complete_operators_and_refuses_changed_settings(sample_screen, tmp_path):
    batch = tmp_path / "batch"
    shutil.copytree(sample_screen, batch)
    before = sorted(p.name for p in batch.rglob("*"))
    plan = zlbench("batch", "--resume", "--out", batch, "--dry-run", check=True).stdout
    assert "(resumed: operators already complete there are kept)" in plan
    assert plan.count("complete: kept if the batch's journal accepts it") == 4
    changed = zlbench("batch", "--resume", "--out", batch, "--dry-run", "--direct-noise", "1")
    assert changed.returncode == 2, changed.stderr
    assert "--direct-noise 1.0 differs from the batch's plan.json, which has --direct-noise 0.5" in changed.stderr
    assert sorted(p.name for p in batch.rglob("*")) == before  # nothing written, no lock taken

"""The typed documents of a run and a batch dir (docs/design.md, "Document formats"):
each writer stamps its format, each reader checks it; a file without one (written
before formats were recorded) reads as format 1, a newer one is refused by name, and
the caller decides whether that stops it or is an issue."""

import json

import pytest

from summary_logwriter import identity, op_log, write_run
from zlbench import rowstats, rundir
from zlbench.batch.driver import load_plan
from zlbench.batch.state import BatchError
from zlbench.summary import summarize

SHAPES = ["[torch.Size([64])]"]
PLAN = {"ops": [{"op": "abs", "device": "0"}], "settings": {"repeat": 3}, "devices": ["0"]}


def one_run_batch(root):
    """A batch dir with one ok operator: its plan, its status row, its run dir."""
    write_run(root / "abs", op_log("abs", ["torch.float16"], SHAPES, lambda *a: 0.1), identity(op="abs"))
    rundir.write_plan(root, PLAN)
    rundir.StatusFile(root).update([rundir.status_row("abs", rundir.OK, run_dir="abs")])
    return root


def kinds(summary):
    return {i.kind: i.message for i in summary.issues}


# --- plan.json -----------------------------------------------------------------------


def test_plan_is_written_with_its_format_and_an_old_plan_without_one_reads(tmp_path):
    rundir.write_plan(tmp_path, {**PLAN, "format": 7})  # the writer, not its caller, says it
    saved = json.loads(rundir.plan_path(tmp_path).read_text())
    assert list(saved)[0] == "format" and saved["format"] == rundir.PLAN_FORMAT == 1
    rundir.plan_path(tmp_path).write_text(json.dumps(PLAN))  # before formats were recorded
    assert rundir.read_plan(tmp_path) == PLAN
    assert rundir.read_plan(tmp_path / "nothing-here") is None


@pytest.mark.parametrize("version, why", [(2, "plan format 2, written by a newer zlbench"),
                                          ("one", "format is 'one', not a format number")])
def test_a_plan_of_another_format_is_refused_by_the_batch(tmp_path, version, why):
    rundir.plan_path(tmp_path).write_text(json.dumps({**PLAN, "format": version}))
    with pytest.raises(rundir.DocumentError) as caught:
        rundir.read_plan(tmp_path)
    assert why in str(caught.value) and str(rundir.plan_path(tmp_path)) in str(caught.value)
    with pytest.raises(BatchError, match="restore it or start a new --out") as refused:
        load_plan(tmp_path)
    assert why in str(refused.value)


def test_a_plan_of_a_newer_format_is_an_issue_in_a_summary(tmp_path):
    root = one_run_batch(tmp_path / "batch")
    rundir.plan_path(root).write_text(json.dumps({**PLAN, "format": 2}))
    summary = summarize(root)
    assert "written by a newer zlbench" in kinds(summary)["bad_plan"]
    assert [r.op for r in summary.rows] == ["abs"]  # the rows are still read


def test_slurm_refuses_a_screen_whose_shard_plan_it_cannot_read(tmp_path):
    from zlbench.slurm.command import SubmitError, _check_screen

    shard = tmp_path / "screen" / rundir.shard_dir_name(1, 2)
    shard.mkdir(parents=True)
    rundir.plan_path(shard).write_text(json.dumps({**PLAN, "format": 3}))
    with pytest.raises(SubmitError, match="plan format 3, written by a newer zlbench"):
        _check_screen(tmp_path / "screen", 2, {"repeat": 3})
    rundir.write_plan(shard, PLAN)
    with pytest.raises(SubmitError, match=r"repeat: 3 -> 5"):
        _check_screen(tmp_path / "screen", 2, {"repeat": 5})
    _check_screen(tmp_path / "screen", 2, {"repeat": 3})


# --- run_identity.json ---------------------------------------------------------------


def test_identity_carries_its_format_and_a_newer_one_is_an_issue(tmp_path):
    rundir.write_identity(tmp_path, {"op": "abs", "timer": "graph"})
    assert json.loads((tmp_path / rundir.IDENTITY).read_text()) == {"format": 1, "op": "abs", "timer": "graph"}
    assert rundir.load_identity(tmp_path)["timer"] == "graph"
    (tmp_path / rundir.IDENTITY).write_text(json.dumps(identity()))  # an old run: no format
    assert rundir.load_identity(tmp_path)["timer"] == "graph"

    run = write_run(tmp_path / "run", op_log("abs", ["torch.float16"], SHAPES, lambda *a: 0.1),
                    identity(format=2))
    with pytest.raises(rundir.DocumentError, match="run identity format 2"):
        rundir.load_identity(run)
    assert rundir.read_identity(run) == {}  # the lenient reader: no identity
    assert "run identity format 2, written by a newer zlbench" in kinds(summarize(run))["bad_identity"]


# --- ops_status.csv ------------------------------------------------------------------


def test_status_rows_carry_their_format_and_an_old_file_without_the_column_reads(tmp_path):
    root = one_run_batch(tmp_path)
    (line, row), = rundir.read_status_rows(root)
    assert line == 2 and row["operator"] == "abs" and row["format"] == "1"
    old = "operator,status,run_dir\nabs,ok,abs\nmm,failed,mm\n"
    rundir.status_path(root).write_text(old)
    assert [(n, r["operator"], r["status"]) for n, r in rundir.read_status_rows(root)] == [
        (2, "abs", "ok"), (3, "mm", "failed")]
    assert kinds(summarize(root))["op_failed"] == "batch status failed"


def test_a_status_row_of_a_newer_format_is_an_issue_not_a_guess(tmp_path):
    root = one_run_batch(tmp_path)
    text = rundir.status_path(root).read_text()
    assert text.endswith(",1\n")  # the row's format, its last cell
    text = text[: -len("1\n")] + "2\n"
    rundir.status_path(root).write_text(text)
    with pytest.raises(rundir.DocumentError, match=r":2: it is status row format 2"):
        rundir.read_status_rows(root)
    assert "status row format 2" in kinds(summarize(root))["bad_ops_status"]
    assert rundir.StatusFile(root).read() == {}  # the lenient reader leaves the row out


# --- row_stats.jsonl -----------------------------------------------------------------


def test_row_records_carry_their_format_and_a_newer_line_is_skipped_by_name(tmp_path):
    rec = {"op": "abs", "dtype": "torch.float16", "shape": SHAPES[0], "side": "gems", "samples": 9}
    rowstats.append(tmp_path, rec)
    with open(rundir.row_stats_path(tmp_path), "a") as f:
        f.write(json.dumps({**rec, "samples": 10, "format": 2}) + "\n")
        f.write(json.dumps({k: v for k, v in rec.items()}) + "\n")  # an old line: no format
    records, problems = rowstats.read(tmp_path)
    assert records == [rec, rec]
    assert len(problems) == 1 and ":2: it is row record format 2" in problems[0] and "skipped" in problems[0]
    with pytest.raises(rundir.DocumentError, match=r"row_stats.jsonl:2: it is row record format 2"):
        rowstats.read(tmp_path, strict=True)


def test_a_row_record_with_a_field_it_does_not_have_is_refused_on_write(tmp_path):
    with pytest.raises(ValueError, match="not a row_stats.jsonl field: sampels"):
        rowstats.append(tmp_path, {"op": "abs", "sampels": 3})
    assert not rundir.row_stats_path(tmp_path).exists()


def test_a_summary_reads_its_statuses_once_for_every_view(tmp_path, monkeypatch):
    from zlbench.summary.status import operator_statuses

    summary = summarize(one_run_batch(tmp_path))
    reads = []
    real = rundir.StatusFile.read
    monkeypatch.setattr(rundir.StatusFile, "read", lambda self: reads.append(1) or real(self))
    first = operator_statuses(summary)
    assert operator_statuses(summary) is first and len(reads) == 1
    assert first.rows["abs"]["status"] == "ok"

"""A real batch (`zlbench batch` -> `zlbench run` -> pytest) over operators that attack
it (tests/fixtures/hostile_corpus): every outcome classified, every process reaped, and
nothing an operator wrote into the batch dir trusted."""

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from zlbench import proc
from zlbench.summary.rows import summarize

CORPUS = Path(__file__).parent / "fixtures" / "hostile_corpus"
OPS = ["dup_op", "escape_op", "exit_op", "flood_op", "liar_op", "silent_op", "vandal_op",
       "victim_op"]


def batch(out, state, *extra):
    env = {**os.environ, "HOSTILE_STATE_DIR": str(state), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    cmd = [sys.executable, "-m", "zlbench", "batch", "--flaggems-dir", str(CORPUS),
           "--backend", "cpu", "--devices", "0", "--out", str(out), "--timeout", "120",
           "--kill-grace", "1", "--retries", "1", "--progress", "plain", "--dismiss", "none",
           "--output-cap-mb", "1", "--run-mode", "fresh", *extra]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)


def rows_of(out):
    with open(out / "ops_status.csv", newline="") as f:
        return {r["operator"]: r for r in csv.DictReader(f)}


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile")
    out, state = root / "b", root / "state"
    proc_ = batch(out, state, "--ops", ",".join(OPS))
    return out, state, proc_


def test_every_outcome_is_classified(hostile):
    out, state, run = hostile
    assert run.returncode == 1, run.stdout + run.stderr
    got = {op: (r["status"], r["attempts"]) for op, r in rows_of(out).items()}
    assert got == {
        "dup_op": ("ok", "1"),
        "escape_op": ("ok", "1"),
        "exit_op": ("failed", "1"),       # exit 0 mid-test: no pytest summary line
        "flood_op": ("ok", "1"),
        "liar_op": ("failed", "1"),       # no row that can be counted
        "silent_op": ("failed", "1"),     # passed, printed no table
        "vandal_op": ("ok", "1"),
        "victim_op": ("ok", "1"),
    }, run.stdout
    rows = rows_of(out)
    assert "NO_MEASUREMENT reason=no_session_end" in rows["exit_op"]["reason"]
    assert "NO_MEASUREMENT reason=no_valid_rows" in rows["liar_op"]["reason"]
    assert "NO_MEASUREMENT reason=no_rows" in rows["silent_op"]["reason"]
    for op in ("exit_op", "liar_op", "silent_op"):
        assert not (out / op / ".complete").exists() or op == "silent_op"


def test_every_process_is_reaped(hostile):
    out, state, run = hostile
    escaped = int((state / "escape_op.pid").read_text())
    assert not proc.is_alive(escaped)
    assert proc.tagged_processes("ZL_BATCH_DIR", str(out)) == {}
    assert "escaped its process group" in rows_of(out)["escape_op"]["notes"]
    log = (out / "batch.log").read_text()
    assert "stray processes:" in log           # says whether a cgroup or the tag scan is used


def test_nothing_an_operator_wrote_into_the_batch_dir_is_trusted(hostile):
    out, state, run = hostile
    # ops_status.csv is the driver's: whole and true, whatever vandal_op wrote into it.
    assert set(rows_of(out)) == set(OPS)
    # victim_op's planted run was set aside; victim_op really ran and measured itself.
    assert (state / "victim_op.ran").exists()
    assert (out / "set-aside" / "victim_op" / "found-before-attempt1" / ".complete").exists()
    assert "forged" not in (out / "victim_op" / "run.log").read_text()
    assert "a run dir planted before its first attempt" in rows_of(out)["victim_op"]["notes"]


def test_output_is_stored_once_and_capped(hostile):
    out, state, run = hostile
    log = (out / "flood_op" / "run.log").read_text()
    assert len(log) < 1.1 * 1024 * 1024
    assert "OUTPUT_TRUNCATED bytes=" in log
    assert "Operator: flood_op  Performance Test" in log    # the end is kept
    for attempt in (out / "logs" / "flood_op").iterdir():
        assert attempt.stat().st_size < 64 * 1024            # not a second copy


def test_summary_flags_what_the_tables_lie_about(hostile):
    out, state, run = hostile
    summary = summarize(out)
    kinds = {}
    for issue in summary.issues:
        kinds.setdefault(issue.kind, []).append(issue)
    assert {i.op for i in kinds["duplicate_key"]} == {"dup_op"}
    assert {i.op for i in kinds["foreign_operator"]} == {"victim_op"}
    assert len(kinds["bad_values"]) == 4
    counted = {r.op for r in summary.rows if not r.problem}
    assert "liar_op" not in counted and {"dup_op", "escape_op", "flood_op", "victim_op"} <= counted


def test_resume_trusts_no_complete_an_operator_planted(hostile, tmp_path):
    out, state, run = hostile
    # vandal_op planted silent_op/.complete after silent_op failed: a resume must run
    # silent_op again, not keep a "complete" run the batch never accepted.
    assert (out / "silent_op" / ".complete").exists()
    again = batch(out, state, "--resume")
    assert again.returncode == 1, again.stdout + again.stderr
    starts = [json.loads(line) for line in (out / "attempts.jsonl").read_text().splitlines()
              if line.startswith("{")]
    resumed = [e["op"] for e in starts if e.get("event") == "attempt" and e.get("mode") is not None
               and e.get("session") != starts[0].get("session")]
    assert "silent_op" in resumed and "victim_op" not in resumed
    assert rows_of(out)["silent_op"]["status"] == "failed"

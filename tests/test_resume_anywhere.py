"""Resume trusts what the batch dir proves, wherever it runs: no key on the host that
started the batch. A batch moved to another path and resumed with a fresh HOME keeps
its completed operators; a run dir changed after its attempt was accepted, a planted
.complete, or a journal line no attempt started is not trusted."""

import json
import os
import shutil
from collections import Counter
from pathlib import Path

from conftest import zlbench

from zlbench import rundir

CORPUS = Path(__file__).parent / "fixtures" / "faulty_corpus"


def _batch(out, home, *extra):
    env = {"HOME": str(home), "XDG_STATE_HOME": str(home / "state"), "FAULTY_STATE_DIR": str(home / "faulty"),
           "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    return zlbench("batch", "--out", out, "--progress", "plain", *extra, env=env, timeout=300)


def _attempts(batch):
    return [e["op"] for e in rundir.read_journal(batch) if e.get("event") == "attempt"]


def _status(batch):
    return {op: row["status"] for op, row in rundir.StatusFile(batch).read().items()}


def test_a_batch_moved_to_another_host_resumes_without_running_again(tmp_path):
    first = _batch(tmp_path / "b", tmp_path / "home-a", "--flaggems-dir", CORPUS, "--backend",
                   "cpu", "--devices", "0", "--dismiss", "none", "--ops", "good_op,dtype_op,broken_op",
                   "--retries", "0")
    assert first.returncode == 1, first.stdout + first.stderr
    before = Counter(_attempts(tmp_path / "b"))
    assert set(before) == {"good_op", "dtype_op", "broken_op"}
    # Another host: the dir at another path, a fresh HOME and state dir (a pod restart).
    moved = tmp_path / "elsewhere" / "b"
    moved.parent.mkdir()
    shutil.move(str(tmp_path / "b"), moved)
    again = _batch(moved, tmp_path / "home-b", "--resume")
    assert again.returncode == 1, again.stdout + again.stderr
    assert "resume: 2 operator(s) complete and kept, 1 to run" in again.stdout, again.stdout
    assert "not trusted" not in again.stdout
    # Only the failed operator was measured again.
    assert set(Counter(_attempts(moved)) - before) == {"broken_op"}
    assert _status(moved) == {"good_op": "ok", "dtype_op": "ok", "broken_op": "failed"}
    assert not (moved / "set-aside" / "good_op").exists()

    # A finished run whose log changed after the batch accepted it is not the batch's.
    with open(moved / "good_op" / "run.log", "a") as f:
        f.write("good_op  torch.float32  [1]  0.001  0.001  1.0\n")
    third = _batch(moved, tmp_path / "home-c", "--resume")
    assert third.returncode == 1, third.stdout + third.stderr
    assert "good_op: its .complete is not trusted (run.log changed since its attempt was " \
           "accepted); set aside in set-aside/good_op/" in third.stdout, third.stdout
    third_ran = Counter(_attempts(moved)) - before
    assert third_ran["good_op"] == 1 and "dtype_op" not in third_ran
    assert _status(moved)["good_op"] == "ok"
    aside = list((moved / "set-aside" / "good_op").iterdir())
    assert len(aside) == 1 and (aside[0] / "run.log").read_text().endswith("1.0\n")


def _run_dir(tmp_path):
    run = tmp_path / "abs"
    run.mkdir()
    for name, text in ((rundir.RUN_LOG, "table\n"), (rundir.IDENTITY, "{}"),
                       (rundir.COMPLETE, "2026-12-01T20:00:00\n")):
        (run / name).write_text(text)
    return run


def test_only_a_result_an_attempt_line_started_is_accepted(tmp_path):
    run = _run_dir(tmp_path)
    journal = rundir.Journal(tmp_path, "s1")
    journal.record("attempt", op="abs", attempt=1)
    journal.record("result", op="abs", attempt=1, status="ok", proof=rundir.run_proof(run))
    accepted = rundir.accepted_runs(rundir.read_journal(tmp_path))
    assert rundir.proof_mismatch(run, accepted["abs"]) is None
    assert "mac" not in (tmp_path / rundir.JOURNAL_FILE).read_text()  # nothing keyed to a host

    # Lines a benchmark appends: a result without an attempt, another session's,
    # a later failure of a real attempt (that one counts: the operator runs again).
    with open(tmp_path / rundir.JOURNAL_FILE, "a") as f:
        f.write(json.dumps({"event": "result", "op": "mm", "status": "ok",
                            "proof": rundir.run_proof(run)}) + "\n")
        f.write(json.dumps({"session": "s9", "event": "result", "op": "mm", "attempt": 1,
                            "status": "ok", "proof": rundir.run_proof(run)}) + "\n")
        f.write("{not json\n")
    accepted = rundir.accepted_runs(rundir.read_journal(tmp_path))
    assert set(accepted) == {"abs"}
    assert rundir.proof_mismatch(run, accepted.get("mm")) == "no attempt of this batch ended ok for it"
    journal.record("attempt", op="abs", attempt=2)
    journal.record("result", op="abs", attempt=2, status="failed")
    assert rundir.accepted_runs(rundir.read_journal(tmp_path)) == {}


def test_a_changed_missing_or_odd_file_breaks_the_proof(tmp_path):
    run = _run_dir(tmp_path)
    result = {"status": "ok", "proof": rundir.run_proof(run)}
    assert result["proof"][rundir.ROW_STATS] is None  # absent, and recorded so
    (run / rundir.ROW_STATS).write_text("{}\n")
    assert rundir.proof_mismatch(run, result) == f"{rundir.ROW_STATS} changed since its attempt was accepted"
    (run / rundir.ROW_STATS).unlink()
    os.mkfifo(run / rundir.ROW_STATS)  # never opened for reading: no hang
    assert "changed" in rundir.proof_mismatch(run, result)
    (run / rundir.ROW_STATS).unlink()
    (run / rundir.IDENTITY).unlink()
    assert rundir.proof_mismatch(run, result) == f"{rundir.IDENTITY} changed since its attempt was accepted"
    assert "older zlbench" in rundir.proof_mismatch(run, {"status": "ok", "mac": "ab12"})

"""ops_status.csv under concurrent writers, set-aside dirs, the driver lock."""

import csv
import subprocess
import sys

import pytest

from zlbench.batch.state import BatchError, DriverLock, last_attempts
from zlbench.rundir import COLUMNS, Journal, StatusFile, read_journal, set_aside

def test_device_threads_writing_at_once_do_not_lose_rows(tmp_path):
    # One writer per batch dir (the driver; DriverLock keeps a second one out), shared by
    # its device threads.
    import threading

    status = StatusFile(tmp_path)

    def write(name):
        for i in range(60):
            status.update([{"operator": f"{name}_{i}", "status": "ok", "attempts": 1}])

    threads = [threading.Thread(target=write, args=(name,)) for name in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    with open(tmp_path / "ops_status.csv", newline="") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
    assert reader.fieldnames == COLUMNS
    assert sorted(r["operator"] for r in rows) == sorted(f"{n}_{i}" for n in "ab" for i in range(60))
    assert not list(tmp_path.glob(".ops_status.csv.*.tmp"))


def test_update_replaces_the_row_of_an_operator(tmp_path):
    status = StatusFile(tmp_path)
    status.update([{"operator": "abs", "status": "failed", "attempts": 1, "duration_s": 1.234}])
    status.update([{"operator": "abs", "status": "ok", "attempts": 2}])
    rows = status.read()
    assert list(rows) == ["abs"]
    assert rows["abs"]["status"] == "ok" and rows["abs"]["attempts"] == "2"


def test_set_aside_keeps_every_copy(tmp_path):
    (tmp_path / "abs").mkdir()
    (tmp_path / "abs" / "run.log").write_text("first")
    first = set_aside(tmp_path, "abs", "attempt1")
    (tmp_path / "abs").mkdir()
    second = set_aside(tmp_path, "abs", "attempt1")
    assert first != second and (first / "run.log").read_text() == "first"
    assert not (tmp_path / "abs").exists()
    assert set_aside(tmp_path, "abs", "attempt1") is None


def test_journal_keeps_latest_session_per_op(tmp_path):
    Journal(tmp_path, "s1").record("attempt", op="abs", attempt=1)
    Journal(tmp_path, "s1").record("attempt", op="mm", attempt=1)
    Journal(tmp_path, "s2").record("attempt", op="abs", attempt=1)
    Journal(tmp_path, "s2").record("attempt", op="abs", attempt=2)
    with open(tmp_path / "attempts.jsonl", "a") as f:
        f.write('{"cut by a cra')   # a killed driver's last line
    by_op = last_attempts(read_journal(tmp_path))
    assert [e["attempt"] for e in by_op["abs"]] == [1, 2]
    assert [e["session"] for e in by_op["mm"]] == ["s1"]


def test_second_driver_is_refused_while_the_first_lives(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from pathlib import Path; "
         "from zlbench.batch.state import DriverLock; lock = DriverLock(Path(sys.argv[1])); lock.acquire(); "
         "print('held', flush=True); time.sleep(60)", str(tmp_path)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(BatchError, match=r"in use by another zlbench batch \(pid \d+"):
            DriverLock(tmp_path).acquire()
    finally:
        holder.kill()
        holder.wait()
    lock = DriverLock(tmp_path)   # the kernel released it with the process
    lock.acquire()
    lock.release()

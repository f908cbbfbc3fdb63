"""A hostile corpus, second pass: nothing silent, nothing unbounded.

Each test names the misuse it stands for: an operator printing a huge table with one
huge cell, a benchmark module that does not import, a mark that is no identifier, a run
dir removed under the batch, a corpus changed between a batch and its --resume, a full
disk, a read-only history database, two `history add` at once, and the small ones
(timeout wording, symlink loops, closed output fds). None may end in a traceback.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from summary_logwriter import identity, op_log, write_run
from zlbench.summary.render import FORMATS, summary_chunks
from zlbench.summary.rows import summarize

WIDE = 100_000  # characters in the one wide shape


def _wide_batch(root: Path, rows: int = 4000) -> Path:
    shapes = ["[" + "7" * WIDE + "]" if i == rows // 2 else f"[torch.Size([{i + 1}])]" for i in range(rows)]
    write_run(root / "wide", op_log("wide", ["torch.float16"], shapes, lambda *_: 0.04), identity(op="wide"))
    return root


def _no_traceback(proc) -> None:
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr


@pytest.mark.parametrize("fmt_name", FORMATS)
def test_summary_streams_a_table_with_one_huge_cell(tmp_path, fmt_name):
    # One 100 KB cell among 4,000 rows: the output holds it once, no line is padded to
    # its width, and it comes in pieces (the 23.7 GB of the issue was every row padded).
    summary = summarize(_wide_batch(tmp_path))
    pieces = list(summary_chunks(summary, fmt_name))
    total = sum(map(len, pieces))
    assert len(pieces) > 4000
    assert max(map(len, pieces)) < WIDE + 4096
    assert total < 4000 * 1000 + 2 * WIDE, f"{total} characters for 4,000 rows"


@pytest.mark.parametrize("fmt_name", FORMATS)
def test_summary_ab_streams_too(tmp_path, fmt_name):
    from zlbench.summary.ab import pair_summaries
    from zlbench.summary.render_ab import ab_chunks

    result = pair_summaries(summarize(_wide_batch(tmp_path / "a")), summarize(_wide_batch(tmp_path / "b")))
    pieces = list(ab_chunks(result, fmt_name))
    assert len(pieces) > 4000
    assert max(map(len, pieces)) < 2 * WIDE + 4096
    assert sum(map(len, pieces)) < 4000 * 1000 + 4 * WIDE
    if fmt_name == "json":
        assert len(json.loads("".join(pieces))["pairs"]) == 4000


def test_report_streams_its_rows(tmp_path):
    pytest.importorskip("jinja2")
    from zlbench.report.model import batch_page
    from zlbench.report.page import page_chunks

    summary = summarize(_wide_batch(tmp_path))
    pieces = list(page_chunks(batch_page(summary)))
    assert max(map(len, pieces)) < 2 * WIDE + 300_000  # the page's script and styles are one piece
    html = "".join(pieces)
    start = html.index('<script type="application/json" class="zl-data">', html.index('id="rows-table"'))
    blob = html[start:].split(">", 1)[1].split("</script>", 1)[0]
    assert len(json.loads(blob)["rows"]) == 4000


# ---------------------------------------------------------------------------------------
# A corpus with a module that does not import and marks that are no identifiers

SAMPLE = Path(__file__).resolve().parents[1] / "zlbench" / "sample_corpus"


def _corpus(root: Path) -> Path:
    """The sample's abs test, a module with a syntax error, a test marked
    getattr(pytest.mark, "dash-op") and one marked with a name no file can take."""
    import shutil

    shutil.copytree(SAMPLE, root)
    bench = root / "benchmark"
    abs_text = (bench / "test_abs.py").read_text()
    for path in bench.glob("test_*.py"):
        path.unlink()
    head = abs_text.split("@pytest.mark.abs\n", 1)[0]
    test = (
        "\n\n{mark}\ndef test_{fn}():\n    bench = base.UnaryPointwiseBenchmark(\n"
        '        op_name="{op}", torch_op=torch.abs, gems_op=abs_decomposed, dtypes=consts.FLOAT_DTYPES\n'
        "    )\n    bench.run()\n"
    )
    (bench / "test_abs.py").write_text(head + test.format(mark="@pytest.mark.abs", fn="abs", op="abs"))
    (bench / "test_dash.py").write_text(
        head + test.format(mark='@getattr(pytest.mark, "dash-op")', fn="dash", op="dash-op")
    )
    (bench / "test_slash.py").write_text(
        head + test.format(mark='@getattr(pytest.mark, "sl/ash")', fn="slash", op="sl/ash")
    )
    (bench / "test_broken.py").write_text("import pytest\n\n\ndef test_broken(:\n    pass\n")
    return root


def _batch(*args, cwd=None):
    from conftest import zlbench

    return zlbench("batch", "--backend", "cpu", "--devices", "0", "--dtypes", "float32",
                   "--progress", "plain", "--dismiss", "none", *args, timeout=300, cwd=cwd)


def _rows(batch: Path):
    import csv

    with open(batch / "ops_status.csv", newline="") as f:
        return {r["operator"]: r for r in csv.DictReader(f)}


def test_a_module_that_does_not_parse_and_odd_marks_are_rows_not_silence(tmp_path):
    corpus = _corpus(tmp_path / "corpus")
    long = "x" * 300  # longer than any file name
    (corpus / "benchmark" / "test_long.py").write_text(
        f'import pytest\n\n\n@getattr(pytest.mark, "{long}")\ndef test_long():\n    pass\n'
    )
    out = tmp_path / "b"
    proc = _batch("--flaggems-dir", corpus, "--out", out)
    _no_traceback(proc)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    rows = _rows(out)
    assert rows[long]["status"] == "failed" and "not a valid operator name" in rows[long]["reason"]
    assert rows["abs"]["status"] == "ok"
    assert rows["dash-op"]["status"] == "ok", rows.get("dash-op")  # found, and measured
    broken = rows["benchmark/test_broken.py"]
    assert broken["status"] == "failed" and "SyntaxError" in broken["reason"] and "line 4" in broken["reason"]
    assert rows["sl/ash"]["status"] == "failed" and "not a valid operator name" in rows["sl/ash"]["reason"]
    plan = json.loads((out / "plan.json").read_text())
    assert set(plan["not_run"]) == {"benchmark/test_broken.py", "sl/ash", long}
    assert "benchmark/test_broken.py" in (out / "batch.log").read_text()
    # Every reader takes such rows: the page lists them among the failures.
    from conftest import zlbench

    for args in (["summary", out], ["report", out, "-o", tmp_path / "r.html", "--history-db", "none"]):
        done = zlbench(*args)
        _no_traceback(done)
        assert done.returncode == 0, done.stderr
    assert "benchmark/test_broken.py" in (tmp_path / "r.html").read_text()
    # Asked for by name, the odd mark is found too (not "not in the corpus' operator list").
    named = _batch("--flaggems-dir", corpus, "--out", tmp_path / "c", "--ops", "dash-op")
    assert named.returncode == 0 and "not in the corpus" not in named.stdout, named.stdout + named.stderr
    assert _rows(tmp_path / "c")["dash-op"]["status"] == "ok"


# ---------------------------------------------------------------------------------------
# The environment fails, not the operator

STANDIN = [sys.executable, str(Path(__file__).parent / "fixtures" / "faulty_corpus" / "standin_run.py")]


def _config(out, ops, **kw):
    from zlbench import knobs
    from zlbench.batch import BatchConfig

    base = dict(out=out, settings=knobs.resolve({"backend": "cpu"}, {}, names=knobs.MEASURE_KNOBS),
                ops=ops, devices=["0"], run_command=STANDIN, progress="off", kill_grace_s=0.5,
                run_mode="fresh", retries=2)
    base.update(kw)
    return BatchConfig(**base)


def _attempts(batch: Path, op: str) -> int:
    lines = (batch / "attempts.jsonl").read_text().splitlines()
    return sum(1 for ln in lines if json.loads(ln).get("event") == "attempt" and json.loads(ln).get("op") == op)


def test_a_run_dir_removed_under_its_operator_stops_the_batch_not_the_operator(tmp_path):
    from zlbench.batch import BatchError, run_batch

    batch = tmp_path / "b"
    with pytest.raises(BatchError) as err:
        run_batch(_config(batch, ["ok_1", "gone_x", "ok_2"]))
    message = str(err.value)
    assert str(batch / "gone_x") in message and "removed" in message and "--resume" in message
    assert "\n" not in message
    assert _attempts(batch, "gone_x") == 1  # no retry, no dtype ladder
    rows = _rows(batch) if (batch / "ops_status.csv").exists() else {}
    assert "gone_x" not in rows  # not blamed: no failed row, --resume runs it again


@pytest.fixture
def small_disk(tmp_path):
    """A 2 MB tmpfs (root only; skipped elsewhere)."""
    import subprocess

    mnt = tmp_path / "small"
    mnt.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)],
                                           capture_output=True).returncode != 0:
        pytest.skip("needs root to mount a small tmpfs")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_a_full_disk_spends_no_attempts_and_names_the_path(small_disk):
    from zlbench.batch import BatchError, run_batch

    batch = small_disk / "b"
    with pytest.raises(BatchError) as err:
        run_batch(_config(batch, ["fill_x", "ok_1"]))
    message = str(err.value)
    assert str(batch) in message and "No space left on device" in message and "\n" not in message
    assert _attempts(batch, "fill_x") == 1
    rows = _rows(batch) if (batch / "ops_status.csv").exists() else {}
    assert "fill_x" not in rows



# ---------------------------------------------------------------------------------------
# A corpus that changed between a batch and its --resume


def test_resume_over_a_changed_corpus_is_refused_with_what_changed_or_replanned(tmp_path):
    corpus = _corpus(tmp_path / "corpus")
    (corpus / "benchmark" / "test_broken.py").unlink()
    (corpus / "benchmark" / "test_slash.py").unlink()
    out = tmp_path / "b"
    first = _batch("--flaggems-dir", corpus, "--out", out)
    assert first.returncode == 0, first.stdout + first.stderr
    plan = json.loads((out / "plan.json").read_text())
    assert plan["corpus"]["operators"] == ["abs", "dash-op"] and plan["full_corpus"] is True
    assert "benchmark/core_shapes.yaml" in plan["corpus"]["shape_files"]
    assert "benchmark/test_abs.py" in plan["corpus"]["sources"]

    from conftest import zlbench

    shapes = corpus / "benchmark" / "core_shapes.yaml"
    shapes.write_text(shapes.read_text() + "\n# edited\n")
    refused = zlbench("batch", "--resume", "--out", out, "--progress", "plain")
    _no_traceback(refused)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "shape files changed: benchmark/core_shapes.yaml" in refused.stderr and "--replan" in refused.stderr
    # --dry-run says what the real resume would: refused.
    dry = zlbench("batch", "--resume", "--dry-run", "--out", out, "--progress", "plain")
    assert dry.returncode == 2 and "the corpus changed" in dry.stderr, dry.stdout + dry.stderr

    (corpus / "benchmark" / "test_more.py").write_text(
        (corpus / "benchmark" / "test_abs.py").read_text().replace("abs", "more")
        .replace("torch.more", "torch.abs").replace("more_decomposed", "abs_decomposed")
    )
    refused = zlbench("batch", "--resume", "--out", out, "--progress", "plain")
    assert refused.returncode == 2 and "operators added: more" in refused.stderr, refused.stderr
    assert "benchmark/test_more.py (new)" in refused.stderr

    alone = zlbench("batch", "--replan", "--out", out, "--progress", "plain")
    assert alone.returncode == 2 and "--replan needs --resume" in alone.stderr, alone.stderr
    replanned = zlbench("batch", "--resume", "--replan", "--out", out, "--progress", "plain", timeout=300)
    _no_traceback(replanned)
    assert replanned.returncode == 0, replanned.stdout + replanned.stderr
    rows = _rows(out)
    assert {op: r["status"] for op, r in rows.items()} == {"abs": "ok", "dash-op": "ok", "more": "ok"}
    plan = json.loads((out / "plan.json").read_text())
    assert sorted(p["op"] for p in plan["ops"]) == ["abs", "dash-op", "more"]
    assert plan["corpus"]["operators"] == ["abs", "dash-op", "more"]
    assert plan["sessions"][-1]["replanned"]["added"] == ["more"]
    # Changed shapes: what was measured before is kept aside, and measured again.
    assert sorted(p.name for p in (out / "set-aside").iterdir()) == ["abs", "dash-op"]
    again = zlbench("batch", "--resume", "--out", out, "--progress", "plain")
    assert again.returncode == 0 and "resume: 3 operator(s) complete and kept" in again.stdout, again.stdout


# ---------------------------------------------------------------------------------------
# A run dir removed after its operator finished


def test_summary_report_and_history_notice_a_run_dir_removed_after_the_batch(tmp_path):
    import shutil

    from conftest import zlbench

    corpus = _corpus(tmp_path / "corpus")
    (corpus / "benchmark" / "test_broken.py").unlink()
    (corpus / "benchmark" / "test_slash.py").unlink()
    out = tmp_path / "b"
    assert _batch("--flaggems-dir", corpus, "--out", out).returncode == 0
    shutil.rmtree(out / "dash-op")
    summary = zlbench("summary", out, "--format", "json")
    _no_traceback(summary)
    gone = [i for i in json.loads(summary.stdout)["issues"] if i["kind"] == "missing_run_dir"]
    assert [i["op"] for i in gone] == ["dash-op"] and str(out / "dash-op") in gone[0]["message"]
    assert "have no run dir here" in summary.stderr and "dash-op" in summary.stderr
    assert "(0 issues)" not in summary.stderr
    pytest.importorskip("jinja2")
    report = zlbench("report", out, "-o", tmp_path / "r.html", "--history-db", "none")
    assert report.returncode == 0, report.stderr
    html = (tmp_path / "r.html").read_text()
    assert "dash-op: batch status ok but its run dir" in html
    added = zlbench("history", "add", out, "--db", tmp_path / "h.sqlite")
    _no_traceback(added)
    assert added.returncode == 1 and "counted ok have no run dir" in added.stderr, added.stderr
    assert not (tmp_path / "h.sqlite").exists()


# ---------------------------------------------------------------------------------------
# The history database: read-only readers, concurrent writers


def _night(root: Path, gems: float) -> Path:
    from summary_logwriter import op_log

    write_run(root / "abs", op_log("abs", ["torch.float16"], ["[torch.Size([64])]"], lambda *a: gems),
              identity(op="abs"))
    (root / "ops_status.csv").write_text("operator,status,attempts,reason,run_dir\nabs,ok,1,,abs\n")
    return root


@pytest.fixture
def read_only_dir(tmp_path):
    """A dir and a read-only bind mount of it (root only; skipped elsewhere)."""
    import subprocess

    src, ro = tmp_path / "rw", tmp_path / "ro"
    src.mkdir()
    ro.mkdir()
    ok = os.geteuid() == 0 and subprocess.run(["mount", "--bind", str(src), str(ro)],
                                              capture_output=True).returncode == 0
    if not ok:
        pytest.skip("needs root for a read-only bind mount")
    try:
        if subprocess.run(["mount", "-o", "remount,ro,bind", str(ro)], capture_output=True).returncode:
            pytest.skip("cannot remount read-only")
        yield src, ro
    finally:
        subprocess.run(["umount", "-l", str(ro)], capture_output=True)


def test_history_readers_open_a_read_only_database_read_only(tmp_path, read_only_dir):
    from conftest import zlbench

    src, ro = read_only_dir
    for i, gems in enumerate((0.04, 0.05)):
        zlbench("history", "add", _night(tmp_path / f"n{i}", gems), "--db", src / "h.sqlite", check=True)
    before = (src / "h.sqlite").read_bytes()
    shown = zlbench("history", "show", "--db", ro / "h.sqlite", "--all")
    _no_traceback(shown)
    assert shown.returncode == 0 and "2 nights" in shown.stdout, shown.stdout + shown.stderr
    pytest.importorskip("jinja2")
    report = zlbench("report", tmp_path / "n1", "-o", tmp_path / "r.html", "--history-db", ro / "h.sqlite")
    assert report.returncode == 0, report.stderr
    assert "History: 2 nights" in (tmp_path / "r.html").read_text()
    assert (src / "h.sqlite").read_bytes() == before


def test_an_add_racing_another_of_the_same_screen_is_already_recorded(tmp_path):
    # The other add holds the write lock and records the screen while ours starts: ours
    # must then find it recorded, not fail on the screen's unique key.
    import threading
    import time

    from zlbench.history import store

    screen = summarize(_night(tmp_path / "n", 0.04))
    db = str(tmp_path / "h.sqlite")
    store.open_db(db).close()
    other = store.open_db(db)
    opened, locked = threading.Event(), threading.Event()
    outcome = {}

    def add():
        ours = store.open_db(db)  # both opened before either adds, as two commands do
        opened.set()
        locked.wait()
        try:
            outcome["added"] = store.add_screen(ours, screen).added
        except Exception as e:  # what `history add` printed as a traceback
            outcome["error"] = e
        finally:
            ours.close()

    thread = threading.Thread(target=add)
    thread.start()
    opened.wait()
    other.execute("BEGIN IMMEDIATE")
    locked.set()
    time.sleep(0.3)  # ours is now waiting on the lock (or read the table before it)
    assert thread.is_alive()  # the race is on: ours is blocked behind the other's lock
    other.execute(
        "INSERT INTO screens (content_key, path, started, added, label, versions) VALUES (?, ?, ?, ?, ?, ?)",
        (store._records(screen)[0], str(tmp_path / "n"), "2026-12-01T00:00:00", "now", "other", "{}"),
    )
    other.commit()
    thread.join()
    assert outcome == {"added": False}


def test_the_second_add_says_already_recorded(tmp_path):
    from conftest import zlbench

    night = _night(tmp_path / "n", 0.04)
    zlbench("history", "add", night, "--db", tmp_path / "h.sqlite", check=True)
    again = zlbench("history", "add", night, "--db", tmp_path / "h.sqlite")
    assert again.returncode == 0 and "already recorded" in again.stdout


# ---------------------------------------------------------------------------------------
# The small ones


def test_a_timeout_reason_counts_progress_up_to_the_timeout_not_past_it(tmp_path):
    import re

    from zlbench.batch import run_batch

    # tree_x ignores SIGTERM: the kill grace passes before its group is gone.
    result = run_batch(_config(tmp_path / "b", ["tree_x"], timeout_s=2, kill_grace_s=2.5, retries=0))
    reason = result.rows["tree_x"]["reason"]
    assert result.rows["tree_x"]["status"] == "timeout", reason
    before = int(re.search(r"last progress (\d+) s before", reason).group(1))
    assert before <= 2, reason


# The exit code of each, as README's table gives it: a usage error 2; run's refused
# preflight 3; history's database that cannot be used 1.
@pytest.mark.parametrize("args, code", [
    (["summary", "{loop}"], 2),
    (["report", "{loop}", "-o", "{tmp}/r.html"], 2),
    (["history", "add", "{loop}", "--db", "{tmp}/h.sqlite"], 2),
    (["history", "show", "--db", "{loop}"], 1),
    (["batch", "--backend", "cpu", "--ops", "abs", "--out", "{loop}", "--progress", "off"], 2),
    (["batch", "--backend", "cpu", "--ops", "abs", "--shape-file", "{loop}", "--out", "{tmp}/b"], 2),
    (["batch", "--backend", "cpu", "--ops", "abs", "--flaggems-dir", "{loop}", "--out", "{tmp}/b"], 2),
    (["run", "--backend", "cpu", "--op", "abs", "--shape-file", "{loop}", "--out", "{tmp}/r"], 3),
    (["run", "--backend", "cpu", "--op", "abs", "--run-dir", "{loop}"], 3),
    (["slurm", "status", "{loop}"], 2),
    (["slurm", "submit", "--shards", "2", "--out", "{loop}", "--dry-run"], 2),
    (["summary", "--ab", "{loop}", "{tmp}"], 2),
])
def test_a_symlink_loop_is_named_a_loop_in_one_line(tmp_path, args, code):
    from conftest import zlbench

    loop = tmp_path / "loop"
    os.symlink(tmp_path / "loop2", loop)
    os.symlink(loop, tmp_path / "loop2")
    proc = zlbench(*[a.format(loop=loop, tmp=tmp_path) for a in args])
    _no_traceback(proc)
    assert proc.returncode in (1, 2, 3), proc.stdout + proc.stderr
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert "symbolic link loop" in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    assert "does not exist" not in proc.stdout + proc.stderr


@pytest.mark.parametrize("mode", ["worker", "fresh"])
def test_an_operator_that_closes_its_output_is_told_by_more_than_exit_1(tmp_path, mode):
    corpus = _corpus(tmp_path / "corpus")
    text = (corpus / "benchmark" / "test_abs.py").read_text()
    (corpus / "benchmark" / "test_closer.py").write_text(
        text.replace("@pytest.mark.abs\ndef test_abs():\n", "@pytest.mark.closer\ndef test_closer():\n"
                     "    import os\n\n    os.close(1)\n    os.close(2)\n")
    )
    out = tmp_path / "b"
    proc = _batch("--flaggems-dir", corpus, "--out", out, "--ops", "closer", "--run-mode", mode,
                  "--retries", "0", "--fallback-dtypes", "none")
    _no_traceback(proc)
    row = _rows(out)["closer"]
    assert row["status"] == "failed", row
    assert "closed its output" in row["reason"] and "stdout and stderr" in row["reason"], row["reason"]


def test_a_run_dir_removed_after_its_operator_finished_is_noticed_by_the_batch(tmp_path):
    from zlbench.batch import run_batch

    batch = tmp_path / "b"
    result = run_batch(_config(batch, ["ok_a", "rm_z"]))
    # Measured, so the batch is ok; what it kept of ok_a is gone, and it says so below.
    assert result.exit_code == 0 and result.rows["ok_a"]["status"] == "ok"
    rows = _rows(batch)
    assert not (batch / "ok_a").exists(), "rm_z ran first: the test needs name order"
    assert "its run dir was removed after it finished" in rows["ok_a"]["notes"]
    assert "run dirs are gone" in (batch / "batch.log").read_text()
    again = run_batch(_config(batch, ["ok_a", "rm_z"], resume=True))
    assert again.rows["ok_a"]["status"] == "ok"


def test_a_batch_whose_every_run_dir_is_gone_says_so(tmp_path):
    import shutil

    from conftest import zlbench

    root = _night(tmp_path / "n", 0.04)
    shutil.rmtree(root / "abs")
    summary = zlbench("summary", root)
    _no_traceback(summary)
    assert "have no run dir here, so none of their rows are above: abs" in summary.stderr, summary.stderr
    added = zlbench("history", "add", root, "--db", tmp_path / "h.sqlite")
    _no_traceback(added)
    assert added.returncode == 1 and "counted ok have no run dir" in added.stderr, added.stderr


def test_the_storage_probe_names_a_read_only_batch_dir(read_only_dir):
    from zlbench.batch.storage import EnvironmentFailure, check_writable

    _, ro = read_only_dir
    with pytest.raises(EnvironmentFailure) as err:
        check_writable(ro)
    assert err.value.filename == str(ro) and "Read-only file system" in err.value.strerror

"""Bad input and damaged state: one-line errors (exit 2), never a traceback, never a
silent default; and the batch's own storage failing mid-run."""

import errno
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from zlbench import knobs
from zlbench.batch import BatchConfig, BatchError, command, run_batch
from zlbench import rundir
from zlbench.batch import driver
from zlbench.batch.execute import Stopper

FIXTURES = Path(__file__).parent / "fixtures" / "faulty_corpus"
STANDIN = [sys.executable, str(FIXTURES / "standin_run.py")]


def config(out, ops, **kw):
    base = dict(out=out, settings=knobs.resolve({"backend": "cpu"}, {}, names=knobs.MEASURE_KNOBS),
                ops=ops, devices=["0"], run_command=STANDIN, progress="off", kill_grace_s=0.5,
                run_mode="fresh")
    base.update(kw)
    return BatchConfig(**base)


def cli(args, cwd=None):
    proc = subprocess.run([sys.executable, "-m", "zlbench", *args], capture_output=True,
                          text=True, timeout=120, cwd=cwd)
    return proc.returncode, proc.stdout + proc.stderr


def one_line_error(out):
    lines = [ln for ln in out.strip().splitlines() if ln.strip()]
    assert "Traceback" not in out, out
    return lines


@pytest.mark.parametrize("args, flag", [
    (["--timeout", "inf"], "--timeout"), (["--timeout", "nan"], "--timeout"),
    (["--timeout", "1e400"], "--timeout"), (["--kill-grace", "inf"], "--kill-grace"),
    (["--op-timeout", "mm=1e400"], "--op-timeout"), (["--op-timeout", "mm=nan"], "--op-timeout"),
])
def test_non_finite_seconds_are_refused_at_parse_time(args, flag, tmp_path):
    code, out = cli(["batch", "--backend", "cpu", "--ops", "mm", "--out", str(tmp_path / "b"), *args])
    assert code == 2, out
    assert flag in out and "finite" in out
    one_line_error(out)
    assert not (tmp_path / "b").exists()


def test_non_finite_seconds_in_an_op_list_or_a_config_are_refused(tmp_path):
    oplist = tmp_path / "ops.txt"
    oplist.write_text("mm inf\n")
    code, out = cli(["batch", "--backend", "cpu", "--op-list", str(oplist), "--out", str(tmp_path / "b")])
    assert code == 2 and "not a finite number of seconds" in out, out
    for kw in (dict(timeout_s=float("inf")), dict(kill_grace_s=float("nan")),
               dict(op_timeouts={"ok_1": 1e308 * 10})):
        with pytest.raises(BatchError, match="finite"):
            run_batch(config(tmp_path / "c", ["ok_1"], **kw))


@pytest.mark.parametrize("devices", ["0,,x", "0,x", ",", "0,,1", "-1"])
def test_device_lists_with_holes_or_names_are_refused(devices, tmp_path):
    code, out = cli(["batch", "--backend", "cpu", "--ops", "mm", "--devices", devices,
                     "--out", str(tmp_path / "b")])
    assert code == 2 and "--devices" in out and "not a device number" in out, out
    one_line_error(out)


@pytest.mark.parametrize("name", ["plan.json", "ops_status.csv", "attempts.jsonl", "batch.log",
                                  "driver.json", "logs", "set-aside", "ops_status.csv.lock",
                                  "..", "../x", ".hidden", "a/b"])
def test_operator_names_that_collide_with_the_batch_are_refused(name, tmp_path):
    code, out = cli(["batch", "--backend", "cpu", "--ops", name, "--out", str(tmp_path / "b")])
    assert code == 2 and "is not an operator name" in out, out
    oplist = tmp_path / "ops.txt"
    oplist.write_text(f"{name}\n")
    code, out = cli(["batch", "--backend", "cpu", "--op-list", str(oplist), "--out", str(tmp_path / "c")])
    assert code == 2 and "is not an operator name" in out, out


def test_corpus_marks_that_are_not_operator_names_are_refused_not_run(tmp_path, monkeypatch):
    class Corpus:
        root = tmp_path

        def operators(self):
            return ["ok_a", "../../escaped", "plan.json"]

        def listing(self):  # every provider lists its corpus this way
            from zlbench.corpus.resolve import CorpusListing

            return CorpusListing(self.operators(), {})

    from zlbench import providers
    monkeypatch.setattr(providers, "make_provider", lambda settings: Corpus())
    batch = tmp_path / "deep" / "b"
    result = run_batch(config(batch, None))
    rows = rundir.StatusFile(batch).read()
    assert rows["ok_a"]["status"] == "ok"
    for bad in ("../../escaped", "plan.json"):
        assert rows[bad]["status"] == "failed" and "not a valid operator name" in rows[bad]["reason"]
    assert not (tmp_path / "escaped").exists() and not (batch / "plan.json").is_dir()
    assert result.exit_code == 1 and sorted(result.planned) == sorted(Corpus().operators())


@pytest.mark.parametrize("content, why", [
    ("[]", "a JSON array, not an object"), ("42", "a JSON number"), ('{"ops": 3}', "ops is a JSON number"),
    ('{"ops": [1]}', "without an operator name"), (b"\xff\xfe\x00\x01", "not valid JSON"),
])
def test_a_plan_of_the_wrong_type_is_a_one_line_error(content, why, tmp_path):
    batch = tmp_path / "b"
    batch.mkdir()
    path = batch / "plan.json"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    code, out = cli(["batch", "--resume", "--out", str(batch)])
    assert code == 2 and why in out, out
    one_line_error(out)


@pytest.mark.parametrize("content", [None, "null"])
def test_resume_without_a_plan_is_an_error_not_a_default_corpus_run(content, tmp_path):
    batch = tmp_path / "b"
    batch.mkdir()
    (batch / "driver.json").write_text("{}")
    if content is not None:
        (batch / "plan.json").write_text(content)
    why = "no plan.json there" if content is None else "a JSON null, not an object"
    with pytest.raises(BatchError, match=why):
        run_batch(config(batch, ["ok_1"], resume=True))
    code, out = cli(["batch", "--resume", "--out", str(batch)])
    assert code == 2 and why in out, out
    assert not (batch / "ok_1").exists() and not (batch / "ops_status.csv").exists()


def test_resume_with_a_subset_keeps_the_whole_plan(tmp_path):
    batch = tmp_path / "b"
    assert run_batch(config(batch, ["ok_1", "fail_x"])).exit_code == 1
    # Re-run only ok_1: the plan still holds fail_x, so a plain --resume retries it.
    run_batch(config(batch, ["ok_1"], resume=True))
    plan = json.loads((batch / "plan.json").read_text())
    assert [p["op"] for p in plan["ops"]] == ["fail_x", "ok_1"]
    again = run_batch(config(batch, [p["op"] for p in plan["ops"]], resume=True))
    assert again.exit_code == 1 and again.rows["fail_x"]["status"] == "failed"


def test_binary_state_files_and_op_lists_are_no_traceback(tmp_path):
    batch = tmp_path / "b"
    run_batch(config(batch, ["ok_1", "fail_x"]))
    (batch / "ops_status.csv").write_bytes(b"\x00\xff" * 500)
    (batch / "attempts.jsonl").write_bytes(b"\xff\xfe\x00" * 500 + b"\n[1, 2]\n")
    result = run_batch(config(batch, ["ok_1", "fail_x"], resume=True))
    assert result.rows["ok_1"]["status"] == "ok" and result.rows["fail_x"]["status"] == "failed"
    oplist = tmp_path / "ops.bin"
    oplist.write_bytes(b"\x00\x01\xff\xfe" * 100)
    code, out = cli(["batch", "--backend", "cpu", "--op-list", str(oplist), "--out", str(tmp_path / "c")])
    assert code == 2 and "--op-list" in out and "not a text file" in out, out
    one_line_error(out)


@pytest.mark.parametrize("where", ["file", "proc", "sys"])
def test_an_unusable_out_is_a_one_line_error(where, tmp_path):
    target = {"file": tmp_path / "f" / "b", "proc": Path("/proc/zlbench-batch"),
              "sys": Path("/sys/zlbench-batch/b")}[where]
    (tmp_path / "f").write_text("a file\n")
    code, out = cli(["batch", "--backend", "cpu", "--ops", "mm", "--out", str(target)])
    assert code == 2 and "--out" in out, out
    assert len(one_line_error(out)) == 1


def test_disk_full_stops_the_batch_with_a_one_line_error_and_keeps_what_finished(tmp_path, monkeypatch):
    batch = tmp_path / "b"
    real = rundir.write_atomic
    writes = []

    def full_after_two(path, text):
        writes.append(path)
        if Path(path).name == "ops_status.csv" and len([p for p in writes if Path(p).name == "ops_status.csv"]) > 1:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        return real(path, text)

    monkeypatch.setattr(rundir, "write_atomic", full_after_two)
    with pytest.raises(BatchError, match="No space left on device.*--resume --out"):
        run_batch(config(batch, ["ok_1", "ok_2", "ok_3"]))
    assert list(rundir.StatusFile(batch).read()) == ["ok_1"]        # what was written stays
    monkeypatch.setattr(rundir, "write_atomic", real)
    result = run_batch(config(batch, ["ok_1", "ok_2", "ok_3"], resume=True))
    assert result.exit_code == 0 and sorted(result.rows) == ["ok_1", "ok_2", "ok_3"]


def test_the_driver_waits_for_a_worker_whatever_is_alive_says():
    # After a KeyboardInterrupt out of Thread.join, is_alive() can read False while the
    # thread still stops its group. The driver waits on the worker's own done event.
    class Lying(threading.Thread):
        def is_alive(self):
            return False

    stopper = Stopper()
    finished = []

    done = threading.Event()

    def work():
        stopper.event.wait(10)
        time.sleep(0.3)                  # still stopping its group
        finished.append(True)
        done.set()

    worker = Lying(target=work, daemon=True)
    worker.done = done
    worker.start()
    threading.Timer(0.1, stopper.stop).start()
    driver._wait_for([worker], stopper, lambda *a, **k: None)
    assert finished == [True]
    stopper.close()


def test_wait_for_survives_ctrl_c_and_still_waits(monkeypatch):
    stopper = Stopper()
    done = threading.Event()
    calls = []

    class W:
        @staticmethod
        def join(timeout=None):
            pass

    class Ev:
        def __init__(self):
            self.n = 0

        def is_set(self):
            return done.is_set()

        def wait(self, timeout=None):
            self.n += 1
            if self.n == 1:
                raise KeyboardInterrupt
            threading.Timer(0.2, done.set).start() if self.n == 2 else None
            return done.wait(timeout)

    W.done = Ev()
    assert driver._wait_for([W], stopper, lambda line, show=False: calls.append(line)) is True
    assert stopper.stopped and done.is_set() and "interrupted" in calls[0]
    stopper.close()


def test_run_with_a_relative_out_records_the_plugins(tmp_path):
    code, out = cli(["run", "--op", "abs", "--dtypes", "float32", "--backend", "cpu",
                     "--out", "rel"], cwd=tmp_path)
    assert code == 0, out
    [run_dir] = (tmp_path / "rel").iterdir()
    identity = json.loads((run_dir / "run_identity.json").read_text())
    assert identity["plugins"], identity            # was {}: written below the corpus
    assert identity["run_dir"] == str(run_dir)


@pytest.mark.parametrize("flag", ["--out", "--run-dir"])
def test_run_with_an_unusable_out_fails_preflight(flag, tmp_path):
    (tmp_path / "f").write_text("x")
    code, out = cli(["run", "--op", "abs", "--backend", "cpu", flag, str(tmp_path / "f" / "x")])
    assert code == 3 and "PREFLIGHT_FAILED check=run_dir" in out, out
    assert "Traceback" not in out


@pytest.mark.skipif(bool(__import__("shutil").which("nvidia-smi")) or bool(__import__("glob").glob("/dev/nvidia[0-9]*")),
                    reason="this host has NVIDIA GPUs")
def test_cuda_run_without_a_gpu_fails_preflight_not_ok(tmp_path):
    code, out = cli(["run", "--op", "abs", "--backend", "cuda", "--device", "0", "--out", str(tmp_path)])
    assert code == 3 and "PREFLIGHT_FAILED check=device" in out and "no cuda device on this host" in out, out
    code, out = cli(["batch", "--backend", "cuda", "--devices", "0", "--ops", "abs", "--out", str(tmp_path / "b")])
    assert code == 2 and "no cuda device on this host" in out, out


def test_a_malformed_shape_file_is_refused_once_before_any_operator(tmp_path):
    bad = tmp_path / "shapes.yaml"
    bad.write_text("Benchmark: [unclosed\n")
    code, out = cli(["batch", "--backend", "cpu", "--ops", "abs,sum", "--shape-file", str(bad),
                     "--out", str(tmp_path / "b")])
    assert code == 2 and "--shape-file" in out and "not valid YAML" in out, out
    assert not (tmp_path / "b" / "attempts.jsonl").exists()
    bad.write_text("- 1\n- 2\n")
    code, out = cli(["run", "--op", "abs", "--backend", "cpu", "--shape-file", str(bad),
                     "--out", str(tmp_path / "r")])
    assert code == 3 and "PREFLIGHT_FAILED check=SHAPE_FILE" in out, out


def test_a_zlbench_folder_in_the_cwd_does_not_shadow_the_package_in_children(tmp_path):
    shadow = tmp_path / "zlbench"
    shadow.mkdir()
    (shadow / "__init__.py").write_text("raise ImportError('the checkout folder, not zlbench')\n")
    # As the console script starts: the cwd is not on sys.path of the driver itself.
    launcher = "import sys; del sys.path[0]; from zlbench.cli import main; main()"
    proc = subprocess.run([sys.executable, "-c", launcher, "batch", "--backend", "cpu", "--ops",
                           "abs", "--dtypes", "float32", "--out", "b", "--progress", "plain",
                           "--dismiss", "none"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert rundir.StatusFile(tmp_path / "b").read()["abs"]["status"] == "ok"


def test_children_that_cannot_import_zlbench_are_an_unusable_environment(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    (tmp_path / "zlbench").mkdir()
    (tmp_path / "zlbench" / "__init__.py").write_text("raise ImportError('broken install')\n")
    launcher = f"import sys; sys.path.insert(0, {os.environ.get('PYTHONPATH', '').split(os.pathsep)[0]!r}); " \
               "from zlbench.cli import main; main()"
    proc = subprocess.run([sys.executable, "-c", launcher, "batch", "--backend", "cpu", "--ops", "abs",
                           "--out", str(tmp_path / "b"), "--dismiss", "none"],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "cannot import zlbench" in proc.stderr and "Traceback" not in proc.stderr

"""summary and --ab on two real `zlbench batch` runs of the bundled sample corpus (CPU)."""

import csv
import json
import shutil
import subprocess
import sys

import pytest

from zlbench.summary import pair_runs, summarize

pytestmark = pytest.mark.slow
OPS = "abs,softmax"


@pytest.fixture(scope="module")
def two_batches(tmp_path_factory):
    pytest.importorskip("torch", reason="the sample corpus times torch operators")
    root = tmp_path_factory.mktemp("batches")
    outs = [root / "a", root / "b"]
    # Both at once: each is one process per operator on one CPU slot.
    procs = [subprocess.Popen([sys.executable, "-m", "zlbench", "batch", "--out", str(out),
                               "--ops", OPS, "--backend", "cpu", "--progress", "off"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for out in outs]
    for proc in procs:
        output, _ = proc.communicate(timeout=300)
        assert proc.returncode == 0, output
    return outs


def zlbench_summary(*args):
    return subprocess.run([sys.executable, "-m", "zlbench", "summary", *map(str, args)],
                          capture_output=True, text=True, timeout=60)


def test_summary_of_a_real_batch(two_batches):
    a, _ = two_batches
    done = zlbench_summary(a, "--format", "json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert {r["op"] for r in doc["rows"]} == {"abs", "softmax"}
    assert {r["dtype"] for r in doc["rows"]} == {"torch.float16", "torch.float32",
                                                  "torch.bfloat16"}
    # The CPU backend times directly; every row says so, from run_identity.json.
    assert {r["timer"] for r in doc["rows"]} == {"direct"}
    assert all(r["gems_ms"] > 0 and r["status"] == "SUCCESS" for r in doc["rows"])
    assert doc["issues"] == []
    assert {r["complete"] for r in doc["runs"]} == {True}
    with open(a / "summary.csv", newline="") as f:
        assert len(list(csv.DictReader(f))) == len(doc["rows"])


def test_ab_of_two_real_batches_pairs_every_row_without_a_caliber_mismatch(two_batches):
    a, b = two_batches
    result = pair_runs(a, b)
    assert len(result.pairs) == len(summarize(a).rows) > 0
    assert not result.only_a and not result.only_b and not result.not_comparable
    assert not result.caliber.mismatch, result.caliber
    assert [r.name for r in result.by_op] == ["abs", "softmax"]
    done = zlbench_summary("--ab", a, b, "--format", "markdown")
    assert done.returncode == 0, done.stderr
    assert "CALIBER MISMATCH" not in done.stdout
    assert done.stdout.rstrip().splitlines()[-1].startswith("Spread of the gains: median |gain|")


def test_ab_refuses_real_batches_once_a_caliber_knob_differs(two_batches, tmp_path):
    a, b = two_batches
    changed = tmp_path / "b"
    shutil.copytree(b, changed)
    ident_path = changed / "softmax" / "run_identity.json"
    ident = json.loads(ident_path.read_text())
    ident["repeat"] = 5
    ident["knobs"]["ZL_DIRECT_REPEAT"] = 5
    ident_path.write_text(json.dumps(ident))
    done = zlbench_summary("--ab", a, changed)
    assert done.returncode == 2 and done.stdout == ""  # refused: a usage error
    assert "[softmax] repeat: A=1 B=5" in done.stderr
    assert "[softmax] knobs.ZL_DIRECT_REPEAT: A=1 B=5" in done.stderr

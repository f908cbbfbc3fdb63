"""A real batch over the bundled sample corpus on CPU, two worker slots."""

import csv
import json

import pytest

from zlbench import knobs
from zlbench.batch import BatchConfig, run_batch
from zlbench.batch.plan import shard

SHAPES = """\
Benchmark:
  shapes: [[64, 64]]
  shape_desc: "M, N"
"""


@pytest.mark.parametrize("mode", ["worker", "fresh"])
def test_sample_corpus_batch(tmp_path, mode):
    shape_file = tmp_path / "shapes.yaml"
    shape_file.write_text(SHAPES)
    settings = knobs.resolve({"backend": "cpu", "dtypes": "float32", "shape_file": str(shape_file)},
                             {}, names=knobs.MEASURE_KNOBS)
    batch = tmp_path / "batch"
    ops = ["abs", "softmax"]
    assert len(set(shard(ops, ["0", "1"]).values())) == 2   # one per slot: they run in parallel
    result = run_batch(BatchConfig(out=batch, settings=settings, ops=ops, devices=["0", "1"],
                                   progress="off", timeout_s=300, run_mode=mode))
    assert result.exit_code == 0, (batch / "batch.log").read_text()
    with open(batch / "ops_status.csv", newline="") as f:
        rows = {r["operator"]: r for r in csv.DictReader(f)}
    plan = json.loads((batch / "plan.json").read_text())
    assert plan["settings"]["dtypes"] == ["float32"] and plan["backend"] == "cpu"
    for op in ops:
        row = rows[op]
        assert (row["status"], row["attempts"], row["dtype_level"], row["exit_code"]) == ("ok", "1", "0", "0")
        assert row["run_mode"] == mode
        assert row["run_dir"] == op and (batch / op / ".complete").is_file()
        identity = json.loads((batch / op / "run_identity.json").read_text())
        assert identity["device"]["index"] == row["device"] == shard(ops, ["0", "1"])[op]
        assert identity["dtypes"] == ["float32"] and row["timer"] == identity["timer"] == "direct"
        log = (batch / op / "run.log").read_text()
        assert f"Operator: {op}  Performance Test (dtype=torch.float32" in log
    if mode == "fresh":
        # The two slots overlapped: the batch took less than the two runs back to back.
        # (A worker batch's wall is mostly its workers' one-time imports.)
        total = sum(float(rows[op]["total_s"]) for op in ops)
        assert result.wall_s < total

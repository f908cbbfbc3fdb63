"""Sharding, op lists, dismiss lists and the failure classification: pure functions."""

import json
import os
import subprocess
import sys

import pytest

from zlbench.batch import classify
from zlbench.batch.execute import dtype_ladder, knob_args
from zlbench.batch.oplist import load_dismiss, parse_op_timeouts, parse_ops_flag, read_op_list
from zlbench.batch.plan import device_order, make_plan, shard
from zlbench.batch.state import BatchError
from zlbench import knobs

OPS = [f"op_{i}" for i in range(200)]
DISMISS_YAML = """dismissed:
  - operator: abs
    reason: upstream bug 123
    verified: {date: 2026-08-01, backend: cpu, seen: wrong result}
"""


def test_shard_is_independent_of_hash_seed_and_order():
    code = ("import json; from zlbench.batch.plan import shard; "
            f"print(json.dumps(shard({OPS!r}, ['0', '1', '2'])))")
    outputs = set()
    for seed in ("1", "2", "random"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        outputs.add(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                                   text=True, check=True).stdout)
    assert len(outputs) == 1
    assert shard(list(reversed(OPS)), ["2", "0", "1"]) == shard(OPS, ["0", "1", "2"])
    # A new operator does not move the others.
    assert {k: v for k, v in shard(OPS + ["new_op"], ["0", "1"]).items() if k != "new_op"} == \
        shard(OPS, ["0", "1"])


def test_shard_uses_every_device_and_numeric_order():
    where = shard(OPS, ["10", "9", "2"])
    assert set(where.values()) == {"2", "9", "10"}
    assert device_order(["10", "9", "2", "9"]) == ["2", "9", "10"]


def test_plan_leaves_out_dismissed_and_applies_timeouts(tmp_path):
    plan = make_plan(["a", "b", "c"], ["0", "1"], {"b": "wrong results", "zz": "not in list"},
                     60.0, {"c": 5.0})
    assert [p.op for p in plan.ops] == ["a", "c"]
    assert plan.dismissed == {"b": "wrong results"}
    by = {p.op: p for p in plan.ops}
    assert by["a"].timeout_s == 60.0 and by["c"].timeout_s == 5.0
    assert sorted(p.op for q in plan.queues().values() for p in q) == ["a", "c"]


def test_replay_per_op(tmp_path):
    (tmp_path / "a" / "autotune_records").mkdir(parents=True)
    (tmp_path / "a" / "autotune_records" / "k.json").write_text("{}")
    (tmp_path / "b" / "autotune_records").mkdir(parents=True)  # empty: no records
    plan = make_plan(["a", "b", "c"], ["0"], {}, None, {}, tmp_path, {"c": tmp_path / "own"})
    by = {p.op: p for p in plan.ops}
    assert by["a"].replay_from == str((tmp_path / "a" / "autotune_records").resolve())
    assert by["a"].replay_note is None
    assert by["b"].replay_from is None
    assert by["b"].replay_note == "AUTOTUNE_REPLAY_NONE op=b reason=no_records"
    assert by["c"].replay_from == str((tmp_path / "own").resolve())


def test_op_list_file_and_flags(tmp_path):
    path = tmp_path / "ops.txt"
    path.write_text("# nightly\nabs\nmm  1800  # slow\n\nsoftmax\n")
    assert read_op_list(path) == (["abs", "mm", "softmax"], {"mm": 1800.0})
    path.write_text("abs 10 extra\n")
    with pytest.raises(BatchError, match=r"ops.txt:1"):
        read_op_list(path)
    assert parse_ops_flag("a,b c") == ["a", "b", "c"]
    with pytest.raises(BatchError, match="--ops"):
        parse_ops_flag("../etc")
    assert parse_op_timeouts(["mm=1800", "abs=0"]) == {"mm": 1800.0, "abs": 0.0}
    with pytest.raises(BatchError, match="OP=SECONDS"):
        parse_op_timeouts(["mm"])


def test_dismiss_list(tmp_path):
    path = tmp_path / "dismiss.yaml"
    path.write_text(DISMISS_YAML)
    entries = load_dismiss(path)
    assert entries["abs"] == "upstream bug 123"
    path.write_text("dismissed:\n  - operator: abs\n")
    with pytest.raises(BatchError, match=r"(?s)--dismiss .*reason"):
        load_dismiss(path)


def test_dtype_ladder_skips_repeats():
    assert dtype_ladder(None, [("float32",), ("float16",)]) == [
        (0, None), (1, ("float32",)), (2, ("float16",))]
    assert dtype_ladder(("float32",), [("float32",), ("float16",)]) == [
        (0, ("float32",)), (2, ("float16",))]
    assert dtype_ladder(None, []) == [(0, None)]


def test_knob_args_spell_out_every_value():
    settings = knobs.resolve({"level": "comprehensive", "dtypes": "float16,bfloat16"}, {},
                             names=knobs.MEASURE_KNOBS)
    args = knob_args(settings, skip=("backend",))
    assert args[args.index("--level") + 1] == "comprehensive"
    assert args[args.index("--dtypes") + 1] == "float16,bfloat16"
    assert args[args.index("--use-flagtune") + 1] == "0"
    assert "--backend" not in args and "--replay-from" not in args


@pytest.mark.parametrize("rc,timed_out,tail,status,transient", [
    (0, False, [], "ok", False),
    (1, False, ["E   ValueError: bad shape", "=== 1 failed in 0.3s ==="], "failed", False),
    (1, False, ["E   RuntimeError: CUDA error: unspecified launch failure"], "failed", True),
    (139, False, ["Fatal Python error: Segmentation fault"], "crashed", True),
    (-9, False, [], "crashed", True),
    (None, True, ["hanging"], "timeout", True),
    (3, False, ["PREFLIGHT_FAILED check=torch reason=missing"], "failed", False),
    (5, False, ["no tests ran"], "skipped", False),
    (0, False, ["==== 2 skipped, 1 deselected in 0.12s ===="], "skipped", False),
    (0, False, ["==== 1 passed, 1 skipped in 0.12s ===="], "ok", False),
])
def test_classify(rc, timed_out, tail, status, transient):
    outcome = classify.classify(rc, timed_out, tail)
    assert outcome.status == status
    assert outcome.looks_transient == transient


def test_signature_ignores_volatile_parts():
    a = classify.classify(1, False, ["E   RuntimeError: CUDA error at 0x7f00aa after 1.25s"])
    b = classify.classify(1, False, ["E   RuntimeError: CUDA error at 0x7f11bb after 2.5s"])
    c = classify.classify(1, False, ["E   RuntimeError: CUDA error: out of memory"])
    assert a.signature == b.signature != c.signature
    preflight = classify.classify(3, False, ['PREFLIGHT_FAILED check=torch reason="torch is not importable"'])
    assert preflight.reason == "preflight failed (torch): torch is not importable"
    assert "SIGSEGV" in classify.classify(-11, False, []).reason


# -- --balance-from: longest first, deterministic -----------------------------------

def _realistic_durations(n=1060, seed=15):
    """A night like the H200's: most operators 10-30 s, a long tail of autotuned ones
    (conv3d ~75 s, mm ~7 min)."""
    import random

    rng = random.Random(seed)
    out = {f"op_{i:04d}": round(rng.lognormvariate(2.8, 0.5), 2) for i in range(n)}
    out.update({"mm": 430.0, "conv3d": 75.0, "bmm": 260.0, "addmm": 240.0, "conv2d": 120.0})
    return out


def test_balance_is_deterministic_and_independent_of_order_and_hash_seed():
    from zlbench.batch.plan import balance

    durations = _realistic_durations(300)
    ops = list(durations)
    where = balance(ops, ["0", "1", "2", "3"], durations)
    assert balance(list(reversed(ops)), ["3", "1", "0", "2"], dict(reversed(list(durations.items())))) == where
    code = ("import json, sys; from zlbench.batch.plan import balance; d = json.load(sys.stdin); "
            "print(json.dumps(balance(sorted(d, key=hash), ['0','1','2','3'], d), sort_keys=True))")
    outputs = set()
    for seed in ("1", "2", "3"):
        outputs.add(subprocess.run([sys.executable, "-c", code], input=json.dumps(durations),
                                   env={**os.environ, "PYTHONHASHSEED": seed}, capture_output=True,
                                   text=True, check=True).stdout)
    assert outputs == {json.dumps(where, sort_keys=True) + "\n"}


def test_balance_breaks_ties_by_name():
    from zlbench.batch.plan import balance

    # Four equal operators on two devices: b and d never share with their equals' order.
    where = balance(["d", "c", "b", "a"], ["0", "1"], {"a": 1.0, "b": 1.0, "c": 1.0, "d": 1.0})
    assert where == {"a": "0", "b": "1", "c": "0", "d": "1"}


@pytest.mark.parametrize("devices", [2, 4, 8])
def test_balanced_makespan_within_10_percent_of_the_bound(devices):
    from zlbench.batch.plan import balance, makespan, shard

    durations = _realistic_durations()
    ids = [str(i) for i in range(devices)]
    bound = max(sum(durations.values()) / devices, max(durations.values()))
    balanced = makespan(balance(list(durations), ids, durations), durations)
    assert bound <= balanced <= 1.10 * bound
    # The stable hash, for scale: balancing is what brings the night down.
    hashed = makespan(shard(list(durations), ids), durations)
    assert balanced <= hashed


def test_unknown_operators_are_planned_at_the_median():
    from zlbench.batch.plan import estimated_durations

    est = estimated_durations(["a", "b", "new"], {"a": 10.0, "b": 30.0, "gone": 99.0})
    assert est == {"a": 10.0, "b": 30.0, "new": 20.0}


def test_make_plan_balances_from_durations_and_records_expectations():
    plan = make_plan(["a", "b", "c", "d"], ["0", "1"], {"d": "dismissed"}, 60, {},
                     durations={"a": 100.0, "b": 60.0, "c": 50.0})
    assert {p.op: p.device for p in plan.ops} == {"a": "0", "b": "1", "c": "1"}
    assert plan.expected == {"a": 100.0, "b": 60.0, "c": 50.0}


def test_read_durations_refuses_a_dir_without_ops_status(tmp_path):
    from zlbench.batch.state import read_durations

    with pytest.raises(BatchError, match="--balance-from .*no ops_status.csv"):
        read_durations(tmp_path)
    (tmp_path / "ops_status.csv").write_text(
        "operator,status,total_s\nabs,ok,12.5\nmm,dismissed,\nsum,failed,40\n")
    assert read_durations(tmp_path) == {"abs": 12.5, "sum": 40.0}


def test_balance_composes_with_host_shards_shard_first_then_devices():
    from zlbench.batch.plan import HostShard, balance

    durations = _realistic_durations(200)
    ops = list(durations)
    for k in range(3):
        host = HostShard(k, 3)
        plan = make_plan(ops, ["0", "1"], {}, 60, {}, host=host, durations=durations)
        mine = [op for op in ops if host.holds(op)]
        # The host shard is the hash's; only the placement within it is balanced.
        assert sorted(p.op for p in plan.ops) == sorted(mine)
        assert {p.op: p.device for p in plan.ops} == balance(mine, ["0", "1"], durations)

"""Parallel warmup decisions (zlbench.autotune_sweep): static shape keys on both FlagGems
layouts, refusals, shard planning, device mapping, shard command/env, merging."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from zlbench import autotune_records as ar
from zlbench import autotune_sweep as w
from zlbench.markers import PARALLEL_WARMUP_REFUSED, parse_marker

FIXTURES = Path(__file__).parent / "fixtures"
HEAD = FIXTURES / "flaggems_head"
V502 = FIXTURES / "flaggems_v502"


def shapes_of(root):
    return yaml.safe_load((root / "benchmark" / "core_shapes.yaml").read_text())


def keys(resolutions):
    return {r.test: (r.key, r.candidates_tried) for r in resolutions}


# ---- static shape keys -----------------------------------------------------------

def test_head_mm_reads_blas_class_key_not_the_op_name():
    shapes = shapes_of(HEAD)
    assert "mm" not in shapes  # an op-name lookup alone finds nothing for BLAS
    found = keys(w.resolve_keys(HEAD, ["benchmark/test_mm.py"], "mm", shapes))
    assert found == {
        "benchmark/test_mm.py::test_mm": ("BlasBenchmark", ["mm", "BlasBenchmark"]),
        "benchmark/test_mm.py::test_mm_self_transpose_benchmark":
            ("mm_self_transpose", ["mm_self_transpose"]),
    }


def test_head_class_chain_walks_past_unlisted_classes():
    shapes = shapes_of(HEAD)
    res = w.resolve_keys(HEAD, ["benchmark/test_abs.py::test_abs"], "", shapes)
    assert [(r.key, r.problem) for r in res] == [("UnaryPointwiseBenchmark", None)]
    assert res[0].candidates_tried[0] == "abs"


def test_v502_marks_inside_parametrize_select_the_mm_case():
    shapes = shapes_of(V502)
    found = keys(w.resolve_keys(V502, ["benchmark/test_blas_perf.py"], "mm", shapes))
    assert found == {
        "benchmark/test_blas_perf.py::test_blas_benchmark": ("BlasBenchmark", ["mm", "BlasBenchmark"]),
        "benchmark/test_blas_perf.py::test_mm_self_transpose_benchmark":
            ("mm_self_transpose", ["mm_self_transpose"]),
    }


def test_v502_node_with_param_id_takes_the_operator_from_the_id():
    node = "benchmark/test_blas_perf.py::test_blas_benchmark[bmm-torch_op0-input_fn0-bench_cls0]"
    res = w.resolve_keys(V502, [node], "", shapes_of(V502))
    assert [(r.op, r.key, r.candidates_tried) for r in res] == [("bmm", "BlasBenchmark",
                                                                 ["bmm", "BlasBenchmark"])]


def test_total_miss_lists_candidates_and_refuses():
    shapes = {k: v for k, v in shapes_of(HEAD).items() if k not in ("BlasBenchmark", "Benchmark")}
    res = w.resolve_keys(HEAD, ["benchmark/test_mm.py::test_mm"], "", shapes)
    assert res[0].key is None and res[0].candidates_tried == ["mm", "BlasBenchmark", "Benchmark"]
    refusal = w.refusal_before_launch("core", "record", None, res, w.shapes_by_key(res, shapes))
    assert refusal.reason == w.NO_SHAPE_KEY
    marker = parse_marker(refusal.marker())
    assert marker.name == PARALLEL_WARMUP_REFUSED
    assert marker.fields == {"reason": "no_shape_key", "test": "benchmark/test_mm.py::test_mm",
                             "tried": "mm,BlasBenchmark,Benchmark"}


def test_set_shapes_override_refuses():
    res = w.resolve_keys(HEAD, ["benchmark/test_fft.py"], "fft", shapes_of(HEAD))
    assert [(r.key, r.shapes_from) for r in res] == [(None, "FFTBenchmark.set_shapes")]
    refusal = w.refusal_before_launch("core", "record", None, res, {})
    assert refusal.reason == w.SET_SHAPES_OVERRIDE
    assert refusal.fields["shapes_from"] == "FFTBenchmark.set_shapes"


@pytest.mark.parametrize("args, markexpr", [
    (["benchmark"], "mm"),                       # a directory: too broad to resolve
    (["benchmark/test_mm.py"], "mm or abs"),     # not one operator
    (["benchmark/test_nope.py"], "mm"),
    ([], "mm"),
])
def test_unresolvable_selections_refuse_as_no_shape_key(args, markexpr):
    shapes = shapes_of(HEAD)
    res = w.resolve_keys(HEAD, args, markexpr, shapes)
    assert any(r.problem for r in res)
    refusal = w.refusal_before_launch("core", "record", None, res, w.shapes_by_key(res, shapes))
    assert refusal is not None and refusal.reason == w.NO_SHAPE_KEY


# ---- refusals before launch ----------------------------------------------------

def _good():
    res = [w.Resolution("benchmark/test_mm.py::test_mm", "mm", "BlasBenchmark", ["mm", "BlasBenchmark"])]
    return res, {"BlasBenchmark": [[1, 2, 3, 4]]}


@pytest.mark.parametrize("level, mode, replay_from, reason", [
    ("core", "record", None, None),
    ("comprehensive", "record", None, w.LEVEL_COMPREHENSIVE),
    (None, "record", None, w.LEVEL_COMPREHENSIVE),   # FlagGems' default level
    ("core", "replay", "/r", w.REPLAY_REQUESTED),
    ("core", "record", "/r", w.REPLAY_REQUESTED),
    ("core", "off", None, w.AUTOTUNE_OFF),
])
def test_refusal_before_launch(level, mode, replay_from, reason):
    res, by_key = _good()
    refusal = w.refusal_before_launch(level, mode, replay_from, res, by_key)
    assert (refusal.reason if refusal else None) == reason


def test_key_without_shapes_refuses():
    res, _ = _good()
    assert w.refusal_before_launch("core", "record", None, res, {"BlasBenchmark": []}).reason == w.NO_SHAPES


def test_first_failing_shard_is_named():
    logs = [Path(f"/w/shard-{i}/shard.log") for i in range(3)]
    assert w.first_failure([0, 0, 0], logs) is None
    refusal = w.first_failure([0, -9, 1], logs)
    fields = parse_marker(refusal.marker()).fields
    assert (fields["reason"], fields["shard"], fields["rc"]) == ("shard_failed", "1", "-9")


def test_parse_gpus():
    # Read through the knobs table, so a process with the plugin off never imports
    # zlbench.autotune_sweep.
    from zlbench import knobs

    def parse_gpus(text):
        return knobs.env_value("parallel_warmup_gpus", {} if text is None else {"PARALLEL_WARMUP_GPUS": text})

    assert [parse_gpus(v) for v in (None, "", " 0 ", "2")] == [0, 0, 0, 2]
    with pytest.raises(ValueError):
        parse_gpus("-1")
    with pytest.raises(ValueError):
        parse_gpus("two")


# ---- devices -------------------------------------------------------------------

def test_devices_are_the_callers_values_never_bare_indices():
    env = {"ZL_VISIBLE_KEY": "CUDA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES": "6",
           "ZL_WARMUP_DEVICES": "6, 7", "ZL_DEVICES": "0,1"}
    key, pool = w.device_pool(env)
    assert (key, pool) == ("CUDA_VISIBLE_DEVICES", ["6", "7"])
    assert w.shard_devices(pool, 2) == ["6", "7"]
    assert w.shard_devices(pool, 3) == ["6", "7", "6"]


def test_without_a_pool_shards_stay_on_the_runs_own_device():
    env = {"ZL_VISIBLE_KEY": "HIP_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES": "3", "ZL_DEVICES": "0"}
    assert w.device_pool(env) == ("HIP_VISIBLE_DEVICES", ["3"])
    assert w.device_pool({}) == (None, [])
    assert w.shard_devices([], 2) == [None, None]


# ---- shards --------------------------------------------------------------------

def test_round_robin_covers_every_shape_of_every_key():
    by_key = {"BlasBenchmark": [[i] for i in range(5)], "mm_self_transpose": [[10], [11]]}
    shards = w.plan_shards(by_key, 2)
    assert shards == [
        {"BlasBenchmark": [[0], [2], [4]], "mm_self_transpose": [[11]]},
        {"BlasBenchmark": [[1], [3]], "mm_self_transpose": [[10]]},
    ]
    # The deal runs on across keys: mm's 5 + 9 shapes split 7/7, not 8/6.
    mm = {"BlasBenchmark": [[i] for i in range(5)], "mm_self_transpose": [[i] for i in range(10, 19)]}
    assert [sum(map(len, s.values())) for s in w.plan_shards(mm, 2)] == [7, 7]
    assert [sum(map(len, s.values())) for s in w.plan_shards(mm, 4)] == [4, 4, 3, 3]
    for n in range(1, 8):
        planned = w.plan_shards(by_key, n)
        assert len(planned) == min(n, 5)
        for key, listed in by_key.items():
            got = sorted(tuple(s) for shard in planned for s in shard[key])
            assert set(got) == {tuple(s) for s in listed}      # no holes
            if len(listed) >= len(planned):                    # no duplicates unless short
                assert got == sorted(tuple(s) for s in listed)
            assert all(shard[key] for shard in planned)  # never an empty shape list


def test_shard_shape_file_keeps_other_keys_and_the_original():
    shapes = shapes_of(HEAD)
    before = yaml.safe_dump(shapes)
    data = w.shard_shape_data(shapes, {"BlasBenchmark": [[2, 384, 384, 384]]})
    back = yaml.safe_load(yaml.safe_dump(data, sort_keys=False))
    assert back["BlasBenchmark"] == {"shapes": [[2, 384, 384, 384]], "shape_desc": "B, M, N, K"}
    assert set(back) == set(shapes)
    assert back["UnaryPointwiseBenchmark"] == shapes["UnaryPointwiseBenchmark"]
    assert yaml.safe_dump(shapes) == before


def test_shard_args_swap_shape_file_and_timing_keep_selection():
    args = ["-s", "-p", "zlbench.plugins.autotune", "benchmark/test_mm.py", "-m", "mm", "--level",
            "core", "--mode", "kernel", "--dtypes", "float16", "--shape_file=old.yaml",
            "--warmup", "500", "--color=yes"]
    out = w.shard_args(args, Path("/w/s0.yaml"), fast_timing=True)
    assert out == ["-s", "-p", "zlbench.plugins.autotune", "benchmark/test_mm.py", "-m", "mm",
                   "--level", "core", "--mode", "kernel", "--dtypes", "float16",
                   "--warmup", "1", "--iter", "1", "--shape_file", "/w/s0.yaml", "--color=no"]
    slow = w.shard_args(["x.py", "--shape_file", "a", "--warmup", "5"], Path("b"), fast_timing=False)
    assert slow == ["x.py", "--warmup", "5", "--shape_file", "b", "--color=no"]
    # The run's --record json file is its own: a shard writing it too would race the others.
    recorded = w.shard_args(["x.py", "--record", "json", "--output", "/r/performance_result.json"],
                            Path("b"), fast_timing=False)
    assert recorded == ["x.py", "--shape_file", "b", "--color=no"]
    assert w.option_value(args, "--level") == "core"
    assert w.option_value(["--level=comprehensive"], "--level") == "comprehensive"


def test_shard_env_records_on_its_device_without_recursion():
    env = {"ZL_RUN_DIR": "/r", "ZL_AUTOTUNE_MODE": "replay", "REPLAY_FROM": "/old",
           "PARALLEL_WARMUP_GPUS": "2", "CUDA_VISIBLE_DEVICES": "6", "KEEP": "1"}
    out = w.shard_env(env, Path("/r/warmup/shard-1"), "CUDA_VISIBLE_DEVICES", "7")
    assert out == {"ZL_RUN_DIR": "/r/warmup/shard-1", "ZL_AUTOTUNE_MODE": "record",
                   "CUDA_VISIBLE_DEVICES": "7", "KEEP": "1", "ZL_HOST_RUNS": "1",
                   "ZL_GRAPH_TILE_CACHE": "off"}  # a sweep's timings keep no tile
    assert env["REPLAY_FROM"] == "/old"  # the caller's mapping is left alone
    assert w.sqlite_dir(out) is None
    # The shards run at once: each compile pool takes its share of the run's CPUs.
    shared_host = w.shard_env({**env, "ZL_HOST_RUNS": "2"}, Path("/r/warmup/shard-1"), None, None, shards=4)
    assert shared_host["ZL_HOST_RUNS"] == "8"


def test_isolated_tuner_cache_gives_each_shard_its_own_db():
    env = {"ZL_ISOLATE_TUNER_CACHE": "1", "FLAGGEMS_CACHE_DIR": "/tmp/iso/flaggems",
           "FLAGGEMS_DB_URL": "sqlite:////tmp/iso/flaggems/config_cache/TunedConfig.db"}
    out = w.shard_env(env, Path("/r/warmup/shard-1"), None, None)
    assert out["FLAGGEMS_CACHE_DIR"] == "/tmp/iso/flaggems/warmup-shard-1"
    assert out["FLAGGEMS_DB_URL"] == "sqlite:////tmp/iso/flaggems/warmup-shard-1/config_cache/TunedConfig.db"
    assert w.sqlite_dir(out) == Path("/tmp/iso/flaggems/warmup-shard-1/config_cache")
    shared = {"FLAGGEMS_CACHE_DIR": "/home/u/.flaggems"}  # a shared cache stays shared
    kept = w.shard_env(shared, Path("/r/warmup/shard-0"), None, None)
    assert kept["FLAGGEMS_CACHE_DIR"] == "/home/u/.flaggems"


# ---- merging -------------------------------------------------------------------

def _config(block, warps=4, hook=False):
    return {"kwargs": {"BLOCK": block}, "num_warps": warps, "num_stages": 3, "num_ctas": 1,
            "maxnreg": None, "has_pre_hook": hook}


def _records(kernel, entries):
    rec = ar.KernelRecords(kernel, ar.LIBTUNER, "LibTuner", ["K"], "0")
    for k, cfg in entries.items():
        rec.put([k], cfg, ar.ORIGIN_TUNED)
    return {kernel: rec}


def test_merge_counts_keys_whose_winner_differs_and_keeps_the_lowest_shard():
    shard0 = {**_records("mm", {64: _config(32), 128: _config(32)}), **_records("add", {1: _config(8)})}
    shard1 = _records("mm", {64: _config(64), 256: _config(32)})
    shard2 = _records("mm", {64: _config(128), 128: _config(32, hook=True)})  # hook alone: same launch
    merge = w.merge_records([shard0, shard1, shard2])
    assert merge.keys == 4
    assert merge.conflicts == [("mm", ar.key_id([64]))]
    assert merge.records["mm"].entries[ar.key_id([64])]["config"] == _config(32)
    assert merge.warning() == ("WARNING: parallel warmup: 1 of 4 keys chose different configs "
                               "on different shards")
    agreed = w.merge_records([shard0, shard0])
    assert agreed.conflicts == []
    assert not agreed.warning().startswith("WARNING") and "0 of 3 keys" in agreed.warning()


def test_merged_dir_is_a_records_dir_replay_can_load(tmp_path):
    dirs = []
    for i, recs in enumerate([_records("mm", {64: _config(32)}), _records("mm", {128: _config(64)})]):
        d = tmp_path / f"shard-{i}" / "autotune_records"
        for rec in recs.values():
            ar.write_records(d, rec)
        dirs.append(d)
    merge = w.load_and_merge(dirs + [tmp_path / "missing"])
    assert w.refusal_after_merge(merge) is None
    loaded, problems = ar.load_records(w.write_merged(merge, tmp_path / "merged"))
    assert problems == [] and sorted(loaded["mm"].entries) == sorted([ar.key_id([64]), ar.key_id([128])])


def test_unreadable_or_empty_shard_records_refuse(tmp_path):
    bad = tmp_path / "shard-0"
    bad.mkdir()
    (bad / "mm.json").write_text("{not json")
    assert w.refusal_after_merge(w.load_and_merge([bad])).reason == w.RECORDS_UNREADABLE
    assert w.refusal_after_merge(w.load_and_merge([tmp_path / "none"])).reason == w.NO_RECORDS

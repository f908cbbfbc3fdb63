"""Record format, key mapping, replay decisions and coverage (zlbench.autotune_records)."""

from __future__ import annotations

import json

import pytest

from zlbench import autotune_records as ar


class dtype:  # noqa: N801 - named like torch.dtype / triton.language.dtype on purpose
    def __init__(self, name):
        self.name = name

    def __str__(self):
        return self.name


class Config:
    """Shaped like triton.Config."""

    def __init__(self, kwargs, num_warps=4, num_stages=3, num_ctas=1, maxnreg=None, pre_hook=None):
        self.kwargs = kwargs
        self.num_warps, self.num_stages, self.num_ctas = num_warps, num_stages, num_ctas
        self.maxnreg, self.pre_hook = maxnreg, pre_hook

    def all_kwargs(self):
        out = {**self.kwargs, "num_warps": self.num_warps, "num_ctas": self.num_ctas,
               "num_stages": self.num_stages}
        if self.maxnreg is not None:
            out["maxnreg"] = self.maxnreg
        return out


def hook(nargs):
    pass


# ---- keys -----------------------------------------------------------------------

def test_key_id_survives_json_round_trip():
    key = (1024, 512, True, "torch.float16", dtype("fp16"), (3, "x"), 2.5, None)
    text = json.dumps(ar.encode_key(key))
    assert ar.key_id(json.loads(text)) == ar.key_id(key)


def test_key_id_tells_bool_from_int_and_dtype_from_its_text():
    assert ar.key_id((1,)) != ar.key_id((True,))
    assert ar.key_id((dtype("torch.float16"),)) != ar.key_id(("torch.float16",))
    assert ar.key_id((1, 2)) != ar.key_id((2, 1))


def test_torch_dtype_encodes_by_name():
    torch = pytest.importorskip("torch")
    assert ar.encode_value(torch.float16) == {"dtype": "torch.float16"}
    assert ar.key_id((64, torch.bfloat16)) == ar.key_id(json.loads(json.dumps([64, {"dtype": "torch.bfloat16"}])))


# ---- configs --------------------------------------------------------------------

def test_encode_config_fields():
    enc = ar.encode_config(Config({"BLOCK_M": 128, "BLOCK_N": 64}, num_warps=8, num_stages=4,
                                  maxnreg=128, pre_hook=hook))
    assert enc == {"kwargs": {"BLOCK_M": 128, "BLOCK_N": 64}, "num_warps": 8, "num_stages": 4,
                   "num_ctas": 1, "maxnreg": 128, "has_pre_hook": True}
    assert ar.encode_config(Config({}))["has_pre_hook"] is False


def test_extra_launch_options_are_kept():
    cfg = Config({"B": 1})
    cfg.all_kwargs = lambda: {"B": 1, "num_warps": 4, "num_ctas": 1, "num_stages": 3,
                              "num_buffers_warp_spec": 2}
    assert ar.encode_config(cfg)["extra"] == {"num_buffers_warp_spec": 2}


def test_matching_config_is_the_tuners_own_object_with_its_hook():
    configs = [Config({"B": 32}, pre_hook=hook), Config({"B": 64}, pre_hook=hook),
               Config({"B": 64}, num_warps=8, pre_hook=hook)]
    recorded = ar.encode_config(Config({"B": 64}))  # as rebuilt from a DB: no hook
    index = ar.index_configs(configs)  # what the plugin looks recorded configs up in
    assert index.get(ar.config_id(recorded)) is configs[1]
    assert index.get(ar.config_id(ar.encode_config(Config({"B": 128})))) is None


def test_build_config_from_json():
    enc = json.loads(json.dumps(ar.encode_config(Config({"B": 16}, num_warps=2, num_stages=5))))
    cfg = ar.build_config(enc, Config)
    assert (cfg.kwargs, cfg.num_warps, cfg.num_stages, cfg.maxnreg) == ({"B": 16}, 2, 5, None)


# ---- replay decision ------------------------------------------------------------

def _entry(has_hook):
    return {"key": [1], "config": {"kwargs": {}, "has_pre_hook": has_hook}, "origin": "tuned"}


@pytest.mark.parametrize("entry,kind,matched,expected", [
    (None, ar.LIBTUNER, False, (False, ar.KEY_MISSING, False)),
    (_entry(True), ar.LIBTUNER, True, (True, None, True)),
    (_entry(True), ar.LIBTUNER, False, (False, ar.PRE_HOOK_UNMATCHED, False)),
    (_entry(True), ar.AUTOTUNER, True, (False, ar.PRE_HOOK_DROPPED, False)),
    (_entry(False), ar.AUTOTUNER, False, (True, None, False)),
    (_entry(False), ar.AUTOTUNER, True, (True, None, True)),
])
def test_choose_replay(entry, kind, matched, expected):
    c = ar.choose_replay(entry, kind, matched)
    assert (c.inject, c.reason, c.use_original) == expected


def test_compile_failure_by_class_name():
    class OutOfResources(Exception):
        pass

    class Sub(OutOfResources):
        pass

    assert ar.is_compile_failure(Sub())
    assert not ar.is_compile_failure(RuntimeError("CUDA error"))


# ---- files ----------------------------------------------------------------------

def _records():
    rec = ar.KernelRecords("flag_gems.ops.mm.mm_kernel", ar.LIBTUNER, "DefaultLibTunerImpl",
                           ["M", "N", "K"], "0")
    rec.put((256, 256, 256, "torch.float16"), ar.encode_config(Config({"B": 64})), ar.ORIGIN_TUNED)
    rec.put((128, 128, 128, "torch.float16"), ar.encode_config(Config({"B": 32}, pre_hook=hook)),
            ar.ORIGIN_CACHED)
    return rec


def test_records_round_trip_and_stable_bytes(tmp_path):
    rec = _records()
    path = ar.write_records(tmp_path, rec)
    assert path.name == "flag_gems.ops.mm.mm_kernel.json"
    first = path.read_bytes()
    loaded, problems = ar.load_records(tmp_path)
    assert problems == []
    back = loaded["flag_gems.ops.mm.mm_kernel"]
    assert back.entries == rec.entries and back.key_names == ["M", "N", "K"]
    assert ar.write_records(tmp_path, back).read_bytes() == first
    data = json.loads(first)
    assert data["format"] == ar.FORMAT
    assert [e["key"][0] for e in data["entries"]] == [128, 256]  # sorted, diffable


def test_put_keeps_the_first_origin_and_takes_a_new_config():
    rec = _records()
    key = (256, 256, 256, "torch.float16")
    assert not rec.put(key, ar.encode_config(Config({"B": 64})), ar.ORIGIN_CACHED)
    assert rec.entries[ar.key_id(key)]["origin"] == ar.ORIGIN_TUNED
    assert rec.put(key, ar.encode_config(Config({"B": 128})), ar.ORIGIN_CACHED)
    assert rec.entries[ar.key_id(key)]["config"]["kwargs"] == {"B": 128}


def test_odd_kernel_names_get_distinct_safe_file_names():
    a = ar.record_filename("mod.outer.<locals>.kernel")
    b = ar.record_filename("mod.outer.<locals>/kernel")
    assert a != b and "/" not in a and "<" not in a and a.endswith(".json")


def test_load_lists_foreign_files_as_problems(tmp_path):
    ar.write_records(tmp_path, _records())
    (tmp_path / "notes.json").write_text('{"hello": 1}')
    loaded, problems = ar.load_records(tmp_path)
    assert list(loaded) == ["flag_gems.ops.mm.mm_kernel"]
    assert len(problems) == 1 and problems[0].startswith("notes.json")


# ---- coverage -------------------------------------------------------------------

def test_coverage_counts_distinct_keys_and_a_failed_replay_as_fallback():
    cov = ar.Coverage()
    cov.note_replayed("k1", "a")
    cov.note_replayed("k1", "a")
    cov.note_replayed("k1", "b")
    assert cov.note_fallback("k1", "b", ar.COMPILE_FAILED) is True
    assert cov.note_fallback("k1", "b", ar.COMPILE_FAILED) is False
    cov.note_replayed("k1", "b")  # still fell back
    assert cov.note_fallback("k2", "c", ar.KEY_MISSING)
    cov.note_recorded("k1", "a", ar.ORIGIN_REPLAYED)
    cov.note_recorded("k2", "c", ar.ORIGIN_TUNED)
    c = cov.counts()
    assert (c["replayed"], c["fell_back"]) == (1, 2)
    assert c["fallback_reasons"] == {ar.COMPILE_FAILED: 1, ar.KEY_MISSING: 1}
    assert (c["recorded_keys"], c["recorded_kernels"]) == (2, 2)
    assert ar.footer("replay", c) == "autotune: replayed 1, fell back 2"
    assert ar.footer("record", c) == "autotune: recorded 2 keys in 2 kernels"
    assert cov.per_kernel()["k1"] == {"replayed": 1, "fell_back": 1, "recorded": 1}


def test_unused_records():
    rec = _records()
    asked = [(rec.kernel, ar.key_id((128, 128, 128, "torch.float16")))]
    assert ar.unused_records({rec.kernel: rec}, asked) == 1

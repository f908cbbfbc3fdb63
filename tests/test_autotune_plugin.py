"""The autotune plugin against small tuners shaped like triton's Autotuner and FlagGems'
LibTuner (a dict cache vs a DB-backed cache without __delitem__ that forgets hooks)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest

from zlbench import autotune_records as ar
from zlbench import rundir
from zlbench.markers import parse_marker
from zlbench.plugins import autotune as plugin


class OutOfResources(Exception):
    pass


class Config:
    def __init__(self, kwargs, num_warps=4, num_stages=3, num_ctas=1, maxnreg=None, pre_hook=None):
        self.kwargs, self.pre_hook = kwargs, pre_hook
        self.num_warps, self.num_stages, self.num_ctas, self.maxnreg = num_warps, num_stages, num_ctas, maxnreg

    def all_kwargs(self):
        return {**self.kwargs, "num_warps": self.num_warps, "num_ctas": self.num_ctas,
                "num_stages": self.num_stages}


def make_classes():
    """Fresh fake tuner classes per test (the plugin patches classes)."""

    class Autotuner:
        """Like triton's: key from named args, a dict cache, tunes on a miss."""

        def __init__(self, fn, configs, key, fastest=0, bad=()):
            self.fn = self.base_fn = fn
            self.arg_names = fn.__code__.co_varnames[:fn.__code__.co_argcount]
            self.configs, self.keys = configs, key
            self.cache = {}
            self.fastest, self.bad = fastest, set(bad)
            self.tuned, self.launched = 0, []

        def tune(self):
            self.tuned += 1
            return self.configs[self.fastest]

        def run(self, *args, **kwargs):
            nargs = dict(zip(self.arg_names, args))
            key = tuple(nargs[k] for k in self.keys)
            if key not in self.cache:
                self.cache[key] = self.tune()
            config = self.cache[key]
            self.best_config = config
            if config.pre_hook is not None:
                config.pre_hook(nargs)
            return self.launch(config)

        def launch(self, config):
            if config.kwargs["B"] in self.bad:
                raise OutOfResources(f"B={config.kwargs['B']}")
            self.launched.append(config)
            return config.kwargs["B"]

    class ConfigCache:
        """Like FlagGems' sqlite ConfigCache: rebuilt configs lose their hook."""

        def __init__(self, db):
            self.db = db

        def __contains__(self, key):
            return key in self.db

        def __getitem__(self, key):
            kw = dict(self.db[key])
            nw = kw.pop("num_warps")
            return Config(kw, num_warps=nw)

        def __setitem__(self, key, config):
            self.db[key] = {**config.kwargs, "num_warps": config.num_warps}

    class LibTuner(Autotuner):
        def __init__(self, fn, configs, key, db, **kw):
            super().__init__(fn, configs, key, **kw)
            self.cache = ConfigCache(db)

        def run(self, *args, **kwargs):
            nargs = dict(zip(self.arg_names, args))
            key = tuple(nargs[k] for k in self.keys)
            if key not in self.cache:
                self.cache[key] = self.tune()
            config = self.cache[key]
            if config.pre_hook is None:  # re-attach the hook by kwargs match
                for original in self.configs:
                    if original.all_kwargs() == config.all_kwargs():
                        config = original
                        break
            self.best_config = config
            if config.pre_hook is not None:
                config.pre_hook(nargs)
            return self.launch(config)

    return Autotuner, LibTuner


def mm_kernel(M, N, K):
    pass


def add_kernel(n):
    pass


REPO = Path(__file__).resolve().parents[1]
MM = f"{__name__}.mm_kernel"
CONFIGS = [Config({"B": 32}), Config({"B": 64}), Config({"B": 128}, num_warps=8)]


class Harness:
    def __init__(self, tmp_path, monkeypatch):
        self.tmp_path, self.monkeypatch = tmp_path, monkeypatch
        self.Autotuner, self.LibTuner = make_classes()
        self.module = types.ModuleType("fake_tuners")
        self.module.Autotuner, self.module.LibTuner = self.Autotuner, self.LibTuner
        self.session, self.lines = None, []

    def start(self, mode, name, replay_from=None, use_flagtune="0"):
        if self.session is not None:
            self.session.close()
        run_dir = self.tmp_path / name
        self.monkeypatch.setenv("ZL_RUN_DIR", str(run_dir))
        settings = plugin.AutotuneSettings(run_dir, mode, replay_from, use_flagtune)
        self.lines = []
        self.session = plugin.AutotuneSession(settings, emit=self.lines.append)
        self.session.start()
        self.session.patch({"fake_tuners": self.module})
        return run_dir

    def markers(self):
        return [parse_marker(line) for line in self.lines]


@pytest.fixture
def h(tmp_path, monkeypatch):
    harness = Harness(tmp_path, monkeypatch)
    yield harness
    if harness.session is not None:
        harness.session.close()


def load(run_dir):
    return ar.load_records(run_dir / rundir.RECORDS_DIR)[0]


# ---- record ---------------------------------------------------------------------

def test_record_on_a_warm_db_reads_back_the_cached_config(h):
    db = {}
    cold = h.start("record", "cold")
    h.LibTuner(mm_kernel, CONFIGS, ["M", "N", "K"], db, fastest=2).run(256, 256, 64)
    warm_tuner = h.LibTuner(mm_kernel, CONFIGS, ["M", "N", "K"], db, fastest=0)
    warm = h.start("record", "warm")
    warm_tuner.run(256, 256, 64)
    assert warm_tuner.tuned == 0  # the DB answered: nothing new was written
    for run_dir, origin in ((cold, ar.ORIGIN_TUNED), (warm, ar.ORIGIN_CACHED)):
        (entry,) = load(run_dir)[MM].entries.values()
        assert entry["key"] == [256, 256, 64] and entry["origin"] == origin
        assert entry["config"]["kwargs"] == {"B": 128} and entry["config"]["num_warps"] == 8
    assert h.session.footer() == "autotune: recorded 1 keys in 1 kernels"


def test_record_covers_plain_autotune_and_each_key_once(h):
    run_dir = h.start("record", "r")
    tuner = h.Autotuner(add_kernel, CONFIGS, ["n"], fastest=1)
    for n in (1024, 1024, 4096, 1024):
        tuner.run(n)
    rec = load(run_dir)[f"{__name__}.add_kernel"]
    assert rec.tuner == ar.AUTOTUNER and rec.key_names == ["n"]
    assert sorted(e["key"][0] for e in rec.entries.values()) == [1024, 4096]
    h.session.write_report()
    report = json.loads((run_dir / "plugins" / "autotune.json").read_text())
    assert (report["recorded_keys"], report["recorded_kernels"]) == (2, 1)
    assert sorted(p.rsplit(".", 1)[1] for p in report["patched"]) == ["Autotuner", "LibTuner"]


def test_each_row_record_names_the_configs_its_kernel_keys_ran_with(h):
    from zlbench.timing import TimedRow

    h.start("record", "r")
    current = {"row": None}
    h.session.current_row = lambda: current["row"] and types.SimpleNamespace(row=current["row"])
    tuner = h.Autotuner(add_kernel, CONFIGS, ["n"], fastest=2)
    tuner.run(64)  # outside any row: nothing to say for a row
    small = TimedRow("add", "torch.float16", "[64]", "gems")
    large = TimedRow("add", "torch.float16", "[4096]", "gems")
    current["row"] = small
    tuner.run(64)
    tuner.run(64)
    current["row"] = large
    tuner.run(4096)
    kernel = f"{__name__}.add_kernel"
    want = ar.config_id(ar.encode_config(CONFIGS[2]))
    assert h.session.row_fields(small) == {"autotune": {f"{kernel} [64]": want}}
    # The large row also tuned: its record says for how long (tune_s; test_precompile.py).
    assert h.session.row_fields(large)["autotune"] == {f"{kernel} [4096]": want}
    assert h.session.row_fields(small) == {}  # taken once, by the row's record
    assert h.session.row_fields(TimedRow("add", "torch.float16", "[64]", "torch")) == {}
    # A get_latency whose row was never recorded (untimed, or it raised) leaves nothing
    # for a later row of the same key: the session forgets after every call.
    current["row"] = small
    tuner.run(64)
    h.session.forget_row_configs(None)
    assert h.session.row_fields(small) == {}


def test_subclass_calling_super_run_is_counted_once(h):
    class PolicyTuner(h.Autotuner):
        def run(self, *args, **kwargs):
            return super().run(*args, **kwargs)

    run_dir = h.start("record", "r")  # patched after the subclass exists, as at collection
    tuner = PolicyTuner(add_kernel, CONFIGS, ["n"])
    assert tuner.run(8) == 32
    assert len(load(run_dir)[f"{__name__}.add_kernel"].entries) == 1
    assert h.session.counts()["recorded_keys"] == 1


# ---- replay ---------------------------------------------------------------------

def _record(h, tuner_factory, calls, name="a"):
    run_dir = h.start("record", name)
    tuner = tuner_factory()
    for args in calls:
        tuner.run(*args)
    return run_dir / rundir.RECORDS_DIR


def test_replay_overrides_a_warm_db_and_writes_nothing_into_it(h):
    records = _record(h, lambda: h.LibTuner(mm_kernel, CONFIGS, ["M", "N", "K"], {}, fastest=1),
                      [(512, 512, 512)])
    db = {(512, 512, 512): {"B": 32, "num_warps": 4}}  # a warm DB with another winner
    tuner = h.LibTuner(mm_kernel, CONFIGS, ["M", "N", "K"], db, fastest=0)
    run_dir = h.start("replay", "b", replay_from=records)
    assert tuner.run(512, 512, 512) == 64
    assert tuner.tuned == 0 and db[(512, 512, 512)]["B"] == 32
    assert h.session.footer() == "autotune: replayed 1, fell back 0"
    (entry,) = load(run_dir)[MM].entries.values()
    assert entry["origin"] == ar.ORIGIN_REPLAYED and entry["config"]["kwargs"] == {"B": 64}


def test_key_missing_falls_back_visibly_once(h):
    records = _record(h, lambda: h.Autotuner(add_kernel, CONFIGS, ["n"]), [(16,)])
    tuner = h.LibTuner(mm_kernel, CONFIGS, ["M", "N", "K"], {}, fastest=2)
    h.start("replay", "b", replay_from=records)
    tuner.run(64, 64, 64)
    tuner.run(64, 64, 64)
    assert tuner.tuned == 1
    (marker,) = h.markers()
    assert marker.name == "AUTOTUNE_REPLAY_FALLBACK" and marker.get("reason") == ar.KEY_MISSING
    assert marker.get("kernel") == MM and json.loads(marker.get("key")) == [64, 64, 64]
    c = h.session.counts()
    assert (c["replayed"], c["fell_back"]) == (0, 1)
    assert h.session.report()["records_unused"] == 1


def test_libtuner_keeps_pre_hook_configs(h):
    seen = []
    hooked = [Config({"B": b}, pre_hook=lambda nargs, b=b: seen.append(b)) for b in (32, 64)]
    records = _record(h, lambda: h.LibTuner(mm_kernel, hooked, ["M", "N", "K"], {}, fastest=1),
                      [(128, 128, 128)])
    (entry,) = ar.load_records(records)[0][MM].entries.values()
    assert entry["config"]["has_pre_hook"] is True
    seen.clear()
    tuner = h.LibTuner(mm_kernel, hooked, ["M", "N", "K"], {}, fastest=0)
    h.start("replay", "b", replay_from=records)
    tuner.run(128, 128, 128)
    assert seen == [64] and tuner.tuned == 0 and tuner.launched == [hooked[1]]
    assert h.session.counts()["replayed"] == 1


def test_plain_autotuner_drops_pre_hook_records(h):
    hooked = [Config({"B": b}, pre_hook=lambda nargs: None) for b in (32, 64)]
    records = _record(h, lambda: h.Autotuner(add_kernel, hooked, ["n"], fastest=1), [(100,)])
    tuner = h.Autotuner(add_kernel, hooked, ["n"], fastest=0)
    h.start("replay", "b", replay_from=records)
    tuner.run(100)
    assert tuner.tuned == 1
    assert [m.get("reason") for m in h.markers()] == [ar.PRE_HOOK_DROPPED]


def test_bad_replayed_config_on_libtuner_cannot_be_evicted(h):
    records = _record(h, lambda: h.LibTuner(mm_kernel, CONFIGS, ["M", "N", "K"], {}, fastest=2),
                      [(32, 32, 32)])
    db = {(32, 32, 32): {"B": 32, "num_warps": 4}}
    tuner = h.LibTuner(mm_kernel, CONFIGS, ["M", "N", "K"], db, bad={128})
    h.start("replay", "b", replay_from=records)
    assert tuner.run(32, 32, 32) == 32  # the retry took the DB's config
    (marker,) = h.markers()
    assert marker.name == "compile_autotune_replay_no_evict" and marker.get("error") == "OutOfResources"
    c = h.session.counts()
    assert (c["replayed"], c["fell_back"], c["fallback_reasons"]) == (0, 1, {ar.NO_EVICT: 1})


def test_bad_replayed_config_on_autotuner_is_evicted_and_retuned(h):
    records = _record(h, lambda: h.Autotuner(add_kernel, CONFIGS, ["n"], fastest=2), [(7,)])
    tuner = h.Autotuner(add_kernel, CONFIGS, ["n"], fastest=0, bad={128})
    tuner.cache[(7,)] = CONFIGS[2]  # held in the dict too: must be dropped, not reused
    h.start("replay", "b", replay_from=records)
    assert tuner.run(7) == 32 and tuner.tuned == 1
    assert [(m.name, m.get("reason")) for m in h.markers()] == [
        ("AUTOTUNE_REPLAY_FALLBACK", ar.COMPILE_FAILED)]


def test_other_errors_are_not_swallowed(h):
    records = _record(h, lambda: h.Autotuner(add_kernel, CONFIGS, ["n"]), [(5,)])
    tuner = h.Autotuner(add_kernel, CONFIGS, ["n"])
    tuner.launch = lambda config: (_ for _ in ()).throw(RuntimeError("CUDA error"))
    h.start("replay", "b", replay_from=records)
    with pytest.raises(RuntimeError):
        tuner.run(5)


def test_replay_without_records_and_flagtune_mismatch_are_marked(h, tmp_path):
    h.start("replay", "none", replay_from=tmp_path / "missing")
    assert [(m.name, m.get("reason")) for m in h.markers()] == [("AUTOTUNE_REPLAY_NONE", "not_found")]
    records = _record(h, lambda: h.Autotuner(add_kernel, CONFIGS, ["n"]), [(5,)])
    h.start("replay", "b", replay_from=records, use_flagtune="1")
    (m,) = h.markers()
    assert (m.name, m.get("recorded"), m.get("current")) == ("AUTOTUNE_REPLAY_MISMATCH", "0", "1")


# ---- discovery, wiring ----------------------------------------------------------

def test_discovery_finds_tuners_by_name_and_their_unexported_subclasses():
    Autotuner, LibTuner = make_classes()
    hidden = type("AnonymousLibTunerImpl", (LibTuner,), {})
    mod = types.ModuleType("m")
    mod.LibTuner, mod.Other = LibTuner, type("Other", (), {"run": lambda self: 0})
    found = plugin.find_tuner_classes({"m": mod})
    assert set(found) == {LibTuner, hidden}


def test_close_restores_run_and_caches(h):
    original = h.Autotuner.__dict__["run"]
    h.start("record", "r")
    assert h.Autotuner.__dict__["run"] is not original
    wrapped = h.Autotuner.__dict__["run"]
    assert (wrapped.__name__, wrapped.__qualname__, wrapped.__doc__) == (
        original.__name__, original.__qualname__, original.__doc__)
    tuner = h.Autotuner(add_kernel, CONFIGS, ["n"])
    tuner.run(3)
    assert type(tuner.cache) is plugin.CacheOverlay
    h.session.close()
    assert h.Autotuner.__dict__["run"] is original and type(tuner.cache) is dict


def test_settings_from_env():
    assert plugin.settings_from_env({}) is None
    s = plugin.settings_from_env({"ZL_RUN_DIR": "/r", "USE_FLAGTUNE": "true"})
    assert (s.mode, s.use_flagtune, s.replay_from) == ("record", "1", None)
    with pytest.raises(ValueError):
        plugin.settings_from_env({"ZL_RUN_DIR": "/r", "ZL_AUTOTUNE_MODE": "tune"})


def test_replay_from_may_name_a_run_dir(tmp_path):
    (tmp_path / rundir.RECORDS_DIR).mkdir()
    assert plugin.records_dir_of(str(tmp_path)) == tmp_path / rundir.RECORDS_DIR


TUNERS_MODULE = textwrap.dedent('''
    class Config:
        def __init__(self, kwargs, num_warps=4, num_stages=3, num_ctas=1, maxnreg=None, pre_hook=None):
            self.kwargs, self.num_warps, self.num_stages = kwargs, num_warps, num_stages
            self.num_ctas, self.maxnreg, self.pre_hook = num_ctas, maxnreg, pre_hook

        def all_kwargs(self):
            return {**self.kwargs, "num_warps": self.num_warps}

    class Autotuner:
        def __init__(self, fn, configs, key):
            self.fn = self.base_fn = fn
            self.configs, self.keys, self.cache = configs, key, {}

        def run(self, n):
            if (n,) not in self.cache:
                self.cache[(n,)] = self.configs[-1]
            self.best_config = self.cache[(n,)]
            return self.best_config.kwargs["B"]

    def kernel(n):
        pass

    tuner = Autotuner(kernel, [Config({"B": 1}), Config({"B": 2})], ["n"])
''')

TEST_FILE = textwrap.dedent('''
    import faketuners

    def test_a():
        assert faketuners.tuner.run(10) == 2
''')


def test_plugin_in_a_real_pytest_run(tmp_path):
    (tmp_path / "faketuners.py").write_text(TUNERS_MODULE)
    (tmp_path / "test_fake.py").write_text(TEST_FILE)

    def run(name, **env):
        run_dir = tmp_path / name
        pythonpath = os.pathsep.join([str(tmp_path), str(REPO)])
        full = {**os.environ, "ZL_RUN_DIR": str(run_dir), "PYTHONPATH": pythonpath,
                "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", **env}
        out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider",
                              "-p", "zlbench.plugins.autotune", "test_fake.py"], cwd=tmp_path,
                             env=full, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stdout + out.stderr
        return run_dir, out.stdout

    a, out_a = run("a", ZL_AUTOTUNE_MODE="record")
    assert "autotune: recorded 1 keys in 1 kernels" in out_a
    assert (a / rundir.RECORDS_DIR / "faketuners.kernel.json").is_file()
    b, out_b = run("b", ZL_AUTOTUNE_MODE="replay", REPLAY_FROM=str(a))
    assert "autotune: replayed 1, fell back 0" in out_b
    report = json.loads((b / "plugins" / "autotune.json").read_text())
    assert (report["mode"], report["replayed"], report["fell_back"]) == ("replay", 1, 0)


def test_a_winner_from_tritons_disk_cache_is_recorded_as_such_and_is_no_tuning(h):
    """triton (3.4 and later, TRITON_CACHE_AUTOTUNING=1) stores a winner another process
    tuned without benchmarking any candidate: the record says disk_cache, the clock no tuning."""
    disk = {}

    class DiskTuner(h.Autotuner):
        cache_results = True

        def _bench(self, *args, config, **meta):
            return [float(config.kwargs["B"])]

        def run(self, *args, **kwargs):
            nargs = dict(zip(self.arg_names, args))
            key = tuple(nargs[k] for k in self.keys)
            if key not in self.cache:
                if key in disk:
                    self.cache[key] = disk[key]
                else:
                    timings = {c: self._bench(*args, config=c) for c in self.configs}
                    self.cache[key] = disk[key] = min(timings, key=timings.get)
            self.best_config = self.cache[key]
            return self.launch(self.best_config)

    first = h.start("record", "first")
    assert DiskTuner(add_kernel, CONFIGS, ["n"]).run(64) == 32
    assert h.session.clock.tunings == 1
    later = h.start("record", "later")  # another process: a fresh tuner, the same disk
    assert DiskTuner(add_kernel, CONFIGS, ["n"]).run(64) == 32
    assert h.session.clock.tunings == 0
    for run_dir, origin in ((first, ar.ORIGIN_TUNED), (later, ar.ORIGIN_DISK)):
        (entry,) = load(run_dir)[f"{__name__}.add_kernel"].entries.values()
        assert entry["origin"] == origin and entry["config"]["kwargs"] == {"B": 32}

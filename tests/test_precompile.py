"""Parallel compile of autotune candidates, and the compile/tune clock, against stand-in
tuners shaped like triton 3.6's Autotuner and FlagGems' LibTuner over a stand-in JIT
that speaks triton's async-compile protocol (triton is not installed on CPU hosts; the
same path against real triton is tests/test_precompile_gpu.py)."""

from __future__ import annotations

import contextvars
import hashlib
import json
import os
import sys
import threading
import time
import types
from concurrent.futures import as_completed

import pytest

from zlbench import rundir
from zlbench.batch.activity import tuning_times
from zlbench.batch.report import time_breakdown
from zlbench.plugins import autotune as plugin
from zlbench.plugins import precompile
from zlbench.timing import TimedRow

JIT_MODULE = "zl_standin_triton_jit"


class CompileFailure(Exception):
    """Like triton's CompileTimeAssertionFailure: the tuner's _bench scores it inf."""


def make_async_compile():
    """triton.runtime._async_compile in small: submit() hands compile_fn to the
    executor; leaving the mode waits for every compile and finalizes the good ones."""
    mod = types.ModuleType("zl_standin_async_compile")
    mod.active_mode = contextvars.ContextVar("active_mode", default=None)

    class FutureKernel:
        def __init__(self, finalize, future):
            self.finalize, self.future, self.kernel = finalize, future, None

        def result(self, ignore_errors=False):
            if self.kernel is None:
                try:
                    kernel = self.future.result()
                except Exception:
                    if ignore_errors:
                        return None
                    raise
                self.finalize(kernel)
                self.kernel = kernel
            return self.kernel

    class AsyncCompileMode:
        def __init__(self, executor, *, ignore_errors=False):
            self.executor, self.ignore_errors = executor, ignore_errors
            self.raw_futures, self.future_kernels = [], {}

        def submit(self, key, compile_fn, finalize_fn):
            if key in self.future_kernels:
                return self.future_kernels[key]
            future = self.executor.submit(compile_fn)
            future._key = key
            self.raw_futures.append(future)
            self.future_kernels[key] = FutureKernel(finalize_fn, future)
            return self.future_kernels[key]

        def __enter__(self):
            if mod.active_mode.get() is not None:
                raise RuntimeError("Another AsyncCompileMode is already active")
            mod.active_mode.set(self)
            return self

        def __exit__(self, *exc):
            for future in as_completed(self.raw_futures):
                self.future_kernels[future._key].result(self.ignore_errors)
            mod.active_mode.set(None)

    mod.AsyncCompileMode = AsyncCompileMode
    return mod


class Config:
    def __init__(self, kwargs, num_warps=4, pre_hook=None):
        self.kwargs, self.num_warps, self.pre_hook = kwargs, num_warps, pre_hook

    def all_kwargs(self):
        return {**self.kwargs, "num_warps": self.num_warps}


class Desc:
    """Stands in for a TMA TensorDescriptor: its block shape is part of what the
    kernel specialises on, and a config's pre_hook sets it."""

    def __init__(self):
        self.block_shape = None

    def spec(self):
        return ("desc", tuple(self.block_shape or ()))


def make_jit(compile_work, cache_dir, log_path, knobs=None):
    """A JITFunction class in its own module (with ``_async_compile``, as triton's jit
    module has): run() binds the arguments on the calling thread, compiles through the
    active async mode when there is one, and launches unless warmup. Compiles land in a
    file cache laid out as triton's (``<dir>/<sha256 of key>/__grp__*``) and each real
    compile appends ``pid thread ok key`` to a log, from whichever process ran it."""
    mod = types.ModuleType(JIT_MODULE)
    mod._async_compile = make_async_compile()

    class JITFunction:
        def __init__(self, fn):
            self.fn, self.arg_names = fn, list(fn.__code__.co_varnames[: fn.__code__.co_argcount])
            self.kernel_cache = {}
            self.launched = []

        def run(self, *args, grid, warmup, **kwargs):
            spec = tuple(a.spec() if isinstance(a, Desc) else a for a in args) + tuple(sorted(kwargs.items()))
            kernel = self.kernel_cache.get(spec)
            if kernel is None:
                async_compile = getattr(mod, "_async_compile", None)  # triton < 3.4: none
                mode = async_compile.active_mode.get() if async_compile is not None else None
                if mode is not None:
                    kernel = mode.submit(
                        repr(spec), lambda: self._compile(spec), lambda k: self.kernel_cache.__setitem__(spec, k)
                    )
                else:
                    kernel = self._compile(spec)
                    self.kernel_cache[spec] = kernel
            if not warmup:
                if hasattr(kernel, "result"):
                    kernel = kernel.result()
                self.launched.append(spec)
            return kernel

        def _compile(self, spec):
            entry = cache_dir / hashlib.sha256(repr(spec).encode()).hexdigest()
            hit = (entry / "__grp__k.json").exists()
            seconds = 0.0
            if not hit:
                ok = False
                try:
                    seconds = compile_work(spec)
                    ok = True
                finally:
                    with open(log_path, "a") as log:
                        log.write(f"{os.getpid()} {threading.current_thread().name} {int(ok)} {spec!r}\n")
                entry.mkdir(parents=True, exist_ok=True)
                (entry / "__grp__k.json").write_text("{}")
            if knobs is not None and knobs.compilation.listener is not None:
                knobs.compilation.listener(
                    src=None,
                    metadata={},
                    metadata_group={},
                    times=types.SimpleNamespace(total=int(seconds * 1e6)),
                    cache_hit=hit,
                )
            return ("kernel", spec)

    JITFunction.__module__ = JIT_MODULE
    mod.JITFunction = JITFunction
    return mod


def make_tuners():
    """Fresh tuner classes per test (the plugin patches classes), shaped like triton
    3.6's Autotuner.run/_bench and FlagGems' LibTuner with its default policy."""

    class Autotuner:
        def __init__(self, fn, configs, key, timing):
            self.fn, self.base_fn = fn, fn.fn
            self.arg_names = fn.arg_names
            self.configs, self.keys, self.timing = configs, key, timing
            self.cache = {}
            self.nargs = None

        def run(self, *args, **kwargs):
            self.nargs = dict(zip(self.arg_names, args))
            key = tuple(self.nargs[k] for k in self.keys)
            if key not in self.cache:
                pruned = self.prune_configs(kwargs)
                timings = self.choose(pruned, args, kwargs)
                self.cache[key] = min(timings, key=timings.get)
            config = self.cache[key]
            self.best_config = config
            if config.pre_hook is not None:
                config.pre_hook({**self.nargs, **kwargs, **config.all_kwargs()})
            ret = self.fn.run(*args, **kwargs, **config.all_kwargs())
            self.nargs = None
            return ret

        def choose(self, pruned, args, kwargs):
            return {c: self._bench(*args, config=c, **kwargs) for c in pruned}

        def prune_configs(self, kwargs):
            return self.configs

        def _bench(self, *args, config, **meta):
            conflicts = meta.keys() & config.kwargs.keys()
            if conflicts:
                raise ValueError(f"Conflicting meta-parameters: {', '.join(conflicts)}.")
            current = dict(meta, **config.all_kwargs())
            full = {**self.nargs, **current}
            if config.pre_hook:
                config.pre_hook(full)
            try:
                self.fn.run(*args, **current)
            except CompileFailure:
                return float("inf")
            return self.timing(config)

    class LibTuner(Autotuner):
        def choose(self, pruned, args, kwargs):
            return self.policy(lambda c: self._bench(*args, config=c, **kwargs), pruned)

        def policy(self, bench, configs):
            return {c: bench(c) for c in configs}

    return Autotuner, LibTuner


def kernel_fn(x, n):
    pass


CONFIGS = [Config({"BLOCK": b}, num_warps=w) for b, w in ((64, 2), (128, 4), (256, 4), (512, 8))]


def timing_by_block(config):
    # 256 is fastest; the others in a fixed order.
    return {64: 4.0, 128: 2.0, 256: 1.0, 512: 3.0}[config.kwargs["BLOCK"]]


@pytest.fixture
def world(tmp_path, monkeypatch):
    """Builds sessions over fresh stand-in classes; every session is closed after."""
    monkeypatch.setenv("ZL_RUN_DIR", str(tmp_path / "run"))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton-cache"))
    monkeypatch.delenv("TRITON_CACHE_MANAGER", raising=False)
    sessions = []

    class World:
        log = tmp_path / "compiles.log"
        parent = os.getpid()

        def session(self, workers, compile_work, name="run", pool="processes", cache="triton-cache"):
            monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / cache))
            knobs_mod = types.SimpleNamespace(compilation=types.SimpleNamespace(listener=None))
            jit_mod = make_jit(compile_work, tmp_path / cache, self.log, knobs_mod)
            monkeypatch.setitem(sys.modules, JIT_MODULE, jit_mod)
            Autotuner, LibTuner = make_tuners()
            run_dir = tmp_path / name
            session = plugin.AutotuneSession(
                plugin.AutotuneSettings(run_dir, "record", None, "0", workers), emit=lambda line: None
            )
            session.precompiler.processes = pool == "processes"
            session.start()
            tuners = types.ModuleType("zl_standin_tuners")
            tuners.Autotuner, tuners.LibTuner = Autotuner, LibTuner
            session.patch({"zl_standin_tuners": tuners, "triton.knobs": knobs_mod})
            sessions.append(session)
            self.knobs, self.jit_mod, self.Autotuner, self.LibTuner = knobs_mod, jit_mod, Autotuner, LibTuner
            return session

        def tuner(self, cls, configs=CONFIGS, timing=timing_by_block):
            return cls(self.jit_mod.JITFunction(kernel_fn), configs, ["n"], timing)

        def compiles(self):
            """(where, ok, key) of every real compile so far: where is "pool" (a child
            process or a pool thread) or "main" (the benchmark's own thread)."""
            if not self.log.exists():
                return []
            out = []
            for line in self.log.read_text().splitlines():
                pid, thread, ok, key = line.split(" ", 3)
                pool = int(pid) != self.parent or thread.startswith("zlbench-compile")
                out.append(("pool" if pool else "main", ok == "1", key))
            self.log.unlink()
            return out

    yield World()
    for s in sessions:
        s.close()


def launch(tuner, x, n):
    return tuner.run(x, n, grid=(1,), warmup=False)


def instant(spec):
    return 0.0


def block_of(spec):
    return dict(spec[2:])["BLOCK"]


def barrier(directory, parties, timeout=10.0):
    """A compile that waits until ``parties`` compiles have started, in any thread or
    process: it only finishes if they all run at the same time."""

    def compile_work(spec):
        directory.mkdir(exist_ok=True)
        (directory / f"{block_of(spec)}").touch()
        deadline = time.monotonic() + timeout
        while len(list(directory.iterdir())) < parties:
            if time.monotonic() > deadline:
                raise TimeoutError("the other compiles never started: not concurrent")
            time.sleep(0.005)
        return 0.0

    return compile_work


POOLS = ["processes", "threads"]


@pytest.mark.parametrize("pool", POOLS)
@pytest.mark.parametrize("kind", ["Autotuner", "LibTuner"])
def test_candidates_compile_concurrently_then_benchmark_one_by_one(world, tmp_path, kind, pool):
    session = world.session(4, barrier(tmp_path / "arrived", len(CONFIGS)), pool=pool)
    tuner = world.tuner(getattr(world, kind))
    launch(tuner, "x", 1000)
    assert tuner.best_config is CONFIGS[2]
    compiles = world.compiles()
    # Each candidate compiled once, on the pool, all at the same time; the benchmarks
    # found every one compiled.
    assert sorted(where for where, ok, _ in compiles if ok) == ["pool"] * len(CONFIGS), compiles
    # The benchmarks ran one by one, in the tuner's order, then the winner launched.
    assert [dict(s[2:])["BLOCK"] for s in tuner.fn.launched] == [64, 128, 256, 512, 256]
    report = session.report()
    assert report["precompile"]["pool"] == pool
    assert (report["precompile"]["passes"], report["precompile"]["submitted"]) == (1, 4)
    assert (report["compiles"], report["pool_compiles"]) == (4, 4)
    assert report["compile_workers"] == 4


def test_same_winner_and_benchmark_order_with_the_pool_on_and_off(world):
    seen = {}
    for workers in (1, 4):
        world.session(workers, instant, name=f"w{workers}", cache=f"cache{workers}")
        tuner = world.tuner(world.LibTuner)
        for n in (1000, 4000, 1000):
            launch(tuner, "x", n)
        seen[workers] = (tuner.fn.launched, {k: v.kwargs for k, v in tuner.cache.items()}, world.compiles())
    assert seen[1][:2] == seen[4][:2]
    assert {where for where, _, _ in seen[1][2]} == {"main"} and len(seen[1][2]) == 8
    assert {where for where, _, _ in seen[4][2]} == {"pool"} and len(seen[4][2]) == 8


@pytest.mark.parametrize("pool", POOLS)
def test_a_candidate_that_fails_to_compile_fails_as_it_does_today(world, pool):
    def fails_for_128(spec):
        if block_of(spec) == 128:
            raise CompileFailure("BLOCK=128")
        return 0.0

    results = {}
    for workers in (1, 4):
        session = world.session(workers, fails_for_128, name=f"w{workers}", pool=pool, cache=f"c{workers}")
        tuner = world.tuner(world.Autotuner)
        launch(tuner, "x", 1000)
        failed = sorted(where for where, ok, _ in world.compiles() if not ok)
        results[workers] = (tuner.best_config, failed, session.report()["precompile"])
    assert results[1][0] is results[4][0] is CONFIGS[2]
    assert results[1][1] == ["main"]
    # On the pool it failed too, and its _bench compiled it again on the benchmark's
    # thread, where the tuner scored it as before.
    assert results[4][1] == ["main", "pool"]
    assert results[4][2]["failed"] == 1 and results[4][2]["submitted"] == 4


def test_a_compile_error_the_tuner_does_not_catch_still_reaches_the_caller(world):
    def broken(spec):
        if block_of(spec) == 512:
            raise RuntimeError("backend crashed")
        return 0.0

    for workers in (1, 4):
        world.session(workers, broken, name=f"w{workers}", cache=f"c{workers}")
        tuner = world.tuner(world.Autotuner)
        with pytest.raises(RuntimeError, match="backend crashed"):
            launch(tuner, "x", 1000)


def test_a_child_that_dies_leaves_its_candidates_to_the_benchmark_process(world):
    parent = os.getpid()

    def dies_in_a_child(spec):
        if block_of(spec) == 512 and os.getpid() != parent:
            os._exit(3)
        return 0.0

    session = world.session(4, dies_in_a_child)
    tuner = world.tuner(world.Autotuner)
    launch(tuner, "x", 1000)
    assert tuner.best_config is CONFIGS[2]
    compiles = world.compiles()
    assert sorted(where for where, ok, _ in compiles if ok) == ["main", "pool", "pool", "pool"]
    assert session.report()["precompile"]["failed"] == 0


def test_candidates_already_in_the_triton_cache_fork_nothing(world):
    world.session(4, instant)
    launch(world.tuner(world.Autotuner), "x", 1000)
    assert len(world.compiles()) == 4
    session = world.session(4, lambda spec: pytest.fail("compiled again"), name="again")
    tuner = world.tuner(world.Autotuner)  # a fresh process's JIT: nothing in memory
    launch(tuner, "x", 1000)
    assert tuner.best_config is CONFIGS[2] and world.compiles() == []
    got = session.report()
    assert (got["precompile"]["submitted"], got["precompile"]["cached"], got["pool_compiles"]) == (4, 4, 0)
    assert got["compile_cache_hits"] == 0  # loads while waiting on the pool count as the wait


@pytest.mark.parametrize("pool", POOLS)
def test_a_pre_hook_runs_before_each_candidate_is_specialised(world, pool):
    # FlagGems' TMA configs set the descriptors' block shape in a pre_hook: compiling
    # without it would build kernels the benchmarks never use (each compiled twice).
    def set_block(nargs):
        nargs["x"].block_shape = [nargs["BLOCK"], 16]

    configs = [Config({"BLOCK": b}, pre_hook=set_block) for b in (64, 128, 256)]
    world.session(4, instant, pool=pool)
    tuner = world.tuner(world.Autotuner, configs, timing=lambda c: c.kwargs["BLOCK"])
    launch(tuner, Desc(), 1000)
    assert [where for where, _, _ in world.compiles()] == ["pool"] * 3


def test_a_policy_benchmarking_configs_of_its_own_compiles_them_itself(world):
    session = world.session(4, instant)

    class Proposer(world.LibTuner):
        def policy(self, bench, configs):  # fresh configs, like FlagTune's proposer
            fresh = [Config(dict(c.kwargs), c.num_warps) for c in configs[:2]]
            return {c: bench(c) for c in fresh}

    tuner = world.tuner(Proposer)
    launch(tuner, "x", 1000)
    assert {where for where, _, _ in world.compiles()} == {"main"}
    assert session.report()["precompile"]["skipped"] == {"not_a_pruned_candidate": 1}


def test_without_async_compile_the_tuner_compiles_as_before(world):
    session = world.session(4, instant)
    del world.jit_mod._async_compile  # a triton older than 3.4
    tuner = world.tuner(world.Autotuner)
    launch(tuner, "x", 1000)
    assert tuner.best_config is CONFIGS[2]
    assert session.report()["precompile"]["skipped"] == {"no_async_compile": 1}


class FakeTime:
    def __init__(self):
        self.t = 0.0
        self.lock = threading.Lock()

    def __call__(self):
        return self.t

    def advance(self, seconds):
        with self.lock:
            self.t += seconds


def test_compile_and_tune_seconds_per_row_and_per_run(world):
    clock = FakeTime()

    def one_second(spec):
        clock.advance(1.0)
        return 1.0

    session = world.session(1, one_second)
    session.clock.now = clock
    tuner = world.tuner(world.Autotuner, timing=lambda c: clock.advance(0.5) or timing_by_block(c))
    row = {"row": None}
    session.current_row = lambda: row["row"] and types.SimpleNamespace(row=row["row"])

    launch(tuner, "x", 10)  # outside any row: the run's totals only
    gems = TimedRow("add", "torch.float16", "[1000]", "gems")
    row["row"] = gems
    launch(tuner, "x", 1000)  # tunes: 4 compiles (1 s each), 4 benchmarks (0.5 s each)
    launch(tuner, "x", 1000)  # cached: nothing
    fields = session.row_fields(gems)
    assert (fields["compile_s"], fields["tune_s"]) == (4.0, 2.0) and "autotune" in fields
    torch_row = TimedRow("add", "torch.float16", "[1000]", "torch")
    assert session.row_fields(torch_row) == {}
    report = session.report()
    assert (report["compile_s"], report["tune_s"], report["tunings"], report["compiles"]) == (8.0, 4.0, 2, 8)
    assert report["compile_clock"] == "triton compilation listener"
    assert "compile_s=8.00 tune_s=4.00" in session.time_footer()


def test_with_the_pool_compile_seconds_are_the_wait_not_the_sum(world):
    clock = FakeTime()

    def half_a_second_of_wall(spec):
        clock.advance(0.5)  # the benchmark's thread waits 0.5 s per compile in all
        return 1.0  # what the compiler says each compile took on its own thread

    session = world.session(4, half_a_second_of_wall, pool="threads")
    session.clock.now = clock
    tuner = world.tuner(world.Autotuner, timing=lambda c: clock.advance(0.25) or timing_by_block(c))
    launch(tuner, "x", 1000)
    report = session.report()
    assert report["compile_s"] == 2.0  # the wait on the pool, once
    assert report["pool_compile_s"] == 4.0  # four 1 s compiles on the pool's threads
    assert report["tune_s"] == 1.0  # the four 0.25 s benchmarks


def test_resolve_workers():
    assert precompile.resolve_workers(3, cpus=2) == 3
    # Auto: the run's share of the host's CPUs, less one for the benchmark's process.
    assert precompile.resolve_workers(0, cpus=16) == 15
    assert precompile.resolve_workers(0, cpus=6) == 5
    assert precompile.resolve_workers(0, cpus=1) == 1
    assert precompile.resolve_workers(0, cpus=2) == 1
    assert precompile.resolve_workers(0, cpus=128) == precompile.AUTO_MAX_WORKERS
    assert precompile.resolve_workers(0, cpus=128, runs=8) == 15
    assert precompile.resolve_workers(0, cpus=64, runs=8) == 7
    assert precompile.resolve_workers(0, cpus=16, runs=32) == 1
    assert precompile.resolve_workers(2, cpus=16, runs=8) == 2  # asked for: kept


def test_the_host_share_reaches_the_pool_from_the_batch_environment(tmp_path):
    from zlbench import benchenv

    assert benchenv.host_runs({}) == 1
    assert benchenv.host_runs({benchenv.HOST_RUNS: "x"}) == 1
    assert benchenv.host_runs({benchenv.HOST_RUNS: "0"}) == 1
    env = {benchenv.RUN_DIR: str(tmp_path), benchenv.HOST_RUNS: "4"}
    settings = plugin.settings_from_env(env)
    assert settings.host_runs == 4
    session = plugin.AutotuneSession(settings)
    assert settings.compile_workers == 0  # the knob's default: auto
    assert session.precompiler.workers == precompile.resolve_workers(0, runs=4)
    assert session.report()["host_runs"] == 4


def test_children_are_handed_the_next_compile_as_each_finishes(tmp_path):
    """One slow compile does not hold back the fast ones dealt to the same child: with two
    workers and the first function slow, the other child runs every other function."""
    marks = tmp_path / "marks"
    marks.mkdir()

    def job(i, seconds):
        def run():
            time.sleep(seconds)
            (marks / f"{i}-{os.getpid()}").touch()
        return run

    fns = [job(0, 1.0)] + [job(i, 0.0) for i in range(1, 7)]
    reports = precompile.compile_in_children(fns, 2)
    assert sorted(reports) == list(range(7)) and all(ok for ok, _ in reports.values())
    by_pid = {}
    for name in os.listdir(marks):
        i, pid = name.split("-")
        by_pid.setdefault(pid, set()).add(int(i))
    assert sorted(map(sorted, by_pid.values())) == [[0], [1, 2, 3, 4, 5, 6]]
    assert reports[0][1] >= 1.0 > max(sec for i, (_, sec) in reports.items() if i)


def test_children_that_die_are_replaced_while_compiles_are_left(tmp_path):
    parent = os.getpid()

    def job(i):
        def run():
            if i < 2 and os.getpid() != parent:
                os._exit(7)  # both first children die on their first job
        return run

    reports = precompile.compile_in_children([job(i) for i in range(7)], 2)
    assert sorted(reports) == [2, 3, 4, 5, 6] and all(ok for ok, _ in reports.values())


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
def test_a_child_holds_no_pipe_of_its_elder_siblings(tmp_path):
    """Each child closes the pipes of the children forked before it: else a child's job
    pipe never reached its end while a younger sibling lived."""
    marks = tmp_path / "fds"
    marks.mkdir()

    def job(i):
        def run():
            time.sleep(0.2)  # all four alive at once
            (marks / f"{i}-{len(os.listdir('/proc/self/fd'))}").touch()
        return run

    precompile.compile_in_children([job(i) for i in range(4)], 4)
    counts = {int(name.split("-")[1]) for name in os.listdir(marks)}
    assert len(os.listdir(marks)) == 4 and len(counts) == 1, sorted(os.listdir(marks))


def test_a_child_that_dies_costs_only_the_compile_it_was_running(tmp_path):
    parent = os.getpid()

    def job(i):
        def run():
            if i == 2 and os.getpid() != parent:
                os._exit(7)
        return run

    reports = precompile.compile_in_children([job(i) for i in range(6)], 2)
    assert sorted(reports) == [0, 1, 3, 4, 5]
    assert all(ok for ok, _ in reports.values())


def test_the_batch_reads_compile_and_tune_seconds_from_the_run(tmp_path):
    run_dir = tmp_path / "op"
    rundir.write_plugin_report(run_dir, "autotune", {"compile_s": 12.5, "tune_s": 3.25})
    assert tuning_times(run_dir) == {"compile_s": 12.5, "tune_s": 3.25}
    rundir.write_plugin_report(run_dir, "autotune", {"compile_s": None, "tune_s": "lots"})
    assert tuning_times(run_dir) == {"compile_s": None, "tune_s": None}
    (run_dir / "plugins" / "autotune.json").write_text(json.dumps({"compile_s": -1, "tune_s": float("nan")}))
    assert tuning_times(run_dir) == {"compile_s": None, "tune_s": None}
    assert tuning_times(tmp_path / "missing") == {"compile_s": None, "tune_s": None}
    assert {"compile_s", "tune_s"} <= set(rundir.COLUMNS)


def test_the_closing_report_says_how_much_was_compiling_and_tuning():
    rows = [
        {"operator": "mm", "duration_s": "100", "overhead_s": "2", "compile_s": "60", "tune_s": "20"},
        {"operator": "abs", "duration_s": "20", "overhead_s": "2", "compile_s": "1", "tune_s": ""},
        {"operator": "add", "duration_s": "20", "overhead_s": "2"},
    ]
    lines = time_breakdown(rows)
    line = next(x for x in lines if "compiling" in x)
    assert "compiling kernels 1:01 (44%)" in line and "autotuning 0:20 (14%)" in line
    assert "over 2 operators" in line and "most: mm 1:00 + 0:20, abs 0:01 + 0:00" in line


def test_the_triton_cache_check_is_sure_or_says_no(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("TRITON_CACHE_MANAGER", raising=False)
    key = "source-options-env"
    entry = tmp_path / hashlib.sha256(key.encode()).hexdigest()
    assert not precompile.in_triton_cache(key)
    entry.mkdir()
    (entry / "k.cubin").write_text("")  # a compile that never finished its group file
    assert not precompile.in_triton_cache(key)
    (entry / "__grp__k.json").write_text("{}")
    assert precompile.in_triton_cache(key)
    assert not precompile.in_triton_cache(None)
    monkeypatch.setenv("TRITON_CACHE_MANAGER", "my.cache:Manager")  # another layout: unsure
    assert not precompile.in_triton_cache(key)


def test_a_prune_that_yields_still_hands_the_tuner_every_candidate(world):
    session = world.session(4, instant)

    class Yielding(world.Autotuner):
        def prune_configs(self, kwargs):
            yield from self.configs

    later = types.ModuleType("zl_standin_later")  # a module imported after collection
    later.Autotuner = world.Autotuner
    session.patch({"zl_standin_later": later})
    tuner = world.tuner(Yielding)
    launch(tuner, "x", 1000)
    assert tuner.best_config is CONFIGS[2]
    assert [where for where, _, _ in world.compiles()] == ["pool"] * 4
    assert session.report()["precompile"]["submitted"] == 4


def test_compiles_that_missed_the_cache_are_named_with_their_key():
    from zlbench.plugins.precompile import COMPILED_LISTED, TuningClock, kernel_label

    assert kernel_label({"metadata": {"name": "scan_kernel", "hash": "ab" * 32}}) == "scan_kernel " + "ab" * 8
    assert kernel_label({"metadata": {}}) is None and kernel_label({}) is None
    clock = TuningClock()
    clock.on_compile(0.1, False, "scan_kernel k1")
    clock.on_compile(0.1, False, "scan_kernel k1")
    clock.on_compile(0.01, True, "add_kernel k2")  # a hit: counted, not named
    report = clock.report()
    assert report["compiled"] == {"scan_kernel k1": 2} and report["compile_cache_hits"] == 1
    for i in range(COMPILED_LISTED + 5):
        clock.on_compile(0.1, False, f"k{i} key")
    assert len(clock.report()["compiled"]) == COMPILED_LISTED and clock.compiles == 3 + COMPILED_LISTED + 5
    # Through triton's listener, as a compile reports itself: the kernel's name and key.
    from zlbench.plugins.precompile import install_listener

    knobs = types.SimpleNamespace(compilation=types.SimpleNamespace(listener=None))
    listened = TuningClock()
    undo = install_listener(listened, {"triton.knobs": knobs})
    knobs.compilation.listener(metadata={"name": "scan_kernel", "hash": "cd" * 32},
                               times=types.SimpleNamespace(total=200_000), cache_hit=False)
    undo()
    assert listened.report()["compiled"] == {"scan_kernel " + "cd" * 8: 1} and knobs.compilation.listener is None


def test_a_batch_tells_each_run_how_many_run_at_once_on_its_host(sample_screen):
    """The sample screen runs on two devices: each run's compile pool took half the CPUs."""
    for op in ("abs", "mm"):
        report = json.loads((sample_screen / op / "plugins" / "autotune.json").read_text())
        assert report["host_runs"] == 2
        assert report["compile_workers"] == precompile.resolve_workers(0, runs=2)

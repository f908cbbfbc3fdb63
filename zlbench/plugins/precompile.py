"""Compile an autotuner's candidates in parallel; tell compiling from tuning.

Triton's ``Autotuner`` (and FlagGems' ``LibTuner``, which inherits its ``_bench``)
compiles each candidate config lazily, inside the serial loop that benchmarks them, so a
cold cache pays every compile one after another. The autotune plugin hands the
candidates of a tuning pass to ``Precompiler.compile_candidates`` at the pass's first
``_bench``: each is started through triton's own async compile (``AsyncCompileMode``:
the JIT binds and specialises the arguments on the calling thread, only ``compile`` is
handed to the pool), all are waited for, and then the tuner benchmarks them one by one
exactly as before, each finding its kernel compiled. Which config wins does not change;
how long the wait is does. A candidate that fails to compile on the pool is left alone:
its ``_bench`` compiles it again on the calling thread and fails as it always did.

The pool is processes where the OS can fork (``ForkPool``; on an H200 host baddbmm's 144
candidates, 12 tuning passes of 12, took 79.4 s of compiling in 19.2 s of wall with 15 of
them, against 80.2 s serially): triton 3.6's compiler holds the GIL through its Python
front end and its MLIR/LLVM passes (a Python loop on another thread ran at 11-16% of its
speed while one compile ran, on this project's 2-core CPU host), so threads overlap
little beyond ptxas. Each forked child is handed the next candidate when it reports the
last, compiles it into the Triton cache (it inherits the JIT's state and touches no
device) and says whether it compiled; the parent then loads each from the cache.
Elsewhere the pool is threads.

``TuningClock`` keeps the two figures the batch reports (per row and per run):
``compile_s``, wall seconds the benchmark's thread spent in triton's compiler or
waiting on the pool (from triton's compilation listener, ``triton.knobs.compilation``),
and ``tune_s``, wall seconds of autotuner calls that benchmarked candidates, less the
compiling inside them.

Nothing here imports triton: the async-compile module is the one the kernel's own jit
module reads (``<jit module>._async_compile``), found from the tuner's JITFunction.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import os
import selectors
import signal
import struct
import sys
import threading
import time
import warnings
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Dict, Hashable, List, Mapping, Optional, Sequence, Tuple

from zlbench.tuner_cache import triton_cache_dir

# Workers when ZL_COMPILE_WORKERS is 0: this run's share of the usable CPUs (a batch
# running N benchmark processes on the host gives each 1/N), less one for the
# benchmark's own process, at most this many. The benchmark's thread only waits while
# the pool compiles; on an H200 host 8 workers of 16 CPUs left half of them idle.
AUTO_MAX_WORKERS = 16


def usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def resolve_workers(requested: int, cpus: Optional[int] = None, runs: int = 1) -> int:
    """Workers of the compile pool: the knob's value, or for 0
    min(AUTO_MAX_WORKERS, cpus // runs - 1), at least 1."""
    if requested >= 1:
        return requested
    cpus = usable_cpus() if cpus is None else cpus
    return max(1, min(AUTO_MAX_WORKERS, cpus // max(1, runs) - 1))


# ---- the clock ------------------------------------------------------------------

COMPILED_LISTED = 200  # kernels named in the report's ``compiled``; the rest only counted


class TuningClock:
    """Seconds compiling and seconds tuning, for the run and for the row being timed.

    Compiles reported from other threads (the pool's) add to ``pool_compile_s`` only:
    the thread that waits on them counts the wait once, as wall time.
    ``row_key()`` names the row being timed (None outside one); it is read on the
    benchmark's thread only.
    """

    def __init__(
        self,
        row_key: Callable[[], Optional[Hashable]] = lambda: None,
        now: Callable[[], float] = time.perf_counter,
    ):
        self.row_key = row_key
        self.now = now
        self.main = threading.main_thread()
        self.compile_s = 0.0
        self.tune_s = 0.0
        self.pool_compile_s = 0.0
        self.compiles = 0
        self.pool_compiles = 0  # of them, on the pool's threads
        self.compile_cache_hits = 0
        # "<kernel> <cache key>" -> compiles on the benchmark's thread that missed the
        # cache: in a warm pass these are kernels whose key is new in every process.
        self.compiled: Dict[str, int] = {}
        self.tunings = 0
        self.listening = False  # triton's compilation listener is ours: compile_s is known
        self.rows: Dict[Hashable, List[float]] = {}  # row key -> [compile_s, tune_s]
        self._lock = threading.Lock()
        self._depth = 0
        self.waiting = False  # the benchmark's thread is waiting on the pool

    def _row_add(self, index: int, seconds: float) -> None:
        key = self.row_key()
        if key is not None:
            self.rows.setdefault(key, [0.0, 0.0])[index] += seconds

    def on_compile(self, seconds: float, cache_hit: bool, kernel: Optional[str] = None) -> None:
        """One compile finished (triton's listener; a cache hit is a quick load).
        ``kernel``: its name and cache key, for the list of those that missed."""
        on_pool = threading.current_thread() is not self.main
        if not on_pool and self.waiting:
            return  # loading what the pool compiled: part of the wait, counted once
        with self._lock:
            self.compiles += 1
            self.compile_cache_hits += bool(cache_hit)
            if on_pool:
                self.pool_compiles += 1
                self.pool_compile_s += seconds
                return
            self.compile_s += seconds
            if kernel and not cache_hit and (kernel in self.compiled or len(self.compiled) < COMPILED_LISTED):
                self.compiled[kernel] = self.compiled.get(kernel, 0) + 1
        self._row_add(0, seconds)

    def on_pool_compiles(self, seconds: Sequence[float]) -> None:
        """Compiles that finished in the pool's processes (as their children said)."""
        with self._lock:
            self.compiles += len(seconds)
            self.pool_compiles += len(seconds)
            self.pool_compile_s += sum(seconds)

    def add_compile_wall(self, seconds: float) -> None:
        """The benchmark's thread waited this long on the compile pool."""
        with self._lock:
            self.compile_s += seconds
        self._row_add(0, seconds)

    def tuner_enter(self) -> Optional[tuple]:
        """Before a tuner call; the token goes to ``tuner_exit`` (None: nested, not timed)."""
        self._depth += 1
        if self._depth > 1:
            return None
        return (self.now(), self.compile_s)

    def tuner_exit(self, token: Optional[tuple], tuned: bool) -> None:
        self._depth -= 1
        if token is None or not tuned:
            return
        started, compiled_before = token
        wall = self.now() - started
        seconds = max(0.0, wall - (self.compile_s - compiled_before)) if self.listening else wall
        self.tunings += 1
        self.tune_s += seconds
        self._row_add(1, seconds)

    def row_fields(self, key: Hashable) -> Dict[str, float]:
        """A row record's ``compile_s`` / ``tune_s`` (absent when the row had neither)."""
        got = self.rows.pop(key, None)
        compiled, tuned = (round(got[0], 4), round(got[1], 4)) if got else (0.0, 0.0)
        if not (compiled or tuned):
            return {}
        out = {"tune_s": tuned}
        if self.listening:
            out["compile_s"] = compiled
        return out

    def forget_rows(self) -> None:
        self.rows.clear()

    def report(self) -> Dict[str, Any]:
        return {
            # None: triton has no compilation listener, and tune_s includes compiling.
            "compile_s": round(self.compile_s, 3) if self.listening else None,
            "tune_s": round(self.tune_s, 3),
            "tunings": self.tunings,
            "compiles": self.compiles,
            "pool_compiles": self.pool_compiles,
            "compile_cache_hits": self.compile_cache_hits,
            "compiled": dict(self.compiled),
            "pool_compile_s": round(self.pool_compile_s, 3),
        }


def kernel_label(listened: Mapping[str, Any]) -> Optional[str]:
    """The kernel's name and the first 16 of its cache key, from what triton's listener was given
    (``metadata`` holds both); None where it says neither."""
    metadata = listened.get("metadata") or {}
    get = metadata.get if isinstance(metadata, Mapping) else lambda k: getattr(metadata, k, None)
    name, key = get("name"), get("hash")
    if not name:
        return None
    return f"{name} {str(key)[:16]}" if key else str(name)


def install_listener(clock: TuningClock, modules: Mapping[str, Any]) -> Optional[Callable[[], None]]:
    """Put the clock on triton's compilation listener (``triton.knobs.compilation``,
    triton 3.4+), passing every call on to a listener already there. Returns the undo,
    or None where this triton has no listener."""
    compilation = getattr(modules.get("triton.knobs"), "compilation", None)
    if compilation is None or not hasattr(compilation, "listener"):
        return None
    previous = compilation.listener

    def listener(**kwargs: Any) -> None:
        try:
            times = kwargs.get("times")
            clock.on_compile(
                float(getattr(times, "total", 0)) / 1e6, bool(kwargs.get("cache_hit")), kernel_label(kwargs)
            )
        except Exception:  # a figure is never worth a failed compile
            pass
        if previous is not None:
            previous(**kwargs)

    compilation.listener = listener
    clock.listening = True

    def undo() -> None:
        if compilation.listener is listener:
            compilation.listener = previous
        clock.listening = False

    return undo


# ---- the pool -------------------------------------------------------------------


def jit_function(tuner: Any) -> Any:
    """The JITFunction under a tuner (through Heuristics and other wrappers), or None."""
    fn = getattr(tuner, "fn", None)
    for _ in range(16):
        if fn is None or _jit_class(type(fn)) is not None:
            return fn
        fn = getattr(fn, "fn", None)
    return None


def _jit_class(cls: type) -> Optional[type]:
    for c in cls.__mro__:
        if c.__name__ == "JITFunction":
            return c
    return None


def async_compile_of(jit_fn: Any) -> Any:
    """The async-compile module the kernel's jit module reads (triton 3.4+), or None."""
    cls = _jit_class(type(jit_fn)) if jit_fn is not None else None
    module = sys.modules.get(cls.__module__) if cls is not None else None
    found = getattr(module, "_async_compile", None)
    if found is None or not hasattr(found, "AsyncCompileMode") or not hasattr(found, "active_mode"):
        return None
    return found


def index_of(config: Any, configs: Sequence[Any]) -> Optional[int]:
    """Where this very config object stands among the candidates (identity, not ==)."""
    for i, candidate in enumerate(configs):
        if candidate is config:
            return i
    return None


class Precompiler:
    """The compile pool of a session (processes, or threads where the OS cannot fork;
    at most ``workers`` at once) and what it did (the plugin report's ``precompile``)."""

    def __init__(self, workers: int, clock: TuningClock, processes: Optional[bool] = None):
        self.workers = workers
        self.clock = clock
        self.processes = hasattr(os, "fork") if processes is None else processes
        self._pool: Optional[ThreadPoolExecutor] = None
        self.passes = 0  # tuning passes whose candidates went to the pool
        self.submitted = 0  # candidates started on the pool
        self.cached = 0  # of those, already in the Triton cache: loaded, no child forked
        self.failed = 0  # of those, compiles that raised (compiled again by _bench)
        self.errors = 0  # candidates the JIT refused before compiling (left to _bench)
        self.skipped: Dict[str, int] = {}  # why a tuning pass compiled serially

    @property
    def kind(self) -> str:
        return "processes" if self.processes else "threads"

    def pool(self) -> Any:
        if self.processes:
            return ForkPool(self.workers)
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="zlbench-compile")
        return self._pool

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def skip(self, why: str) -> None:
        self.skipped[why] = self.skipped.get(why, 0) + 1

    def compile_candidates(
        self, tuner: Any, configs: Sequence[Any], args: tuple, meta: Dict[str, Any]
    ) -> None:
        """Compile these candidates of ``tuner`` at once, as its ``_bench(*args,
        config=c, **meta)`` would for each, and wait for all of them."""
        if self.workers < 2:
            return self.skip("one_worker")
        if len(configs) < 2:
            return self.skip("one_candidate")
        async_compile = async_compile_of(jit_function(tuner))
        if async_compile is None:
            return self.skip("no_async_compile")
        if async_compile.active_mode.get() is not None:
            return self.skip("async_compile_already_active")
        nargs = getattr(tuner, "nargs", None) or {}
        started = self.clock.now()
        mode = None
        pool = self.pool()
        self.clock.waiting = True
        try:
            with async_compile.AsyncCompileMode(pool, ignore_errors=True) as mode:
                try:
                    for config in configs:
                        self._start(tuner, config, args, meta, nargs)
                    if isinstance(pool, ForkPool):
                        # Inside the mode, whose exit waits for every future.
                        self.cached += pool.run(in_triton_cache, self.clock)
                finally:
                    if isinstance(pool, ForkPool):
                        pool.abandon()
        except Exception:
            # Finishing a compile raised (a hook of the library's): what did not
            # finish is compiled by _bench, on this thread, as before.
            self.errors += 1
        finally:
            self.clock.waiting = False
            self.clock.add_compile_wall(self.clock.now() - started)
        self.passes += 1
        for future in getattr(mode, "raw_futures", None) or ():
            if future.done() and not future.cancelled() and future.exception() is not None:
                self.failed += 1

    def _start(
        self, tuner: Any, config: Any, args: tuple, meta: Dict[str, Any], nargs: Dict[str, Any]
    ) -> None:
        kwargs = getattr(config, "kwargs", {}) or {}
        if meta.keys() & kwargs.keys():
            return  # _bench refuses conflicting meta-parameters itself
        current = dict(meta, **config.all_kwargs())
        try:
            # A config's pre_hook may set what the kernel specialises on (FlagGems'
            # TMA configs set the descriptors' block shape): run it as _bench does.
            if getattr(config, "pre_hook", None) is not None:
                config.pre_hook({**nargs, **current})
            tuner.fn.run(*args, **{**current, "warmup": True, "grid": current.get("grid")})
            self.submitted += 1
        except Exception:
            self.errors += 1

    def report(self) -> Dict[str, Any]:
        return {
            "pool": self.kind,
            "passes": self.passes,
            "submitted": self.submitted,
            "cached": self.cached,
            "failed": self.failed,
            "errors": self.errors,
            "skipped": dict(sorted(self.skipped.items())),
        }


# ---- the process pool -------------------------------------------------------------


class CompileFailedInChild(Exception):
    """A candidate's compile raised in the pool's child; _bench compiles it again."""


def in_triton_cache(key: Any) -> bool:
    """Whether triton's file cache already holds the compile of this async-compile key
    (``<cache dir>/<sha256 of key>/__grp__*``, what ``compile`` looks up first). False
    when unsure (another cache manager): the candidate is then compiled in a child."""
    if not isinstance(key, str) or os.environ.get("TRITON_CACHE_MANAGER"):
        return False
    entry = os.path.join(triton_cache_dir(os.environ), hashlib.sha256(key.encode("utf-8")).hexdigest())
    try:
        return any(name.startswith("__grp__") for name in os.listdir(entry))
    except OSError:
        return False


class ForkPool:
    """What ``AsyncCompileMode`` submits to, for one tuning pass: ``submit`` only
    collects the compiles; ``run`` forks up to ``workers`` children that compile them
    into the Triton cache (``compile_in_children``), waits for them, then runs each
    compile here (now a cache hit) to hand the mode its kernel. A compile that failed in a child is not
    repeated here (its _bench repeats it); one a child did not report is run here."""

    def __init__(self, workers: int):
        self.workers = workers
        self.jobs: List[Tuple[Callable[[], Any], Future]] = []

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        future: Future = Future()
        self.jobs.append(((lambda: fn(*args, **kwargs)) if args or kwargs else fn, future))
        return future

    def shutdown(self, wait: bool = True) -> None:
        pass

    def run(self, cached: Callable[[Any], bool], clock: Optional[TuningClock] = None) -> int:
        """Compile what was submitted; returns how many were already cached."""
        jobs = self.jobs
        fresh = [i for i, (_, future) in enumerate(jobs) if not cached(getattr(future, "_key", None))]
        reports: Dict[int, Tuple[bool, float]] = {}
        if fresh:
            got = compile_in_children([jobs[i][0] for i in fresh], self.workers)
            reports = {fresh[i]: report for i, report in got.items()}
            if clock is not None:
                clock.on_pool_compiles([sec for ok, sec in reports.values() if ok])
        for i, (fn, future) in enumerate(jobs):
            if not reports.get(i, (True, 0.0))[0]:
                future.set_exception(CompileFailedInChild("the compile raised in the pool's child"))
                continue
            try:
                future.set_result(fn())
            except Exception as e:  # the mode ignores it; _bench meets it again
                future.set_exception(e)
        self.jobs = []
        return len(jobs) - len(fresh)

    def abandon(self) -> None:
        """Interrupted before ``run`` finished: nothing left pending (the mode waits)."""
        for _, future in self.jobs:
            if not future.done():
                future.set_exception(CompileFailedInChild("not compiled: the pass was interrupted"))
        self.jobs = []


def compile_in_children(fns: Sequence[Callable[[], Any]], workers: int) -> Dict[int, Tuple[bool, float]]:
    """Run ``fns`` in up to ``workers`` forked children, each handed the next function as
    soon as it reports the last (compile times of one pass differ several-fold between
    configs: fixed shares left most children idle behind the one with the slow ones).
    {index: (ok, seconds)} for every function a child reported on. A child that dies
    takes the function it was running with it (unreported: the caller compiles it) and is
    replaced while functions are left, at most once per function."""
    count = max(1, min(workers, len(fns)))
    children: Dict[int, _Child] = {}  # the child's report pipe -> the child
    reports: Dict[int, Tuple[bool, float]] = {}
    queue = collections.deque(range(len(fns)))
    replacements = len(fns)
    selector = selectors.DefaultSelector()  # no fd limit, unlike select.select

    def start() -> None:
        open_fds = [fd for c in children.values() for fd in (c.job_fd, c.report_fd)]
        with _signals_held():  # a Ctrl-C lands after the child is known, never between
            child = _Child.start(fns, open_fds)
            children[child.report_fd] = child
            selector.register(child.report_fd, selectors.EVENT_READ)
        hand(child)

    def hand(child: "_Child") -> None:
        index = queue.popleft() if queue else None
        if not child.hand(index) and index is not None:
            queue.appendleft(index)  # it died already: its pipe's end says so next

    try:
        for _ in range(count):
            start()
        while children:
            for key, _ in selector.select():
                child = children[key.fd]
                got = child.read_reports()
                if got is None:  # it exited: its pipe closed
                    selector.unregister(key.fd)
                    child.close()
                    del children[key.fd]
                    if queue and replacements > 0:
                        replacements -= 1
                        start()
                    continue
                reports.update(got)
                if child.running is None:
                    hand(child)
    finally:
        for child in children.values():  # interrupted: leave no child behind
            child.kill()
        selector.close()
    return reports


@contextlib.contextmanager
def _signals_held():
    """SIGINT and SIGTERM held back (delivered on leaving) while a child is forked and
    recorded: neither can then run the parent's handlers in the child, or stop the parent
    with a child it does not know of."""
    held = {signal.SIGINT, signal.SIGTERM}
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


class _Child:
    """One forked compile child: it reads a function's index (4 bytes) from its job pipe,
    runs it, and writes ``<index> <ok> <seconds>`` to its report pipe; index -1 (or the
    end of the job pipe) ends it."""

    def __init__(self, pid: int, job_fd: int, report_fd: int):
        self.pid, self.job_fd, self.report_fd = pid, job_fd, report_fd
        self.running: Optional[int] = None
        self.buffer = b""

    @classmethod
    def start(cls, fns: Sequence[Callable[[], Any]], siblings_fds: Sequence[int] = ()) -> "_Child":
        """Fork one; ``siblings_fds``, the earlier children's pipe ends, are closed in it
        (else each child would keep its elders' pipes open)."""
        job_read, job_write = os.pipe()
        report_read, report_write = os.pipe()
        pid = _fork()
        if pid == 0:
            try:  # nothing in the child may return into the parent's code
                for fd in (job_write, report_read, *siblings_fds):
                    os.close(fd)
                _compile_child(job_read, report_write, fns)
            finally:
                os._exit(1)
        os.close(job_read)
        os.close(report_write)
        return cls(pid, job_write, report_read)

    def hand(self, index: Optional[int]) -> bool:
        """Give it function ``index`` to run, or (None) tell it to exit; False when it
        has died already."""
        self.running = index
        try:
            os.write(self.job_fd, struct.pack("<i", -1 if index is None else index))
        except OSError:  # its report pipe's end says so next
            self.running = None
            return False
        return True

    def read_reports(self) -> Optional[Dict[int, Tuple[bool, float]]]:
        """What it reported since the last look; None once it has exited."""
        chunk = os.read(self.report_fd, 65536)
        if not chunk:
            return None
        self.buffer += chunk
        *lines, self.buffer = self.buffer.split(b"\n")
        got: Dict[int, Tuple[bool, float]] = {}
        for line in lines:
            try:
                index, ok, seconds = line.decode("ascii").split(" ")
                got[int(index)] = (ok == "1", float(seconds))
            except ValueError:
                continue
            if int(index) == self.running:
                self.running = None
        return got

    def close(self) -> None:
        for fd in (self.job_fd, self.report_fd):
            try:
                os.close(fd)
            except OSError:
                pass
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass

    def kill(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.close()


def _fork() -> int:
    sys.stdout.flush()
    sys.stderr.flush()
    with warnings.catch_warnings():
        # Python 3.12 warns about fork() in a process with threads; the child only
        # compiles (no device, no lock another thread could hold) and then _exits.
        warnings.simplefilter("ignore", DeprecationWarning)
        return os.fork()


def _compile_child(job_fd: int, report_fd: int, fns: Sequence[Callable[[], Any]]) -> None:
    try:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
        while True:
            job = _read_exactly(job_fd, 4)
            index = struct.unpack("<i", job)[0] if len(job) == 4 else -1
            if not 0 <= index < len(fns):
                break
            started = time.perf_counter()
            ok = "1"
            try:
                fns[index]()
            except BaseException:  # noqa: BLE001 - reported, and compiled again by _bench
                ok = "0"
            os.write(report_fd, f"{index} {ok} {time.perf_counter() - started:.6f}\n".encode("ascii"))
    finally:
        os._exit(0)


def _read_exactly(fd: int, size: int) -> bytes:
    """``size`` bytes from ``fd``, fewer only at its end."""
    data = b""
    while len(data) < size:
        chunk = os.read(fd, size - len(data))
        if not chunk:
            break
        data += chunk
    return data

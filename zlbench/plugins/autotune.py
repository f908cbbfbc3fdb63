"""pytest plugin: record and replay the configs autotuned kernels use.

Loaded with ``-p zlbench.plugins.autotune``; a silent no-op without ZL_RUN_DIR.

Environment: ZL_RUN_DIR, ZL_AUTOTUNE_MODE (``record`` default, ``replay``, ``off``),
REPLAY_FROM (the ``autotune_records/`` dir to replay), USE_FLAGTUNE (recorded, and
compared with the records on replay).

At collection finish it finds every tuner class imported so far: classes named
``LibTuner`` (flag_gems.utils.libentry, a vendor package's copy, ...) or ``Autotuner``
(triton.runtime.autotuner) in any module, plus their subclasses, and wraps their
``run``. The wrapper puts a ``CacheOverlay`` in front of the tuner's ``cache`` (a dict
for triton, a sqlite-backed ConfigCache for LibTuner). The tuner computes its key as
usual and asks the cache; the overlay sees that key and, when replaying, answers with
the recorded config before the real cache is consulted, so a warm FlagGems DB cannot
make a replay silently self-tune, and nothing replayed is written into that DB.
After each call the config the tuner used (``best_config``) is recorded, also when
replaying, so a replaying run's records show what it ran.

Markers (once per kernel key): ``AUTOTUNE_REPLAY_FALLBACK reason=key_missing|
pre_hook_dropped|pre_hook_unmatched|compile_failed kernel= key= [op= dtype= shape=] test=``;
``compile_autotune_replay_no_evict`` when a replayed config failed to compile and the
tuner's cache (LibTuner's, no ``__delitem__``) still holds a config for the key, so the
retry is not a clean self-tune; ``AUTOTUNE_REPLAY_NONE reason=`` when there is nothing to
replay; ``AUTOTUNE_REPLAY_MISMATCH knob=USE_FLAGTUNE`` when the records were made with
another USE_FLAGTUNE.

Cold caches: it also wraps the tuners' ``prune_configs`` and ``_bench``. At a tuning
pass's first ``_bench`` the candidates from there on are compiled at once in up to
ZL_COMPILE_WORKERS forked processes (``zlbench.plugins.precompile``), then benchmarked one by one
as before. It times compiling (triton's compilation listener) and tuning per row
(``compile_s``, ``tune_s`` in the row's record) and per run.

Writes ``$ZL_RUN_DIR/autotune_records/<kernel>.json`` (zlbench.autotune_records) and
``$ZL_RUN_DIR/plugins/autotune.json``, and prints the footer
``autotune: replayed N, fell back M`` or ``autotune: recorded K keys in J kernels``, then
``zlbench[autotune] compile_s=... tune_s=... compile_workers=...``.
"""

from __future__ import annotations

import functools
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Set, Tuple

import pytest

from zlbench import autotune_records as ar
from zlbench import benchenv, knobs, rundir
from zlbench.markers import (
    AUTOTUNE_REPLAY_FALLBACK,
    AUTOTUNE_REPLAY_MISMATCH,
    AUTOTUNE_REPLAY_NONE,
    format_marker,
)
from zlbench.plugins import print_line, write_plugin_json
from zlbench.plugins.keys import PARALLEL_WARMUP_REPLAY, ROW_CONTEXT, ROW_LISTENERS, ROW_RECORD_FIELDS
from zlbench.plugins.precompile import Precompiler, TuningClock, index_of, install_listener, resolve_workers

MODES = benchenv.AUTOTUNE_MODES
TUNER_CLASS_NAMES = ("LibTuner", "Autotuner")
# compile_<phase>_no_evict with phase "autotune_replay" (plain "replay" is the graph
# timer's phase).
NO_EVICT_MARKER = "compile_autotune_replay_no_evict"
_ORIGINAL = "_zl_autotune_original"
_MAX_MARKERS_KEPT = 500


@dataclass(frozen=True)
class AutotuneSettings:
    run_dir: Path
    mode: str
    replay_from: Optional[Path]
    use_flagtune: str
    compile_workers: int = 1  # ZL_COMPILE_WORKERS as given (0: auto)
    host_runs: int = 1  # benchmark processes at once on this host (ZL_HOST_RUNS)


def settings_from_env(environ: Mapping[str, str]) -> Optional[AutotuneSettings]:
    """None without ZL_RUN_DIR (a plain pytest run). REPLAY_FROM and USE_FLAGTUNE are
    read through the knobs table; a bad value raises ValueError (KnobError)."""
    run_dir = benchenv.run_dir(environ)
    if run_dir is None:
        return None
    mode = benchenv.autotune_mode(environ)
    replay_from = knobs.env_value("replay_from", environ)
    use_flagtune = knobs.flag_text(knobs.env_value("use_flagtune", environ))
    return AutotuneSettings(
        Path(run_dir),
        mode,
        records_dir_of(replay_from) if replay_from else None,
        use_flagtune or "0",
        knobs.env_value("compile_workers", environ),
        benchenv.host_runs(environ),
    )


def records_dir_of(path: str) -> Path:
    """REPLAY_FROM names an autotune_records/ dir or a run dir holding one."""
    return rundir.replay_records(Path(path))


# ---- finding tuner classes --------------------------------------------------------


def find_tuner_classes(modules: Mapping[str, Any]) -> List[type]:
    """Classes named LibTuner/Autotuner defined or re-exported by these modules, and all
    their subclasses (policy classes FlagGems makes on the fly are not module globals).

    A class statement binds the class under its own name in its module, and FlagGems
    and triton re-export them under it: a lookup by name per module finds them, where a
    walk over every global of every module (torch, triton and the library hold hundreds
    of thousands) is a noticeable part of each operator's collection."""
    roots: Set[type] = set()
    for module in list(modules.values()):
        try:
            namespace = vars(module)
        except TypeError:
            continue
        for name in TUNER_CLASS_NAMES:
            value = namespace.get(name)
            # type(), not isinstance(): some module globals warn when asked __class__.
            if (
                value is not None
                and issubclass(type(value), type)
                and value.__name__ in TUNER_CLASS_NAMES
                and callable(getattr(value, "run", None))
            ):
                roots.add(value)
    found: Set[type] = set()
    todo = list(roots)
    while todo:
        cls = todo.pop()
        if cls in found:
            continue
        found.add(cls)
        todo.extend(cls.__subclasses__())
    return sorted(found, key=_class_path)


def _class_path(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def tuner_kind(tuner: Any) -> str:
    return ar.LIBTUNER if any(c.__name__ == "LibTuner" for c in type(tuner).__mro__) else ar.AUTOTUNER


def kernel_name(tuner: Any) -> str:
    """``<module>.<qualname>`` of the Python function under the tuner: stable across runs."""
    fn = getattr(tuner, "base_fn", None) or getattr(tuner, "fn", None)
    for _ in range(16):
        if fn is None or (
            hasattr(fn, "__qualname__") and hasattr(fn, "__module__") and not hasattr(fn, "fn")
        ):
            break
        fn = getattr(fn, "fn", None)
    if fn is not None and hasattr(fn, "__qualname__"):
        return f"{fn.__module__}.{fn.__qualname__}"
    return getattr(tuner, "__name__", None) or type(tuner).__name__


# ---- the cache stand-in ---------------------------------------------------------


class CacheOverlay:
    """Stands in for ``tuner.cache``: remembers the key the tuner asked for this call,
    and when replaying answers for it from the records."""

    def __init__(self, inner: Any, resolve: Optional[Callable[[Any], Any]]):
        self.inner = inner
        self.resolve = resolve  # key -> config to inject, or None
        self.depth = 0
        self.last_key: Any = None
        self.stored = False  # the tuner wrote a config this call (it tuned)
        self.injected: Any = None  # the key answered from the records this call
        self.seen: Dict[Any, Any] = {}  # key -> config object last recorded
        self.noted: Any = None  # (timing, key, config) last noted for a row
        self.binding: Any = None  # the tuner's _Binding, set by the session
        self.candidates: Optional[List[Any]] = None  # prune_configs' answer this call
        self.compiled_ahead = False  # this call's candidates went to the compile pool
        self.benched = 0  # _bench calls this call (it tuned)
        self.from_disk = False  # this call's config came from triton's autotune disk cache

    def begin(self) -> None:
        self.last_key = None
        self.from_disk = False
        self.stored = False
        self.injected = None
        self.candidates = None
        self.compiled_ahead = False
        self.benched = 0

    def __contains__(self, key: Any) -> bool:
        self.last_key = key
        if self.resolve is not None and self.resolve(key) is not None:
            return True
        return key in self.inner

    def __getitem__(self, key: Any) -> Any:
        self.last_key = key
        if self.resolve is not None:
            config = self.resolve(key)
            if config is not None:
                self.injected = key
                return config
        return self.inner[key]

    def __setitem__(self, key: Any, value: Any) -> None:
        self.last_key = key
        self.stored = True
        self.inner[key] = value

    def __delitem__(self, key: Any) -> None:
        del self.inner[key]

    def get(self, key: Any, default: Any = None) -> Any:
        try:
            return self[key]
        except KeyError:
            return default

    def __iter__(self):
        return iter(self.inner)

    def __len__(self) -> int:
        return len(self.inner)

    def __getattr__(self, name: str) -> Any:
        # ConfigCache's table_name/model and dict methods stay reachable.
        inner = self.__dict__.get("inner")
        if inner is None:
            raise AttributeError(name)
        return getattr(inner, name)


def from_disk_cache(tuner: Any, overlay: "CacheOverlay") -> bool:
    """The tuner stored a config without benchmarking one, and keeps its winners on disk
    (triton's ``cache_results``, TRITON_CACHE_AUTOTUNING): another process tuned it."""
    return overlay.stored and overlay.benched == 0 and bool(getattr(tuner, "cache_results", False))


class _Binding:
    """What the session knows about one tuner instance."""

    def __init__(self, tuner: Any):
        self.kernel = kernel_name(tuner)
        self.kind = tuner_kind(tuner)
        self.key_names = [str(k) for k in (getattr(tuner, "keys", None) or [])]
        self.tuner_class = type(tuner).__name__
        self.resolved: Dict[Any, Any] = {}  # key -> injected config or None
        self.configs_ref: Any = None
        self.config_index: Dict[str, Any] = {}  # config_id -> the tuner's own config

    def follow_configs(self, tuner: Any) -> None:
        """Re-match when the tuner's config list was swapped (FlagTune does that)."""
        configs = getattr(tuner, "configs", None)
        if configs is not self.configs_ref:
            self.configs_ref = configs
            self.config_index = ar.index_configs(configs or [])
            self.resolved.clear()


# ---- the session ----------------------------------------------------------------


def _current_row(config) -> Any:
    context = config.stash.get(ROW_CONTEXT, None)
    return context.current() if context is not None else None


def _row_key(row: Any) -> Tuple[Any, ...]:
    return (row.op, row.dtype, row.shape, row.side)


class AutotuneSession:
    def __init__(self, settings: AutotuneSettings, emit: Optional[Callable[[str], None]] = None):
        self.settings = settings
        self.records_dir = rundir.records_dir(settings.run_dir)
        self._emit = emit or print_line
        self.coverage = ar.Coverage()
        self.records: Dict[str, ar.KernelRecords] = {}
        self.replay: Dict[str, ar.KernelRecords] = {}
        self.replay_problems: List[str] = []
        self.replay_flagtune: List[str] = []  # USE_FLAGTUNE values the replay was recorded with
        self.asked: Set[Tuple[str, str]] = set()
        self.markers: List[str] = []
        self.patched: List[Tuple[type, str, Any]] = []  # (class, method name, original)
        self.overlaid: List[Any] = []
        self.scanned: Set[str] = set()
        self.current_test: Optional[str] = None
        # The timer plugin's RowContext.current, when one is loaded (set at configure).
        self.current_row: Optional[Callable[[], Any]] = None
        self.replaying = settings.mode == "replay"
        # (op, dtype, shape, side) -> {(kernel, key): config} while that row is timed.
        self.row_configs: Dict[Tuple[Any, ...], Dict[Tuple[str, Any], Any]] = {}
        self.clock = TuningClock(self._timed_row_key)
        self.precompiler = Precompiler(
            resolve_workers(settings.compile_workers, runs=settings.host_runs), self.clock
        )
        self._unlisten: Optional[Callable[[], None]] = None

    def _timed_row_key(self) -> Optional[Tuple[Any, ...]]:
        timing = self.current_row() if self.current_row is not None else None
        return _row_key(timing.row) if timing is not None else None

    # -- lifecycle

    def start(self) -> None:
        if self.replaying:
            self._load_replay()

    def _load_replay(self) -> None:
        src = self.settings.replay_from
        if src is None:
            self.emit(format_marker(AUTOTUNE_REPLAY_NONE, reason="replay_from_unset"))
            return
        if not src.is_dir():
            self.emit(format_marker(AUTOTUNE_REPLAY_NONE, reason="not_found", path=src))
            return
        self.replay, self.replay_problems = ar.load_records(src)
        if not self.replay:
            self.emit(format_marker(AUTOTUNE_REPLAY_NONE, reason="no_records", path=src))
        self.replay_flagtune = sorted(
            {r.use_flagtune for r in self.replay.values() if r.use_flagtune is not None}
        )
        if self.replay_flagtune and self.replay_flagtune != [self.settings.use_flagtune]:
            self.emit(
                format_marker(
                    AUTOTUNE_REPLAY_MISMATCH,
                    knob=knobs.BY_NAME["use_flagtune"].env,
                    recorded=",".join(self.replay_flagtune),
                    current=self.settings.use_flagtune,
                )
            )

    def patch(self, modules: Mapping[str, Any]) -> List[str]:
        """Wrap ``run`` (and ``prune_configs``, ``_bench``) of every tuner class found in
        modules not scanned before; put the tuning clock on triton's compile listener."""
        fresh = {n: m for n, m in list(modules.items()) if n not in self.scanned}
        self.scanned.update(fresh)
        if self._unlisten is None:
            self._unlisten = install_listener(self.clock, modules)
        newly = []
        for cls in find_tuner_classes(fresh):
            wrapped = False
            for name, wrap in _WRAPPERS:
                original = cls.__dict__.get(name)
                if original is None or hasattr(original, _ORIGINAL):
                    continue
                setattr(cls, name, wrap(original, self))
                self.patched.append((cls, name, original))
                wrapped = True
            if wrapped:
                newly.append(_class_path(cls))
        return newly

    def close(self) -> None:
        for cls, name, original in reversed(self.patched):
            setattr(cls, name, original)
        self.patched.clear()
        if self._unlisten is not None:
            self._unlisten()
            self._unlisten = None
        self.precompiler.close()
        for tuner in self.overlaid:
            overlay = tuner.__dict__.get("cache")
            if type(overlay) is CacheOverlay:
                tuner.cache = overlay.inner
        self.overlaid.clear()

    # -- one tuner call

    def call(self, original: Callable[..., Any], tuner: Any, args: tuple, kwargs: dict) -> Any:
        overlay = tuner.__dict__.get("cache")
        if type(overlay) is not CacheOverlay:
            if overlay is None:
                return original(tuner, *args, **kwargs)
            overlay = self._install(tuner, overlay)
        if overlay.depth:  # a subclass's run calling super().run: the outer call counts
            return original(tuner, *args, **kwargs)
        overlay.depth += 1
        token = self.clock.tuner_enter()
        try:
            overlay.begin()
            try:
                ret = original(tuner, *args, **kwargs)
            except Exception as exc:
                if overlay.injected is None or not ar.is_compile_failure(exc):
                    raise
                self._drop_bad_replay(tuner, overlay, exc)
                overlay.begin()
                ret = original(tuner, *args, **kwargs)
        finally:
            overlay.depth -= 1
            overlay.from_disk = from_disk_cache(tuner, overlay)
            self.clock.tuner_exit(
                token, tuned=overlay.benched > 0 or (overlay.stored and not overlay.from_disk)
            )
        if overlay.last_key is not None:
            self._observe(tuner, overlay, overlay.last_key)
            self._note_row_config(tuner, overlay, overlay.last_key)
        return ret

    def note_candidates(self, tuner: Any, configs: Any) -> None:
        """``prune_configs`` answered, inside a tuner call: the candidates of this pass."""
        overlay = tuner.__dict__.get("cache")
        if type(overlay) is CacheOverlay and overlay.depth:
            overlay.candidates = list(configs)

    def before_bench(self, tuner: Any, args: tuple, config: Any, meta: Dict[str, Any]) -> None:
        """A tuner is about to benchmark ``config``. At a pass's first benchmark, the
        candidates from this one on go to the compile pool (a policy that benchmarks
        configs of its own, not the pruned ones, is left to compile them itself)."""
        overlay = tuner.__dict__.get("cache")
        if type(overlay) is not CacheOverlay or not overlay.depth:
            return  # warmup() or a benchmark outside run: not a tuning pass of ours
        overlay.benched += 1
        if overlay.compiled_ahead:
            return
        overlay.compiled_ahead = True
        candidates = overlay.candidates or []
        at = index_of(config, candidates)
        if at is None:
            self.precompiler.skip("not_a_pruned_candidate")
            return
        self.precompiler.compile_candidates(tuner, candidates[at:], args, meta)

    def _note_row_config(self, tuner: Any, overlay: CacheOverlay, key: Any) -> None:
        """Remember which config this key ran with for the row being timed (every
        launch passes here: the same row, key and config as last time costs a compare)."""
        timing = self.current_row() if self.current_row is not None else None
        if timing is None:
            return
        config = getattr(tuner, "best_config", None)
        if config is None:
            config = overlay.seen.get(key)
        last = overlay.noted
        if config is None or (
            last is not None and last[0] is timing and last[2] is config and last[1] == key
        ):
            return
        overlay.noted = (timing, key, config)
        self.row_configs.setdefault(_row_key(timing.row), {})[(overlay.binding.kernel, key)] = config

    def forget_row_configs(self, _timing: Any = None) -> None:
        """After each get_latency: what its rows' records did not take (an untimed call,
        a row that raised) must not reach a later row with the same key."""
        self.row_configs.clear()
        self.clock.forget_rows()

    def row_fields(self, row: Any) -> Dict[str, Any]:
        """The row record's ``autotune``: ``{"<kernel> <key>": <config_id>}`` for each
        autotuned kernel key the row ran (``summary --ab`` compares them), and its
        ``compile_s`` / ``tune_s`` when it compiled or tuned."""
        out: Dict[str, Any] = dict(self.clock.row_fields(_row_key(row)))
        used = self.row_configs.pop(_row_key(row), None)
        if used:
            out["autotune"] = {
                f"{kernel} {ar.key_id(key)}": ar.config_id(ar.encode_config(config))
                for (kernel, key), config in used.items()
            }
        return out

    def _install(self, tuner: Any, inner: Any) -> CacheOverlay:
        binding = tuner.__dict__.get("_zl_binding")
        if binding is None:
            binding = _Binding(tuner)
            tuner._zl_binding = binding
        resolve = None
        if self.replaying:
            resolve = lambda key: self._resolve(tuner, binding, key)  # noqa: E731
        overlay = CacheOverlay(inner, resolve)
        overlay.binding = binding
        tuner.cache = overlay
        self.overlaid.append(tuner)
        return overlay

    def _resolve(self, tuner: Any, binding: _Binding, key: Any) -> Any:
        binding.follow_configs(tuner)
        try:
            return binding.resolved[key]
        except KeyError:
            pass
        kid = ar.key_id(key)
        self.asked.add((binding.kernel, kid))
        rec = self.replay.get(binding.kernel)
        entry = rec.entries.get(kid) if rec else None
        original = None
        if entry is not None:
            original = binding.config_index.get(ar.config_id(entry["config"]))
        choice = ar.choose_replay(entry, binding.kind, original is not None)
        config = None
        if choice.inject:
            if choice.use_original:
                config = original
            else:
                config = ar.build_config(entry["config"], type(tuner.configs[0]))
            self.coverage.note_replayed(binding.kernel, kid)
        else:
            self._fallback(binding, kid, choice.reason)
        binding.resolved[key] = config
        return config

    def _drop_bad_replay(self, tuner: Any, overlay: CacheOverlay, exc: BaseException) -> None:
        """A replayed config failed to compile: stop injecting it and fall back. A cache
        without ``__delitem__`` (LibTuner's) may still hold a config for the key that we
        cannot drop, so the retry is not a clean self-tune: say so."""
        binding: _Binding = overlay.binding
        key = overlay.injected
        binding.resolved[key] = None
        inner = overlay.inner
        try:
            held = key in inner
        except Exception:
            held = False
        kid = ar.key_id(key)
        if held and callable(getattr(type(inner), "__delitem__", None)):
            del inner[key]
            held = False
        if held:
            if self.coverage.note_fallback(binding.kernel, kid, ar.NO_EVICT):
                self.emit(
                    format_marker(
                        NO_EVICT_MARKER,
                        kernel=binding.kernel,
                        key=kid,
                        error=type(exc).__name__,
                        **self._where(),
                    )
                )
        else:
            self._fallback(binding, kid, ar.COMPILE_FAILED, error=type(exc).__name__)

    def _fallback(self, binding: _Binding, kid: str, reason: str, **extra: Any) -> None:
        if self.coverage.note_fallback(binding.kernel, kid, reason):
            self.emit(
                format_marker(
                    AUTOTUNE_REPLAY_FALLBACK,
                    reason=reason,
                    kernel=binding.kernel,
                    key=kid,
                    **extra,
                    **self._where(),
                )
            )

    def _where(self) -> Dict[str, Any]:
        """The table row being timed when the key was first asked for, and the test."""
        out: Dict[str, Any] = {}
        timing = self.current_row() if self.current_row is not None else None
        if timing is not None:
            out.update(op=timing.row.op, dtype=timing.row.dtype, shape=timing.row.shape)
        out["test"] = self.current_test
        return out

    def _observe(self, tuner: Any, overlay: CacheOverlay, key: Any) -> None:
        config = getattr(tuner, "best_config", None)
        if config is None:
            try:
                config = overlay[key]
            except KeyError:
                return
        if overlay.seen.get(key) is config:
            return
        overlay.seen[key] = config
        binding: _Binding = overlay.binding
        if overlay.injected is not None:
            origin = ar.ORIGIN_REPLAYED
        elif overlay.from_disk:
            origin = ar.ORIGIN_DISK
        elif overlay.stored:
            origin = ar.ORIGIN_TUNED
        else:
            origin = ar.ORIGIN_CACHED
        rec = self.records.get(binding.kernel)
        if rec is None:
            rec = ar.KernelRecords(
                binding.kernel,
                binding.kind,
                binding.tuner_class,
                binding.key_names,
                self.settings.use_flagtune,
            )
            self.records[binding.kernel] = rec
        kid = ar.key_id(key)
        self.coverage.note_recorded(binding.kernel, kid, origin)
        if rec.put(key, ar.encode_config(config), origin):
            ar.write_records(self.records_dir, rec)

    # -- reporting

    def emit(self, line: str) -> None:
        if len(self.markers) < _MAX_MARKERS_KEPT:
            self.markers.append(line)
        self._emit(line)

    def counts(self) -> Dict[str, Any]:
        return self.coverage.counts()

    def footer(self) -> str:
        return ar.footer(self.settings.mode, self.counts())

    def time_footer(self) -> str:
        figures = self.clock.report()
        compiled = "-" if figures["compile_s"] is None else f"{figures['compile_s']:.2f}"
        return (
            f"zlbench[autotune] compile_s={compiled} tune_s={figures['tune_s']:.2f} "
            f"tunings={figures['tunings']} compiles={figures['compiles']} "
            f"compile_workers={self.precompiler.workers} ({self.precompiler.kind}) "
            f"precompiled={self.precompiler.submitted}"
        )

    def report(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {
            "mode": self.settings.mode,
            "use_flagtune": self.settings.use_flagtune,
            "records_dir": str(self.records_dir),
            "patched": sorted({_class_path(cls) for cls, _, _ in self.patched}),
            **self.counts(),
            **self.clock.report(),
            "compile_clock": "triton compilation listener" if self.clock.listening else "unavailable",
            "compile_workers": self.precompiler.workers,
            "compile_workers_requested": self.settings.compile_workers,
            "host_runs": self.settings.host_runs,
            "precompile": self.precompiler.report(),
            "kernels": self.coverage.per_kernel(),
            "markers": list(self.markers),
        }
        if self.replaying:
            out["replay_from"] = str(self.settings.replay_from) if self.settings.replay_from else None
            out["records_unused"] = ar.unused_records(self.replay, self.asked)
            out["records_problems"] = list(self.replay_problems)
            out["use_flagtune_recorded"] = list(self.replay_flagtune)
        return out

    def write_report(self) -> Optional[Path]:
        return write_plugin_json("autotune", self.report())


def _wrap_run(original: Callable[..., Any], session: "AutotuneSession") -> Callable[..., Any]:
    @functools.wraps(original)
    def run(self, *args, **kwargs):
        return session.call(original, self, args, kwargs)

    setattr(run, _ORIGINAL, original)
    return run


def _wrap_prune_configs(original: Callable[..., Any], session: "AutotuneSession") -> Callable[..., Any]:
    @functools.wraps(original)
    def prune_configs(self, *args, **kwargs):
        configs = original(self, *args, **kwargs)
        if not isinstance(configs, (list, tuple)):
            configs = list(configs)  # read once here: the tuner gets the same list
        session.note_candidates(self, configs)
        return configs

    setattr(prune_configs, _ORIGINAL, original)
    return prune_configs


def _wrap_bench(original: Callable[..., Any], session: "AutotuneSession") -> Callable[..., Any]:
    @functools.wraps(original)
    def _bench(self, *args, config, **meta):
        session.before_bench(self, args, config, meta)
        return original(self, *args, config=config, **meta)

    setattr(_bench, _ORIGINAL, original)
    return _bench


_WRAPPERS = (("run", _wrap_run), ("prune_configs", _wrap_prune_configs), ("_bench", _wrap_bench))


# ---- pytest hooks ---------------------------------------------------------------

SESSION = pytest.StashKey[AutotuneSession]()


class _Hooks:
    """The session's pytest hooks, registered with the plugin manager while it runs."""

    def __init__(self, session: AutotuneSession):
        self.session = session

    def pytest_collection_finish(self) -> None:
        self.session.patch(sys.modules)

    def pytest_runtest_setup(self, item) -> None:
        # A test may import a package with its own LibTuner after collection.
        self.session.current_test = item.nodeid
        self.session.patch(sys.modules)

    def pytest_runtest_logfinish(self) -> None:
        # After every test too: an attempt the batch stops keeps its compile/tune figures.
        self.session.write_report()

    def pytest_terminal_summary(self, terminalreporter) -> None:
        terminalreporter.write_line(self.session.footer())
        terminalreporter.write_line(self.session.time_footer())

    def pytest_sessionfinish(self) -> None:
        self.session.write_report()

    def pytest_unconfigure(self, config) -> None:
        for key, hook in (
            (ROW_RECORD_FIELDS, self.session.row_fields),
            (ROW_LISTENERS, self.session.forget_row_configs),
        ):
            hooks = config.stash.get(key, [])
            if hook in hooks:
                hooks.remove(hook)
        self.session.close()


def pytest_configure(config) -> None:
    try:
        settings = settings_from_env(os.environ)
    except ValueError as e:
        raise pytest.UsageError(str(e))
    if settings is None or settings.mode == "off":
        return
    merged = config.stash.get(PARALLEL_WARMUP_REPLAY, None)
    if merged is not None:
        # The parallel warmup swept the shapes already: replay what its shards chose.
        settings = AutotuneSettings(
            settings.run_dir,
            "replay",
            records_dir_of(str(merged)),
            settings.use_flagtune,
            settings.compile_workers,
            settings.host_runs,
        )
    session = AutotuneSession(settings)
    session.start()
    # The timer plugin may configure after this one: look its rows up at call time.
    session.current_row = functools.partial(_current_row, config)
    config.stash.setdefault(ROW_RECORD_FIELDS, []).append(session.row_fields)
    config.stash.setdefault(ROW_LISTENERS, []).append(session.forget_row_configs)
    config.stash[SESSION] = session
    config.pluginmanager.register(_Hooks(session), "zlbench-autotune")

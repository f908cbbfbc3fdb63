"""The benchmark process' environment: what ``zlbench run`` hands to pytest, and how the
plugins (and the autotune sweep's shards) read it back.

This module is the only one that writes those variables or reads them; the knobs'
variables are spelled in the knobs table (``Knob.env``, ``Knob.child`` says which ones
the benchmark process gets), the others here. tests/test_import_rules.py keeps every
other module from spelling either.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, Iterable, Mapping, Optional, Sequence

from . import backends, knobs, proc

# Set by `zlbench run` for the benchmark process; never given by a user.
RUN_DIR = "ZL_RUN_DIR"  # the claimed run dir: plugins write their files below it
TIMER = "ZL_TIMER"  # graph or direct, as chosen for the backend
AUTOTUNE_MODE = "ZL_AUTOTUNE_MODE"  # record or replay
WARMUP_DEVICES = "ZL_WARMUP_DEVICES"  # parallel warmup's devices (visibility values), own first
# Set by `zlbench batch` for every run: how many benchmark processes it runs at once on
# this host (its devices here), so that a compile pool takes its share of the CPUs only.
HOST_RUNS = "ZL_HOST_RUNS"
OWN = (RUN_DIR, TIMER, AUTOTUNE_MODE, WARMUP_DEVICES, HOST_RUNS)
AUTOTUNE_MODES = ("record", "replay", "off")
# pytest's own switch: installed third-party plugins stay out unless asked for.
PYTEST_AUTOLOAD_OFF = "PYTEST_DISABLE_PLUGIN_AUTOLOAD"
# triton's switch (knobs.autotuning.cache, read when an autotuner is made): winners kept
# on disk across processes. Set from the autotune_cache knob.
TRITON_AUTOTUNE_CACHE = "TRITON_CACHE_AUTOTUNING"


def env_of(name: str) -> str:
    """A knob's variable (``replay_from`` -> REPLAY_FROM)."""
    return knobs.BY_NAME[name].env


def child_knobs() -> Sequence[knobs.Knob]:
    """The knobs the benchmark process gets in its environment."""
    return [k for k in knobs.KNOBS if k.child]


def variables() -> frozenset:
    """Every variable of the benchmark process this module owns: the child knobs' and its own."""
    return frozenset({k.env for k in child_knobs()} | set(OWN))


def without_settings(environ: Mapping[str, str]) -> Dict[str, str]:
    """``environ`` without any knob variable or run dir: a batch hands the settings to
    each `zlbench run` as flags, so the caller's environment cannot add to them."""
    drop = {k.env for k in knobs.KNOBS} | {RUN_DIR}
    return {k: v for k, v in environ.items() if k not in drop}


def per_run_keys(extra: Iterable[str] = ()) -> frozenset:
    """Keys that differ between attempts by design and that the library under test never
    reads (the run dir, and the caller's tags)."""
    return frozenset({RUN_DIR, *extra})


def child_env(
    base: Mapping[str, str],
    settings: knobs.Settings,
    *,
    run_dir: Path,
    backend: Any,
    device: Any,
    timer: str,
    autotune_mode: str,
    target_env: Mapping[str, str],
    extra: Mapping[str, str],
    replay_from: Optional[Path],
    warmup_pool: Sequence[str],
    autoload: bool,
) -> Dict[str, str]:
    """The benchmark process' environment: ``base`` (the caller's), the corpus' variables,
    the device's visibility, ``extra`` (tuner cache dirs, an A/B side's variables), then
    every child knob as its flag spells it and zlbench's own variables on top."""
    env = dict(base)
    env.update(target_env)
    env.update(backends.visibility_env(backend, device))
    env.update(extra)
    env["PYTHONUNBUFFERED"] = "1"
    backend_only = set(backends.union("child_knobs"))
    for knob in child_knobs():
        if knob.name in backend_only and knob.name not in backend.child_knobs:
            continue  # another backend's knob (cpu threads): absent means "not asked"
        env[knob.env] = knobs.flag_text(settings.values.get(knob.name, knob.default)) or ""
    env[env_of("backend")] = backend.name
    env[RUN_DIR] = str(run_dir)
    env[TIMER] = timer
    env[AUTOTUNE_MODE] = autotune_mode
    env[TRITON_AUTOTUNE_CACHE] = "1" if settings.values.get("autotune_cache", True) else "0"
    if autoload:
        env.pop(PYTEST_AUTOLOAD_OFF, None)
    else:
        env[PYTEST_AUTOLOAD_OFF] = "1"
    if backend.run_env is not None:
        env.update(backend.run_env(settings.values))
    env["PYTHONPATH"] = proc.importable_pythonpath(env.get("PYTHONPATH"))
    if warmup_pool:
        env[WARMUP_DEVICES] = ",".join(warmup_pool)
    if replay_from:
        env[env_of("replay_from")] = str(replay_from)
    else:
        env.pop(env_of("replay_from"), None)
    return env


def sweep_shard_env(environ: Mapping[str, str], shard_dir: Path, shards: int = 1) -> Dict[str, str]:
    """A parallel warmup shard's benchmark process: record mode into its own dir, and no
    replay or recursion. The ``shards`` run at once, so each takes that share of the run's
    CPUs for its compile pool."""
    env = dict(environ)
    for name in ("replay_from", "parallel_warmup_gpus"):
        env.pop(env_of(name), None)
    env[RUN_DIR] = str(shard_dir)
    env[AUTOTUNE_MODE] = "record"
    # Its timings are a sweep's (1 ms warm-up, a host busy compiling): no tile they
    # probe is kept for the run's own.
    env[env_of("graph_tile_cache")] = "off"
    env[HOST_RUNS] = str(host_runs(environ) * max(1, shards))
    return env


# ---- read in the benchmark process ------------------------------------------------


def _environ(environ: Optional[Mapping[str, str]]) -> Mapping[str, str]:
    return os.environ if environ is None else environ


def run_dir(environ: Optional[Mapping[str, str]] = None) -> Optional[Path]:
    """The run dir; None in a plain pytest run (the plugins then stay silent)."""
    value = _environ(environ).get(RUN_DIR)
    return Path(value) if value else None


def backend_name(environ: Optional[Mapping[str, str]] = None) -> Optional[str]:
    return _environ(environ).get(env_of("backend")) or None


def requested_timer(environ: Optional[Mapping[str, str]] = None) -> Optional[str]:
    return _environ(environ).get(TIMER)


def host_runs(environ: Optional[Mapping[str, str]] = None) -> int:
    """Benchmark processes running at once on this host, as the batch said (1 outside a
    batch, or where the value is not a positive number)."""
    try:
        return max(1, int(_environ(environ).get(HOST_RUNS) or 1))
    except ValueError:
        return 1


def autotune_mode(environ: Optional[Mapping[str, str]] = None) -> str:
    """record (the default) or replay; raises ValueError for anything else."""
    mode = (_environ(environ).get(AUTOTUNE_MODE) or "record").strip().lower()
    if mode not in AUTOTUNE_MODES:
        raise ValueError(f"{AUTOTUNE_MODE}={mode!r}: expected one of {', '.join(AUTOTUNE_MODES)}")
    return mode


def warmup_devices(environ: Optional[Mapping[str, str]] = None) -> Sequence[str]:
    """Parallel warmup's devices as visibility values, the run's own first; [] when unset."""
    return [d.strip() for d in _environ(environ).get(WARMUP_DEVICES, "").split(",") if d.strip()]

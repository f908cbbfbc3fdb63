"""pytest plugin: shard the autotune sweep over devices, then measure on one.

Loaded with ``-p zlbench.plugins.parallel_warmup``; a silent no-op unless both
ZL_RUN_DIR and PARALLEL_WARMUP_GPUS=N (N >= 1) are set.

At pytest_configure, before any Benchmark exists, it resolves the shape keys the
selected tests read (zlbench.autotune_sweep), splits their shapes round-robin into N shard
shape files and runs N copies of this pytest invocation at once, shard i on device i
of ZL_WARMUP_DEVICES, each in record mode into ``$ZL_RUN_DIR/warmup/shard-<i>/``.
When every shard exits 0 it merges their records into ``warmup/merged/`` and switches
this process to replay them (``config.stash[PARALLEL_WARMUP_REPLAY]``), so the serial
measurement that follows times the same configs without tuning. That is why its
pytest_configure is ``tryfirst``: zlbench.plugins.autotune reads that stash key in
its own pytest_configure.

Otherwise it prints ``PARALLEL_WARMUP_REFUSED reason=...`` and a line saying why, and
the run sweeps serially as if the plugin were absent. Interrupting the sweep
(Ctrl-C, or SIGTERM from ``zlbench run``) stops and reaps every shard first.

Environment read: ZL_RUN_DIR, PARALLEL_WARMUP_GPUS, ZL_WARMUP_DEVICES, ZL_VISIBLE_KEY
(and the variable it names), ZL_AUTOTUNE_MODE, REPLAY_FROM; for the shards' tuner DBs
ZL_ISOLATE_TUNER_CACHE, FLAGGEMS_CACHE_DIR, FLAGGEMS_DB_URL.
Writes ``$ZL_RUN_DIR/plugins/parallel_warmup.json``.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence

import pytest

from zlbench import benchenv, knobs, proc, rundir
from zlbench.plugins import print_line, run_dir, write_plugin_json
from zlbench.plugins.keys import PARALLEL_WARMUP_REPLAY

if TYPE_CHECKING:
    from zlbench import autotune_sweep

# yaml, zlbench.autotune_sweep (corpus.scan, corpus.tree) and corpus.shapes are imported only once the
# plugin is on: it is loaded into every benchmark process and is off in most of them.

PLUGIN = "parallel_warmup"
# How long a shard gets to exit after SIGTERM before its process group is killed.
GRACE_S = 5.0
_CONFLICTS_KEPT = 50


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config) -> None:
    try:
        n = knobs.env_value("parallel_warmup_gpus")
    except knobs.KnobError as e:
        raise pytest.UsageError(str(e))
    root = run_dir()
    if not n or root is None:
        return
    from zlbench import autotune_sweep

    report: Dict[str, Any] = {"n": n, "refused": None}
    try:
        sweep(config, root, n, report)
    except SweepTerminated:
        _finish(report, "interrupted")
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)  # die as the signal meant, shards reaped
        raise
    except Exception as e:  # a broken parallel warmup must not cost the measurement
        _refuse(
            report,
            autotune_sweep.Refusal(
                autotune_sweep.WARMUP_ERROR, {"error": type(e).__name__}, f"{type(e).__name__}: {e}"
            ),
        )
    except BaseException:
        _finish(report, "interrupted")
        raise
    write_plugin_json(PLUGIN, report)


def _finish(report: Dict[str, Any], refused: str) -> None:
    report["refused"] = refused
    write_plugin_json(PLUGIN, report)


# ---- the sweep -------------------------------------------------------------------


def sweep(config, root: Path, n: int, report: Dict[str, Any]) -> None:
    """Run the sharded sweep and switch this process to replay, or refuse. Fills report."""
    from zlbench import autotune_sweep
    from zlbench.corpus.shapes import ShapeFileError, load_shape_file

    environ = os.environ
    cwd = Path(config.invocation_params.dir)
    raw = [str(a) for a in config.invocation_params.args]
    level = getattr(config.option, "level", None) or autotune_sweep.option_value(raw, "--level")
    shape_file = _shape_file(config, raw, cwd)
    visible_key, pool = autotune_sweep.device_pool(environ)
    report.update(level=level, shape_file=str(shape_file), visible_key=visible_key, device_pool=pool)
    try:
        shapes = load_shape_file(shape_file)
    except ShapeFileError as e:
        return _refuse(
            report, autotune_sweep.Refusal(autotune_sweep.NO_SHAPE_KEY, {"shape_file": shape_file}, str(e))
        )

    resolutions = autotune_sweep.resolve_keys(
        cwd, [str(a) for a in config.args], config.option.markexpr or "", shapes
    )
    by_key = autotune_sweep.shapes_by_key(resolutions, shapes)
    report.update(
        resolutions=[r.to_json() for r in resolutions],
        resolved_keys=list(by_key),
        candidates_tried=_unique(c for r in resolutions for c in r.candidates_tried),
    )
    for res in resolutions:
        print_line(_resolution_line(res))
    refusal = autotune_sweep.refusal_before_launch(
        level, benchenv.autotune_mode(environ), knobs.env_value("replay_from", environ), resolutions, by_key
    )
    if refusal:
        return _refuse(report, refusal)

    shards = autotune_sweep.plan_shards(by_key, n)
    devices = autotune_sweep.shard_devices(pool, len(shards))
    if len(shards) < n:
        print_line(
            f"WARNING: parallel warmup: only {len(shards)} shapes to split; "
            f"{len(shards)} shards instead of {n}"
        )
    if pool and len(pool) < len(shards):
        print_line(
            f"WARNING: parallel warmup: {len(shards)} shards on {len(pool)} devices "
            f"({','.join(pool)}): devices run several shards ({','.join(map(str, devices))})"
        )
    report.update(
        shards=len(shards),
        devices=devices,
        shapes_per_shard=[{k: len(v) for k, v in s.items()} for s in shards],
    )

    warm_dir = rundir.parallel_warmup_dir(root)
    shutil.rmtree(warm_dir, ignore_errors=True)  # a retry must not merge stale records
    fast = hasattr(config.option, "warmup") and hasattr(config.option, "iter")
    jobs = [
        _prepare(i, warm_dir, shapes, subsets, raw, fast, visible_key, devices[i], len(shards))
        for i, subsets in enumerate(shards)
    ]
    report["shard_logs"] = [str(j["log"]) for j in jobs]
    print_line(
        f"parallel warmup: {len(jobs)} shards, devices {_show(devices)}"
        f"{f' ({visible_key})' if visible_key else ''}, shapes per shard "
        f"{'; '.join(_counts(s) for s in shards)}"
    )

    started = time.monotonic()
    procs = launch_shards(jobs, cwd)
    rcs = wait_shards(
        procs,
        on_exit=lambda i, rc: print_line(
            f"parallel warmup: shard {i} (device {devices[i] or '-'}) exited {rc} "
            f"after {time.monotonic() - started:.1f} s"
        ),
    )
    report.update(shard_exit_codes=rcs, sweep_wall_s=round(time.monotonic() - started, 3))
    failure = autotune_sweep.first_failure(rcs, [j["log"] for j in jobs])
    if failure:
        return _refuse(report, failure)
    _adopt_merged(config, jobs, warm_dir, report)


def _adopt_merged(config, jobs: Sequence[Dict[str, Any]], warm_dir: Path, report: Dict[str, Any]) -> None:
    """Merge the shards' records and make this process's autotune plugin replay them."""
    from zlbench import autotune_sweep

    merge = autotune_sweep.load_and_merge([rundir.records_dir(j["dir"]) for j in jobs])
    report.update(
        merged_keys=merge.keys,
        merged_kernels=len(merge.records),
        conflicts=len(merge.conflicts),
        conflicting_keys=[f"{k} {kid}" for k, kid in merge.conflicts[:_CONFLICTS_KEPT]],
    )
    refusal = autotune_sweep.refusal_after_merge(merge)
    if refusal:
        return _refuse(report, refusal)
    merged = autotune_sweep.write_merged(merge, rundir.merged_dir(warm_dir))
    print_line(
        f"parallel warmup: merged {merge.keys} keys in {len(merge.records)} kernels "
        f"from {len(jobs)} shards in {report['sweep_wall_s']:.1f} s; replaying {merged}"
    )
    print_line(merge.warning())
    config.stash[PARALLEL_WARMUP_REPLAY] = merged
    report["merged_dir"] = str(merged)


def _prepare(
    i: int,
    warm_dir: Path,
    shapes: Dict[str, Any],
    subsets,
    raw: List[str],
    fast: bool,
    visible_key: Optional[str],
    device: Optional[str],
    shard_count: int = 1,
) -> Dict[str, Any]:
    import yaml

    from zlbench import autotune_sweep

    shard_dir = rundir.shard_dir(warm_dir, i)
    shard_dir.mkdir(parents=True)
    shape_path = rundir.shapes_path(shard_dir)
    shape_path.write_text(yaml.safe_dump(autotune_sweep.shard_shape_data(shapes, subsets), sort_keys=False))
    env = autotune_sweep.shard_env(os.environ, shard_dir, visible_key, device, shard_count)
    db_dir = autotune_sweep.sqlite_dir(env)
    if db_dir is not None:
        db_dir.mkdir(parents=True, exist_ok=True)
    return {
        "dir": shard_dir,
        "log": shard_dir / rundir.SHARD_LOG,
        "cmd": [sys.executable, "-m", "pytest", *autotune_sweep.shard_args(raw, shape_path, fast)],
        "env": env,
    }


def _refuse(report: Dict[str, Any], refusal: autotune_sweep.Refusal) -> None:
    report["refused"] = refusal.reason
    report["refused_detail"] = refusal.detail
    print_line(refusal.marker())
    print_line(
        f"parallel warmup: refused ({refusal.detail}); the autotune sweep runs serially on this device"
    )


def _shape_file(config, raw: Sequence[str], cwd: Path) -> Path:
    from zlbench import autotune_sweep
    from zlbench.corpus.layout import upstream_shape_file

    given = autotune_sweep.option_value(raw, "--shape_file")
    if given:
        return (cwd / given) if not Path(given).is_absolute() else Path(given)
    default = getattr(config.option, "shape_file", None)
    return Path(default) if default else upstream_shape_file(cwd)


def _resolution_line(res: autotune_sweep.Resolution) -> str:
    tried = ", ".join(res.candidates_tried) or "-"
    if res.key:
        return f"parallel warmup: shape key {res.key} for {res.test} (tried {tried})"
    if res.shapes_from:
        return f"parallel warmup: {res.test} takes its shapes from {res.shapes_from}"
    return f"parallel warmup: no shape key for {res.test} (tried {tried}){_why(res)}"


def _why(res: autotune_sweep.Resolution) -> str:
    return f": {res.problem}" if res.problem else ""


def _counts(subsets: Dict[str, List[Any]]) -> str:
    return ",".join(f"{k}={len(v)}" for k, v in subsets.items())


def _show(devices: Sequence[Optional[str]]) -> str:
    return ",".join(d or "-" for d in devices)


def _unique(items) -> List[str]:
    return list(dict.fromkeys(items))


# ---- shard processes -------------------------------------------------------------


class SweepTerminated(BaseException):
    """SIGTERM arrived while shards were running (``zlbench run`` forwards it)."""


def launch_shards(jobs: Sequence[Dict[str, Any]], cwd: Path) -> List[proc.Child]:
    """Start every shard in its own process group (so the group can be killed whole),
    output to its log. A shard whose parent dies without reaping it gets SIGTERM."""
    procs: List[proc.Child] = []
    try:
        for job in jobs:
            with open(job["log"], "wb") as log:
                procs.append(proc.start(job["cmd"], job["env"], log, cwd=str(cwd), parent_death=True))
    except BaseException:
        stop_shards(procs)
        raise
    return procs


def wait_shards(procs: Sequence[proc.Child], grace_s: float = GRACE_S, on_exit=None) -> List[int]:
    """Exit codes in shard order. Anything raised meanwhile (KeyboardInterrupt, or
    SweepTerminated for SIGTERM) stops and reaps every shard before it propagates."""
    previous = _raise_on_sigterm()
    try:
        pending = dict(enumerate(procs))
        while pending:
            for i, shard in list(pending.items()):
                if shard.poll() is not None:
                    del pending[i]
                    if on_exit is not None:
                        on_exit(i, shard.returncode)
            if pending:
                time.sleep(0.05)
        return [p.returncode for p in procs]
    except BaseException:
        stop_shards(procs, grace_s)
        raise
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def stop_shards(procs: Sequence[proc.Child], grace_s: float = GRACE_S) -> None:
    """Stop every shard's process group (zlbench.proc's one rule) and reap them all."""
    proc.stop(procs, grace_s)


def _raise_on_sigterm():
    def handler(signum, frame):
        raise SweepTerminated()

    try:
        return signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread: leave SIGTERM alone
        return None

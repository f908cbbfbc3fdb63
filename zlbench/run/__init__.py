"""One operator, measured: preflight, claim the dir, plan plugins, launch, record.

``execute_run`` is what ``zlbench run`` calls; the batch calls ``zlbench run`` in a
subprocess, so everything a run needs to be trusted happens here.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, TextIO, Tuple

from .. import backends, benchenv, knobs, proc, providers, rundir, tuner_cache
from ..backends import Backend, Device, DeviceError
from ..corpus.results import record_args, records_json
from ..markers import NO_MEASUREMENT, format_marker
from ..providers import ResolveError, Target
from ..rundir import EXIT_FAILED, EXIT_OK, EXIT_PREFLIGHT
from ..safe_read import read_text_capped, resolve_path
from . import identity as ident
from .outdir import claim_run_dir, use_run_dir
from .preflight import (
    PreflightFailed,
    check_plugins_importable,
    check_replay_from,
    check_shape_file,
    check_torch_importable,
)
from .tee import pump

# How long a child gets to exit after SIGINT/SIGTERM before it is killed.
CHILD_GRACE_S = 10.0


@dataclass
class RunPlan:
    settings: knobs.Settings
    backend: Backend
    device: Device
    target: Target
    timer: str
    plugins: List[str]
    shape_file: Path
    replay_from: Optional[Path]
    provider_versions: Dict[str, str]
    # Parallel warmup only: visibility values of the caller's devices, the run's own first.
    parallel_warmup_pool: List[str] = field(default_factory=list)
    # The corpus' conftest takes --record json: the run dir keeps FlagGems' own result file.
    records_json: bool = False

    @property
    def autotune_mode(self) -> str:
        return "replay" if self.replay_from else "record"


def plan_run(settings: knobs.Settings, environ=os.environ) -> RunPlan:
    """Everything decided before the run dir exists; raises PreflightFailed."""
    try:
        backend = backends.get_backend(settings.backend) if settings.backend else backends.detect_backend()
    except backends.UnknownBackend as e:
        raise PreflightFailed(benchenv.env_of("backend"), str(e)) from None
    selection = [settings.device] if settings.device is not None else None
    # One vendor-tool call, however many device lists the run needs.
    probed = [] if backend.slots_only else backend.probe_devices()
    try:
        found = backend.devices(environ, selection, probed=probed)
    except DeviceError as e:
        raise PreflightFailed("device", str(e)) from None
    if not found:
        raise PreflightFailed(
            "device",
            f"no {backend.name} device found ({backend.visible_key or 'none'} unset and "
            f"{' '.join(backend.list_tool or ()) or 'no tool'} lists none); pass --device or --backend",
        )
    try:
        provider = providers.make_provider(settings)
        target = provider.resolve(settings.op, settings.op_file, settings.test_node)
    except ResolveError as e:
        raise PreflightFailed(e.check, str(e), e.path) from None
    check_torch_importable()
    shape_file = check_shape_file(settings.shape_mode, settings.shape_file) or target.upstream_shape_file
    replay_from = check_replay_from(settings.replay_from)
    timer = backends.choose_timer(backend, settings.enable_cudagraph)
    plugins = backends.plugin_plan(backend, settings.enable_cudagraph)
    check_plugins_importable(plugins)
    pool = (
        parallel_warmup_pool(found[0], backend.devices(environ, probed=probed))
        if settings.parallel_warmup_gpus
        else []
    )
    return RunPlan(
        settings,
        backend,
        found[0],
        target,
        timer,
        plugins,
        shape_file,
        replay_from,
        provider.versions(),
        pool,
        records_json(target.root),
    )


def pytest_command(plan: RunPlan, color: bool, run_dir: Optional[Path] = None) -> List[str]:
    s = plan.settings
    cmd = [sys.executable, "-m", "pytest", "-s", "-p", "no:cacheprovider"]
    if plan.target.layout == "v5.0.2":
        # v5.0.2's conftest logs through a handler that pytest >= 9.1 replaces.
        cmd += ["-p", "no:logging"]
    for plugin in plan.plugins:
        cmd += ["-p", plugin]
    for plugin in extra_pytest_plugins(s):
        cmd += ["-p", plugin]
    cmd += plan.target.pytest_args
    cmd += ["--level", s.level, "--mode", "kernel"]
    for dtype in s.dtypes or ():
        cmd += ["--dtypes", dtype]
    if s.shape_mode == "file":
        cmd += ["--shape_file", str(plan.shape_file)]
    if plan.records_json and run_dir is not None:
        cmd += record_args(rundir.perf_result_path(run_dir))
    cmd.append("--color=yes" if color else "--color=no")
    return cmd


AUTOLOAD = "autoload"


def extra_pytest_plugins(settings: knobs.Settings) -> List[str]:
    """ZL_PYTEST_PLUGINS without the 'autoload' word: the -p names to add."""
    return [n for n in (settings.values.get("pytest_plugins") or ()) if n != AUTOLOAD]


def plugin_autoload(settings: knobs.Settings) -> bool:
    """Installed third-party plugins cost seconds of start-up per operator (2.4 s on an
    H200 host) and can change collection; they load only when ZL_PYTEST_PLUGINS asks."""
    return AUTOLOAD in (settings.values.get("pytest_plugins") or ())


def child_env(plan: RunPlan, run_dir: Path, extra: Dict[str, str]) -> Dict[str, str]:
    """The benchmark process' environment (zlbench/benchenv.py writes it)."""
    return benchenv.child_env(
        os.environ,
        plan.settings,
        run_dir=run_dir,
        backend=plan.backend,
        device=plan.device,
        timer=plan.timer,
        autotune_mode=plan.autotune_mode,
        target_env=plan.target.env,
        extra=extra,
        replay_from=plan.replay_from,
        warmup_pool=plan.parallel_warmup_pool,
        autoload=plugin_autoload(plan.settings),
    )


def parallel_warmup_pool(own_device: Device, every: List[Device]) -> List[str]:
    """Visibility values of the caller's devices, the run's own first: parallel warmup
    shard i runs on entry i, so a caller who chose 6,7 is never moved to 0,1."""
    own = own_device.visible or own_device.index
    return [own] + [d for v in every if (d := v.visible or v.index) != own]


def archive_shapes(plan: RunPlan, run_dir: Path) -> None:
    """shapes.yaml: the shape file actually used, with the level it was used at."""
    header = (
        f"# zlbench: level={plan.settings.level} shape_mode={plan.settings.shape_mode} "
        f"source={plan.shape_file}\n"
    )
    body = plan.shape_file.read_text() if plan.shape_file.is_file() else "# (no shape file found)\n"
    rundir.shapes_path(run_dir).write_text(header + body)


def build_identity(plan: RunPlan, run_dir: Path, cache_description: str) -> dict:
    s = plan.settings
    return {
        "zlbench_version": _own_version(),
        "status": "running",
        "started": ident.now_iso(),
        "command": ident.command_line(),
        "run_dir": str(run_dir),
        "op": s.op,
        "provider": s.provider,
        "corpus_root": str(plan.target.root),
        "layout": plan.target.layout,
        "test_node": plan.target.test_node,
        "backend": plan.backend.name,
        "device": {"index": plan.device.index, "visible": plan.device.visible, "model": plan.device.model},
        "timer": plan.timer,
        "autotune_mode": plan.autotune_mode,
        "replay_from": str(plan.replay_from) if plan.replay_from else None,
        "use_flagtune": s.use_flagtune,
        "tuner_cache": cache_description,
        # How long tuning takes, not what it picks (not caliber); the autotune plugin's
        # report says how many threads it used.
        "compile_workers": s.compile_workers,
        "gc_freeze": s.gc_freeze,  # FlagGems' per-row gc.collect() visits only new objects
        "level": s.level,
        "dtypes": list(s.dtypes) if s.dtypes else "default",
        "repeat": s.direct_repeat,
        "direct_timer": direct_timer_identity(plan),
        "cpu_threads": s.cpu_threads if plan.backend.run_env is not None else None,
        "shape_source": {"mode": s.shape_mode, "file": str(plan.shape_file)},
        "plugins_planned": plan.plugins,
        "pytest_plugins": {"autoload": plugin_autoload(s), "requested": extra_pytest_plugins(s)},
        "knobs": s.caliber(),
        "knob_sources": {k: v for k, v in s.sources.items()},
        "versions": {**ident.package_versions(), **plan.provider_versions},
    }


def direct_timer_identity(plan: RunPlan) -> dict:
    """How rows that are not graph-timed are measured; ``l2_flush`` says whether the L2
    cache is cleared before each timed call (only FlagGems' do_bench does: the per-call
    timer keeps L2 warm, as graph replay and do_bench_cudagraph do)."""
    s = plan.settings
    if s.direct_timer == "do_bench":
        # triton's do_bench zeroes a 256 MB buffer before each call; the host one cannot.
        return {
            "mode": "do_bench",
            "repeat": s.direct_repeat,
            "l2_flush": plan.backend.torch_device is not None,
        }
    backend = plan.backend
    clock = f"torch.{backend.torch_device}.Event" if backend.torch_device else "host"
    if s.direct_timer == "kernels" and backend.torch_device and backend.profiler_activity:
        # What the benchmark process finds decides; its plugin report says which it used.
        clock = f"torch.profiler.{backend.profiler_activity}"
    return {"mode": s.direct_timer, "noise_target_pct": s.direct_noise, "l2_flush": False, "clock": clock}


def device_state_identity(reports: Dict[str, dict]) -> dict:
    """Whether clocks were locked and where device state came from, lifted from the
    timer plugin's report; "unknown" when no timer reported (it never started)."""
    for plugin in ("graph_timer", "direct_timer"):
        state = (reports.get(plugin) or {}).get("device_state")
        if isinstance(state, dict):
            return {
                "clocks_locked": state.get("clocks_locked", "unknown"),
                "device_state": {k: v for k, v in state.items() if k != "clocks_locked"},
            }
    return {
        "clocks_locked": "unknown",
        "device_state": {"source": "unavailable", "reason": "no timer plugin report"},
    }


def _own_version() -> str:
    from .. import __version__

    return __version__


def _print(line: str, out: TextIO, log) -> None:
    out.write(line + "\n")
    out.flush()
    log.write((line + "\n").encode())
    log.flush()


def header_lines(plan: RunPlan, run_dir: Path, ident_data: dict, cmd: List[str]) -> List[str]:
    s = plan.settings
    caliber = " ".join(
        f"{k}={'-' if v is None else knobs.flag_text(v)}" for k, v in ident_data["knobs"].items()
    )
    return [
        f"=== zlbench run: {s.op or plan.target.test_node} ({s.provider}) started {ident_data['started']} ===",
        f"run dir      {run_dir}",
        f"backend      {plan.backend.name}  device {plan.device.index} ({plan.device.model})  "
        f"timer {plan.timer}  autotune {ident_data['autotune_mode']}  tuner_cache {ident_data['tuner_cache']}",
        f"caliber      {caliber}",
        f"node         {plan.target.test_node}",
        f"shapes       {plan.shape_file} (level {s.level})",
        f"plugins      {' '.join(plan.plugins)}",
        f"command      {' '.join(cmd)}",
    ]


# What zlbench run prints when the benchmark process let go of its output pipe while
# it ran on (batch.classify takes the line as the attempt's error).
OUTPUT_CLOSED = "zlbench run: the benchmark process closed its output"


def spawn_pytest(cmd: List[str], cwd: str, env: Dict[str, str], output_fd: int):
    """The benchmark process as a fresh interpreter (``python -m pytest ...``), in our
    own process group: Ctrl-C reaches it as it reaches us, and the batch's SIGKILL of our
    group takes it along."""
    return proc.start(cmd, env, output_fd, cwd=cwd, new_group=False)


def _launch(cmd, cwd, env, log, out: Optional[TextIO], cap_bytes: int, start=spawn_pytest) -> int:
    """Run the benchmark process, teeing its output (to ``out`` too unless None, and at
    most ``cap_bytes`` of it to run.log); never leave it running.
    ``start(cmd, cwd, env, output_fd)`` returns a Popen-like child: a fresh interpreter
    by default, a fork of a warm batch worker (zlbench.run.worker) there."""
    read_fd, write_fd = os.pipe()
    try:
        child = start(cmd, cwd, env, write_fd)
    finally:
        os.close(write_fd)
    closed_at: List[float] = []

    def copy() -> None:
        pump(read_fd, log, out, cap_bytes)
        # EOF while the process still holds its open files: it closed its stdout and
        # stderr itself (at an exit the pipe closes as the whole file table goes).
        if proc.holds_files(child.pid):
            closed_at.append(time.monotonic())

    pumper = threading.Thread(target=copy, daemon=True)
    pumper.start()

    def forward(signum, _frame):
        # The batch stops us with SIGTERM; pass it on, then let wait() below finish.
        if child.poll() is None:
            child.send_signal(signum)

    previous = signal.signal(signal.SIGTERM, forward)
    try:
        rc = child.wait()
    except KeyboardInterrupt:
        # Ctrl-C reached the child too (same process group); give it time to report.
        proc.stop([child], CHILD_GRACE_S, sig=None, group=False)
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)
        if child.poll() is None:
            proc.stop([child], 0, sig=None, group=False)
        exited_at = time.monotonic()
        pumper.join(timeout=5)
        os.close(read_fd)
    if closed_at:
        # Its stdout and stderr closed (os.close(1), os.close(2)) while it ran on: what it
        # printed after that is lost, and "exit 1" alone would say nothing.
        line = (
            f"{OUTPUT_CLOSED} {max(0.0, exited_at - closed_at[0]):.1f} s before it exited (it closed "
            "or redirected stdout and stderr); anything it printed after that is lost\n"
        )
        log.write(line.encode())
        log.flush()
        sys.stdout.write(line)
        sys.stdout.flush()
    return rc


def run_from_flags(
    flags: Dict[str, object], run_dir: Optional[Path] = None, start=spawn_pytest, echo: bool = True
) -> int:
    """``zlbench run``'s body: resolve the knobs (a bad value is a preflight failure,
    exit 3), then measure. The batch's warm workers call it in a forked child."""
    from .preflight import PreflightFailed

    flags = dict(flags)
    echo = bool(flags.pop("echo", echo))
    try:
        settings = knobs.resolve(flags)
    except knobs.KnobError as e:
        failure = PreflightFailed(e.knob.env, e.format_message())
        sys.stdout.write(failure.marker() + "\n")
        sys.stdout.flush()
        sys.stderr.write(f"zlbench run: {e.format_message()}\n")
        return EXIT_PREFLIGHT
    return execute_run(settings, run_dir=run_dir, start=start, echo=echo)


def planned_benchmark(flags: Dict[str, object]) -> Tuple[str, Dict[str, str]]:
    """(cwd, environment) the benchmark process of ``zlbench run`` with these flags gets,
    without creating anything; ZL_RUN_DIR names no dir. A warm worker's spare imports
    the library under test in them. Runs with isolated tuner caches (a fresh cache dir
    each) have no such plan: ValueError."""
    flags = dict(flags)
    flags.pop("echo", None)
    settings = knobs.resolve(flags)
    if settings.isolate_tuner_cache:
        raise ValueError("isolated tuner caches: every run has its own environment")
    plan = plan_run(settings)
    env = child_env(plan, Path(settings.out or ".") / "planned-run", {})
    return str(plan.target.root), env


def execute_run(
    settings: knobs.Settings,
    run_dir: Optional[Path] = None,
    out: Optional[TextIO] = None,
    extra_env: Optional[Dict[str, str]] = None,
    start=spawn_pytest,
    echo: bool = True,
) -> int:
    """Measure one operator. Returns the exit code of ``zlbench run``."""
    out = sys.stdout if out is None else out
    started = time.monotonic()
    try:
        plan = plan_run(settings)
        # Absolute before anything uses it: the benchmark process runs in the corpus
        # root, and a relative dir would put the plugins' files below the corpus.
        try:
            run_dir = (
                use_run_dir(resolve_path(run_dir))
                if run_dir
                else claim_run_dir(resolve_path(settings.out), settings.op)
            )
        except OSError as e:
            where = "--run-dir" if run_dir else "--out"
            raise PreflightFailed(
                "run_dir",
                f"{where} {run_dir or settings.out}: cannot create "
                f"the run dir ({e.strerror or e}); give a writable directory",
                Path(str(run_dir or settings.out)),
            ) from None
    except PreflightFailed as e:
        out.write(e.marker() + "\n")
        out.write(f"zlbench run: preflight failed ({e.check}): {e}\n")
        return EXIT_PREFLIGHT

    # zlbench ab keeps each side's isolated Triton cache to check that its switch is live.
    keep_triton = os.environ.get("ZL_KEEP_TRITON_CACHE") == "1"
    cache = tuner_cache.plan_tuner_cache(
        run_dir, settings.isolate_tuner_cache, os.environ, keep_triton_cache=keep_triton
    )
    archive_shapes(plan, run_dir)
    ident_data = build_identity(plan, run_dir, cache.description)
    if keep_triton and cache.triton_cache_dir is not None:
        ident_data["triton_cache_dir"] = str(cache.triton_cache_dir)
    rundir.write_identity(run_dir, ident_data)

    color = out.isatty() if hasattr(out, "isatty") else False
    cmd = pytest_command(plan, color, run_dir)
    env = child_env(plan, run_dir, {**cache.env, **(extra_env or {})})
    rc: Optional[int] = None
    with open(rundir.run_log_path(run_dir), "wb") as log:
        for line in header_lines(plan, run_dir, ident_data, cmd):
            _print(line, out, log)
        try:
            rc = _launch(
                cmd,
                str(plan.target.root),
                env,
                log,
                out if echo else None,
                settings.output_cap_mb * 1024 * 1024,
                start,
            )
        except KeyboardInterrupt:
            pass  # rc stays None: recorded as interrupted, and the exit code is 130
        finally:
            cache.cleanup()
            elapsed = time.monotonic() - started
            code = _exit_code(rc)
            if code == EXIT_OK:
                code = _verify_measured(run_dir, settings.op, out, log)
            reports = rundir.read_plugin_reports(run_dir)
            ident_data.update(
                {
                    "status": "ok" if code == EXIT_OK else ("interrupted" if rc is None else "failed"),
                    "finished": ident.now_iso(),
                    "duration_s": round(elapsed, 3),
                    "exit_code": code,
                    "plugins": reports,
                }
            )
            loaded = (reports.get("phases") or {}).get("pytest_plugins")
            if loaded:
                ident_data["pytest_plugins"].update(loaded)
            ident_data.update(device_state_identity(reports))
            merged = (reports.get("parallel_warmup") or {}).get("merged_dir")
            if merged and not reports["parallel_warmup"].get("refused"):
                # The measurement replayed the sharded sweep's merged configs.
                ident_data["autotune_mode"] = "replay(parallel_warmup)"
                ident_data["replay_from"] = merged
            rundir.write_identity(run_dir, ident_data)
            _print(
                f"=== zlbench run: {settings.op or plan.target.test_node} finished: exit {code} "
                f"({ident_data['status']}) in {elapsed:.1f} s ===",
                out,
                log,
            )
    if code == EXIT_OK:
        _mark_complete(run_dir)
    out.write(f"{run_dir}\n")
    out.flush()
    return code


def _verify_measured(run_dir: Path, op: Optional[str], out: TextIO, log) -> int:
    """Exit 0 from pytest is not enough: the log must show pytest's closing line and at
    least one row that can be counted. Otherwise NO_MEASUREMENT and exit 1."""
    from ..runlog import measurement_problem

    log.flush()
    text, _ = read_text_capped(rundir.run_log_path(run_dir))
    problem = measurement_problem(text, op)
    if problem is None:
        return EXIT_OK
    reason, detail = problem
    _print(format_marker(NO_MEASUREMENT, reason=reason, op=op, detail=detail), out, log)
    return EXIT_FAILED


def _exit_code(rc: Optional[int]) -> int:
    if rc is None:
        return 130
    if rc < 0:  # killed by a signal: the shell's convention
        return 128 - rc
    return rc


def _mark_complete(run_dir: Path) -> None:
    rundir.mark_complete(run_dir, ident.now_iso())

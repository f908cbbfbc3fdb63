"""Every setting of a run, in one table.

A knob has a CLI flag and (most) an environment variable (the names users already
export in their scripts), a default, a parser that rejects bad values before any pytest
starts, a scope, and whether the benchmark process gets it (``child``: zlbench/benchenv.py
writes those into its environment):

  caliber  what a number means: printed in the run header, recorded in
           run_identity.json, compared by ``summary --ab``; a resumed batch keeps its
           plan's value and refuses a flag or variable that differs
  corpus   what is measured, and with which code (the corpus, the operator, the pytest
           plugins loaded): fixed on resume like the caliber, not part of it
  batch    how a run or batch goes about it (timeouts, retries, workers, output cap):
           a resume may change it, and plan.json records the change
  reader   settings of the commands that read results (never in a run's record)

Precedence: flag, then environment, then (on ``--resume``, batch scope) the plan's
value, then default.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Tuple

import click

from zlbench.timing import DEFAULT_NOISE_TARGET, DIRECT_MODES, TARGET_REPLAY_MS, WARMUP_RULES

from . import backends

BENCH_LEVELS = ("core", "comprehensive")
SHAPE_MODES = ("file", "upstream")
PROVIDERS = ("sample", "flaggems")
# FlagGems' --dtypes choices (benchmark/conftest.py).
KNOWN_DTYPES = ("float16", "float32", "bfloat16", "int16", "int32", "bool", "cfloat")
RUN_MODES = ("worker", "fresh")

CALIBER, CORPUS, BATCH, READER = "caliber", "corpus", "batch", "reader"
SCOPES = (CALIBER, CORPUS, BATCH, READER)


class KnobError(click.UsageError, ValueError):
    """A knob value that cannot be used; the message names flag, variable and fix."""

    def __init__(self, knob: "Knob", value: object, why: str, from_env: bool = False):
        self.knob = knob
        self.value = value
        self.why = why
        if from_env:
            where = f"{knob.env}={value!r} (from the environment; the flag is {knob.flag})"
        elif knob.env:
            where = f"{knob.flag} / {knob.env}={value!r}"
        else:
            where = f"{knob.flag} {value!r}"
        super().__init__(f"{where}: {why}", ctx=None)


def _text(knob: "Knob", raw: str) -> Optional[str]:
    return raw.strip() or None


def _bool(knob: "Knob", raw: str) -> bool:
    low = raw.strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off", ""):
        return False
    raise KnobError(knob, raw, "expected 0 or 1 (also true/false, yes/no)")


def _nonneg_int(knob: "Knob", raw: str) -> int:
    try:
        value = int(raw.strip())
    except ValueError:
        raise KnobError(knob, raw, "expected a whole number") from None
    if value < 0:
        raise KnobError(knob, raw, "must not be negative")
    return value


def _positive_int(knob: "Knob", raw: str) -> int:
    value = _nonneg_int(knob, raw)
    if value < 1:
        raise KnobError(knob, raw, "must be at least 1")
    return value


def _seconds(knob: "Knob", raw: str) -> float:
    """Seconds >= 0 that a wait can use: inf, nan and 1e400 are refused here, not after
    a child has started."""
    try:
        value = float(raw.strip())
    except ValueError:
        raise KnobError(knob, raw, "is not a number of seconds") from None
    if not math.isfinite(value):
        raise KnobError(knob, raw, "is not a finite number of seconds (0 means no limit)")
    if value < 0:
        raise KnobError(knob, raw, "is negative (0 means no limit)")
    return value


def _percent(knob: "Knob", raw: str) -> float:
    try:
        value = float(raw.strip())
    except ValueError:
        raise KnobError(knob, raw, "expected a percentage such as 0.5") from None
    if not 0 < value < 100:
        raise KnobError(knob, raw, "must be above 0 and below 100 (percent)")
    return value


def _percent_or_off(knob: "Knob", raw: str) -> float:
    if raw.strip() in ("0", "0.0", "off"):
        return 0.0
    return _percent(knob, raw)


def _replay_ms(knob: "Knob", raw: str) -> float:
    try:
        value = float(raw.strip())
    except ValueError:
        raise KnobError(knob, raw, "expected milliseconds such as 0.5") from None
    if not 0.01 <= value <= 100:
        raise KnobError(knob, raw, "must be from 0.01 to 100 (milliseconds of one replay)")
    return value


def _dir_or_off(knob: "Knob", raw: str) -> Optional[str]:
    """A directory, or "off" (also 0, false, no); blank: the knob's default place."""
    value = raw.strip()
    if value.lower() in ("off", "0", "false", "no"):
        return "off"
    # Absolute here: the benchmark process runs in the corpus' root, not the caller's cwd.
    return os.path.abspath(os.path.expanduser(value)) if value else None


def _choice(choices: Tuple[str, ...]) -> Callable[["Knob", str], str]:
    def parse(knob: "Knob", raw: str) -> str:
        value = raw.strip().lower()
        if value not in choices:
            raise KnobError(knob, raw, f"choose one of: {', '.join(choices)}")
        return value

    return parse


def split_dtypes(text: str) -> Tuple[Tuple[str, ...], List[str]]:
    """(names, unknown names) of a dtype list: commas or spaces, ``torch.`` dropped
    (``torch.float16, bfloat16`` -> float16, bfloat16)."""
    names = tuple(d.strip().replace("torch.", "") for d in text.replace(" ", ",").split(",") if d.strip())
    return names, [d for d in names if d not in KNOWN_DTYPES]


def _dtypes(knob: "Knob", raw: str) -> Optional[Tuple[str, ...]]:
    names, bad = split_dtypes(raw)
    if bad:
        raise KnobError(
            knob, raw, f"unknown dtype {', '.join(bad)}; FlagGems accepts {', '.join(KNOWN_DTYPES)}"
        )
    return names or None


def _names(knob: "Knob", raw: str) -> Optional[Tuple[str, ...]]:
    names = tuple(n.strip() for n in raw.replace(" ", ",").split(",") if n.strip())
    bad = [n for n in names if n.startswith("-")]
    if bad:
        raise KnobError(knob, raw, f"{', '.join(bad)}: give plugin names (xdist, my.plugin), not flags")
    return names or None


@dataclass(frozen=True)
class Knob:
    name: str
    env: Optional[str]  # None: a flag only
    flag: str
    default: Any
    parse: Callable[["Knob", str], Any]
    scope: str
    help: str
    child: bool = False  # the benchmark process gets it (zlbench/benchenv.py)
    switch: bool = False  # a boolean given as --flag / --no-flag
    metavar: Optional[str] = None  # --help's name of the value (default: the variable)

    def __post_init__(self) -> None:
        assert self.scope in SCOPES, self.scope

    @property
    def caliber(self) -> bool:
        return self.scope == CALIBER

    @property
    def fixed_on_resume(self) -> bool:
        """A resumed batch keeps the plan's value: it changes what is measured."""
        return self.scope in (CALIBER, CORPUS)

    def args(self, value: Any) -> Tuple[str, ...]:
        """The command-line words that give this value (``--retries 2``, ``--no-worker-prestart``)."""
        if self.switch:
            return (self.flag if value else "--no-" + self.flag[2:],)
        return (self.flag, flag_text(value) or "")

    def parse_value(self, raw: Any) -> Any:
        if raw is None:
            return self.default
        if not isinstance(raw, str):
            raw = str(raw)
        return self.parse(self, raw)


KNOBS: List[Knob] = [
    Knob(
        "provider",
        "ZL_PROVIDER",
        "--provider",
        None,
        _choice(PROVIDERS),
        CORPUS,
        "Where benchmarks come from: the bundled 'sample' corpus or a 'flaggems' checkout "
        "(default: flaggems when a FlagGems dir is given, else sample).",
    ),
    Knob(
        "flaggems_dir",
        "FLAGGEMS_DIR",
        "--flaggems-dir",
        None,
        _text,
        CORPUS,
        "FlagGems checkout (the parent of benchmark/); implies --provider flaggems.",
    ),
    Knob("op", "OP", "--op", None, _text, CORPUS, "Operator to measure (its pytest mark)."),
    Knob(
        "op_file",
        "OP_FILE",
        "--op-file",
        None,
        _text,
        CORPUS,
        "Benchmark file holding the operator, when its name does not say (test_<op>.py).",
    ),
    Knob(
        "test_node",
        "TEST_NODE",
        "--test-node",
        None,
        _text,
        CORPUS,
        "A pytest node to run as is (benchmark/test_abs.py::test_abs); overrides --op.",
    ),
    Knob(
        "backend",
        "ZL_BACKEND",
        "--backend",
        None,
        _text,
        CALIBER,
        f"{', '.join(backends.BACKENDS)}, or an alias "
        f"({', '.join(a for b in backends.BACKENDS.values() for a in b.aliases[:1])}, ...); "
        "default: detected.",
        child=True,
    ),
    Knob(
        "device",
        "ZL_DEVICE",
        "--device",
        None,
        _text,
        CALIBER,
        "Device index within the visible devices (default: the first).",
    ),
    Knob(
        "level",
        "BENCH_LEVEL",
        "--level",
        "core",
        _choice(BENCH_LEVELS),
        CALIBER,
        "FlagGems bench level: core or comprehensive (adds set_more_shapes).",
    ),
    Knob(
        "dtypes",
        "DTYPES",
        "--dtypes",
        None,
        _dtypes,
        CALIBER,
        "Comma-separated dtypes (float16,bfloat16); default: each operator's own.",
    ),
    Knob(
        "shape_file",
        "SHAPE_FILE",
        "--shape-file",
        None,
        _text,
        CALIBER,
        "Shape file (core_shapes.yaml format) to measure with.",
    ),
    Knob(
        "shape_mode",
        "SHAPE_MODE",
        "--shape-mode",
        None,
        _choice(SHAPE_MODES),
        CALIBER,
        "file: use --shape-file; upstream: the corpus' own core_shapes.yaml "
        "(default: file when a shape file is given, else upstream).",
    ),
    Knob(
        "replay_from",
        "REPLAY_FROM",
        "--replay-from",
        None,
        _text,
        CALIBER,
        "autotune_records/ dir (or a run dir holding one) whose configs to replay. "
        "In zlbench batch: an earlier batch dir (each op replays <dir>/<op>/autotune_records).",
        child=True,
    ),
    Knob(
        "use_flagtune",
        "USE_FLAGTUNE",
        "--use-flagtune",
        False,
        _bool,
        CALIBER,
        "1: FlagGems' FlagTune autotuning; 0 (default): plain autotune.",
        child=True,
    ),
    Knob(
        "isolate_tuner_cache",
        "ZL_ISOLATE_TUNER_CACHE",
        "--isolate-tuner-cache",
        False,
        _bool,
        CALIBER,
        "1: give the run its own FLAGGEMS_CACHE_DIR and TRITON_CACHE_DIR (default 0).",
        child=True,
    ),
    Knob(
        "autotune_cache",
        "ZL_AUTOTUNE_CACHE",
        "--autotune-cache",
        True,
        _bool,
        CALIBER,
        "1 (default): triton's autotuner keeps each key's winner in its cache dir and a later "
        "process takes it from there (TRITON_CACHE_AUTOTUNING=1, triton 3.4 and later; its key "
        "holds triton's version, the kernel's source and the whole config list, so a change to "
        "any re-tunes), as FlagGems' own tuner keeps winners in its DB; 0: every process "
        "benchmarks every candidate again.",
    ),
    Knob(
        "direct_repeat",
        "ZL_DIRECT_REPEAT",
        "--direct-repeat",
        1,
        _positive_int,
        CALIBER,
        "Direct timer: repeat each timed call N times and take the median (default 1).",
        child=True,
    ),
    Knob(
        "direct_timer",
        "ZL_DIRECT_TIMER",
        "--direct-timer",
        "kernels",
        _choice(DIRECT_MODES),
        CALIBER,
        "How the direct timer measures (rows that cannot be graph-captured): kernels "
        "(every call on its own: the device time of the kernels and copies it ran, from "
        "the profiler's trace, host gaps left out like graph replay leaves them out; "
        "percall's clock where the backend has no tracer or a call ran nothing on the "
        "device), percall (device events around every call, host gaps in), both until "
        "the median is pinned to ZL_DIRECT_NOISE or 10x the rep budget, warm L2; or "
        "do_bench (FlagGems' kernel mode: triton's do_bench with its L2 flush, "
        "ZL_DIRECT_REPEAT times, median).",
        child=True,
    ),
    Knob(
        "direct_noise",
        "ZL_DIRECT_NOISE",
        "--direct-noise",
        DEFAULT_NOISE_TARGET * 100,
        _percent,
        CALIBER,
        "kernels and percall direct timers: stop once the median's 95% confidence half-width is "
        "within this many percent of it (nvbench's --max-noise; default 0.5).",
        child=True,
    ),
    Knob(
        "cpu_threads",
        "ZL_CPU_THREADS",
        "--cpu-threads",
        1,
        _positive_int,
        CALIBER,
        "cpu backend: torch threads (and OMP/MKL) of the benchmark process (default 1, "
        "so that rows repeat on a shared machine).",
        child=True,
    ),
    Knob(
        "cpu_keep_memory",
        "ZL_CPU_KEEP_MEMORY",
        "--cpu-keep-memory",
        True,
        _bool,
        CALIBER,
        "cpu backend: 1 (default) keeps the memory the benchmark process frees for its next "
        "allocation (glibc's mmap threshold fixed at 32 MiB, trim threshold at 1 GiB, by "
        "mallopt), so a row that allocates is not timed with the page faults of memory "
        "handed back and taken again; 0 leaves glibc's adaptive thresholds.",
        child=True,
    ),
    Knob(
        "enable_cudagraph",
        "ZL_ENABLE_CUDAGRAPH",
        "--enable-cudagraph",
        True,
        _bool,
        CALIBER,
        "0 forces the direct timer on backends that can graph-capture (default 1).",
    ),
    Knob(
        "graph_placements",
        "ZL_GRAPH_PLACEMENTS",
        "--graph-placements",
        8,
        _positive_int,
        CALIBER,
        "Graph timer: time each row over N placements of its inputs in device memory "
        "(the inputs where they are, then moved copies), its median the trimmed mean of the "
        "placements' own medians, so that a row's number does not hang on one "
        "process's addresses (default 8; 1: where they are).",
        child=True,
    ),
    Knob(
        "graph_replay_ms",
        "ZL_GRAPH_REPLAY_MS",
        "--graph-replay-ms",
        TARGET_REPLAY_MS,
        _replay_ms,
        CALIBER,
        "Graph timer: unroll about this many milliseconds of calls into one replay (default "
        "1.0). Each replay carries the graph's fixed launch cost, about 3 us on an H200, so "
        "a row of many calls per graph reads that cost over this length slower: 0.5 reads "
        "such rows about 0.3% slower than 1.0, the same for every row, which is why it is "
        "caliber; shorter replays make cheaper captures.",
        child=True,
    ),
    Knob(
        "graph_tiles",
        "ZL_GRAPH_TILES",
        "--graph-tiles",
        True,
        _bool,
        CALIBER,
        "Graph timer, CUDA: 1 (default) builds a graph of many calls from one captured tile "
        "of the probe's calls, chained as child graphs (the same kernels on the same "
        "addresses, for the capture of one tile: a capture goes call by call through the "
        "library's wrapper); 0 captures every call.",
        child=True,
    ),
    Knob(
        "graph_tile_cache",
        "ZL_GRAPH_TILE_CACHE",
        "--graph-tile-cache",
        None,
        _dir_or_off,
        BATCH,
        "Graph timer, tiled graphs: where each row's tile size and graph length are kept, per "
        "device and operator, so that every run on the host builds a row's graphs alike (the "
        "other batch of an A/A, both sides of an A/B, the next night): the probe's calls and "
        "the plan's length follow times per call that move from process to process, and a "
        "graph's length moves its row (its launch cost is a share of every call); kept per device "
        "model, so hosts that share the directory build alike too (give one to hosts that start "
        "fresh each night). Default: "
        "$XDG_CACHE_HOME/zlbench/graph_tiles (~/.cache/...); off: every timing's tile is its "
        "probe's and its length the plan's.",
        child=True,
        metavar="DIR|off",
    ),
    Knob(
        "graph_noise",
        "ZL_GRAPH_NOISE",
        "--graph-noise",
        DEFAULT_NOISE_TARGET * 100,
        _percent_or_off,
        CALIBER,
        "Graph timer: after a first round of replays at every placement, stop once the pooled "
        "median's 95% confidence half-width is within this many percent of it; otherwise more "
        "rounds, each as long as that CI says is needed, within the caller's rep budget "
        "(default 0.5; 0: always fill the budget, as before this rule).",
        child=True,
    ),
    Knob(
        "warmup_rule",
        "ZL_WARMUP_RULE",
        "--warmup-rule",
        "settle",
        _choice(WARMUP_RULES),
        CALIBER,
        "How long each timing warms up after its first call: 'settle' (default) until per-call "
        "time stops drifting and the device is at its working clock, FlagGems' --warmup as the "
        "cap; 'budget' FlagGems' --warmup at least (1,000 ms per timing).",
        child=True,
    ),
    Knob(
        "parallel_warmup_gpus",
        "PARALLEL_WARMUP_GPUS",
        "--parallel-warmup-gpus",
        0,
        _nonneg_int,
        BATCH,
        "Shard the autotune sweep over N devices before measuring on one (default 0: off).",
        child=True,
    ),
    Knob(
        "compile_workers",
        "ZL_COMPILE_WORKERS",
        "--compile-workers",
        0,
        _nonneg_int,
        BATCH,
        "Autotuned kernels: compile the candidate configs an autotuner is about to "
        "benchmark in N forked processes at once (threads where the OS cannot fork), then "
        "benchmark them one by one as before, so the same config wins and only the wait "
        "changes (1: triton's own way, each compiled inside the benchmark loop; default 0: "
        "this run's share of the CPUs the process may use, less one, at most 16).",
        child=True,
    ),
    Knob(
        "tracer_prestart",
        "ZL_TRACER_PRESTART",
        "--tracer-prestart",
        False,
        _bool,
        BATCH,
        "Batch workers: a prestarted benchmark process also starts the profiler's tracer "
        "(the direct timer's, where it traces), so its one-time start-up is off the run's clock "
        "(default off: with the tracer up, graph-timed rows measure differently).",
        child=True,
        switch=True,
    ),
    Knob(
        "gc_freeze",
        "ZL_GC_FREEZE",
        "--gc-freeze",
        True,
        _bool,
        BATCH,
        "After collection, move the benchmark process's long-lived objects (torch, triton, the "
        "library) out of the garbage collector's view, so FlagGems' gc.collect() after each "
        "row visits only that row's objects (default 1; nothing timed changes; a warm worker's "
        "prestarted benchmark process freezes what its import of the library left before its run; "
        "0: neither freezes, though a warm worker still freezes what it imported before forking).",
        child=True,
    ),
    Knob(
        "pytest_plugins",
        "ZL_PYTEST_PLUGINS",
        "--pytest-plugins",
        None,
        _names,
        CORPUS,
        "Third-party pytest plugins the benchmark process loads (-p each, comma list); "
        "'autoload' loads every installed one as plain pytest does. Default: none "
        "(PYTEST_DISABLE_PLUGIN_AUTOLOAD=1; the loaded ones are recorded in run_identity.json).",
    ),
    Knob(
        "output_cap_mb",
        "ZL_OUTPUT_CAP_MB",
        "--output-cap-mb",
        64,
        _positive_int,
        BATCH,
        "Most MiB of a benchmark's output kept in run.log: beyond it the first and last "
        "halves are kept and an OUTPUT_TRUNCATED line marks the cut.",
    ),
    Knob("out", "ZL_OUT", "--out", "runs", _text, BATCH, "Root under which run dirs are created."),
]

# What --help says of a knob whose explanation is long (the whole text: docs/cli.md,
# generated from Knob.help); a knob not listed shows its help as is.
SHORT_HELP: Dict[str, str] = {
    "provider": "sample (the bundled corpus) or flaggems (a checkout); default: flaggems when a "
    "FlagGems dir is given.",
    "shape_mode": "file: use --shape-file; upstream: the corpus' core_shapes.yaml (default: file "
    "when a shape file is given).",
    "replay_from": "autotune_records/ dir (or a run dir) whose configs to replay; in batch, an "
    "earlier batch dir.",
    "direct_timer": "kernels (traced device time per call), percall (device events per call) or "
    "do_bench (FlagGems' kernel mode).",
    "direct_noise": "kernels/percall: stop once the median's 95% CI half-width is within this many percent.",
    "cpu_threads": "cpu backend: torch (and OMP/MKL) threads of the benchmark process.",
    "cpu_keep_memory": "cpu backend: 1 keeps freed memory for the next allocation (mallopt), so "
    "rows are not timed with page faults.",
    "graph_placements": "Graph timer: time each row over N placements of its inputs in device "
    "memory, the row their medians' trimmed mean.",
    "pytest_plugins": "Third-party pytest plugins the benchmark process loads (comma list; "
    "'autoload': all installed).",
    "output_cap_mb": "Most MiB of a benchmark's output kept in run.log (head and tail kept, "
    "OUTPUT_TRUNCATED between).",
}

# How a batch goes about its operators: flags of `zlbench batch` (and, where they make
# sense, `ab`), recorded in plan.json; a --resume may change them (flag or variable, else
# the plan's). Not in run_identity.json and never given to the benchmark process.
BATCH_KNOBS: List[Knob] = [
    Knob(
        "timeout",
        None,
        "--timeout",
        1800.0,
        _seconds,
        BATCH,
        "Per operator and attempt (its process group is stopped); 0: none.",
        metavar="SECONDS",
    ),
    Knob(
        "retries",
        None,
        "--retries",
        1,
        _nonneg_int,
        BATCH,
        "Extra attempts for failures that look transient (timeout, signal).",
        metavar="N",
    ),
    Knob(
        "kill_grace",
        None,
        "--kill-grace",
        10.0,
        _seconds,
        BATCH,
        "Between SIGTERM and SIGKILL when a group is stopped.",
        metavar="SECONDS",
    ),
    Knob(
        "stall_timeout",
        "ZL_STALL_TIMEOUT",
        "--stall-timeout",
        0.0,
        _seconds,
        BATCH,
        "Stop an attempt after this long without output, rows or cache growth; 0: off.",
        metavar="SECONDS",
    ),
    Knob(
        "run_mode",
        "ZL_RUN_MODE",
        "--run-mode",
        "worker",
        _choice(RUN_MODES),
        BATCH,
        "worker: a warm worker per device forks each attempt; fresh: a new `zlbench run` each.",
        metavar="|".join(RUN_MODES),
    ),
    Knob(
        "worker_max_ops",
        "ZL_WORKER_MAX_OPS",
        "--worker-max-ops",
        50,
        _positive_int,
        BATCH,
        "Replace a worker after this many attempts.",
        metavar="N",
    ),
    Knob(
        "worker_prestart",
        "ZL_WORKER_PRESTART",
        "--worker-prestart",
        True,
        _bool,
        BATCH,
        "Ready the next operator's process, library imported, while one runs.",
        switch=True,
    ),
]

# Settings of the commands that read results, not of a run: never in run_identity.json,
# and not flags of `run` or `batch`.
READER_KNOBS: List[Knob] = [
    Knob(
        "history_db",
        "ZL_HISTORY_DB",
        "--db",
        None,
        _text,
        READER,
        "SQLite file that `zlbench history` records screens in (default: "
        "$XDG_DATA_HOME/zlbench/history.sqlite, else ~/.local/share/zlbench/history.sqlite).",
    ),
]

BY_NAME: Dict[str, Knob] = {k.name: k for k in KNOBS + BATCH_KNOBS + READER_KNOBS}
# The variables of run settings and readers (a batch knob's variable is no caliber, and
# an A/B side may set it).
BY_ENV: Dict[str, Knob] = {k.env: k for k in KNOBS + READER_KNOBS if k.env}
BATCH_OPTIONS = [k.name for k in BATCH_KNOBS]


def history_db_path(value: Optional[str] = None, environ: Optional[Mapping[str, str]] = None) -> str:
    """The history database: --db, else ZL_HISTORY_DB, else under the user's data dir."""
    environ = os.environ if environ is None else environ
    chosen = resolve({"history_db": value}, environ, names=["history_db"]).history_db
    if chosen:
        return os.path.expanduser(chosen)
    data = environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return os.path.join(data, "zlbench", "history.sqlite")


@dataclass
class Settings:
    """Resolved knob values, and where each came from (flag, env or default)."""

    values: Dict[str, Any]
    sources: Dict[str, str]

    def __getattr__(self, name: str) -> Any:
        try:
            return self.__dict__["values"][name]
        except KeyError:
            raise AttributeError(name) from None

    def caliber(self) -> Dict[str, Any]:
        """The caliber knobs by env name, as recorded in run_identity.json."""
        out = {}
        for knob in KNOBS:
            if knob.caliber:
                value = self.values[knob.name]
                out[knob.env] = list(value) if isinstance(value, tuple) else value
        return out

    def origin(self, name: str) -> str:
        """How an error names where a value came from: ``ZL_BACKEND=cdua`` when the
        environment gave it, else the flag (``--backend``)."""
        knob = BY_NAME[name]
        if self.sources.get(name) == "env":
            return f"{knob.env}={flag_text(self.values.get(name))}"
        return knob.flag

    def replace(self, **changes: Any) -> "Settings":
        values = dict(self.values)
        sources = dict(self.sources)
        for name, value in changes.items():
            values[name] = value
            sources[name] = "derived"
        return Settings(values, sources)


def resolve(
    flags: Mapping[str, Any],
    environ: Optional[Mapping[str, str]] = None,
    names: Optional[Iterable[str]] = None,
) -> Settings:
    """Flag beats environment beats default; every value goes through its parser."""
    environ = os.environ if environ is None else environ
    values: Dict[str, Any] = {}
    sources: Dict[str, str] = {}
    for knob in KNOBS if names is None else [BY_NAME[n] for n in names]:
        flag_value = flags.get(knob.name)
        if flag_value is not None:
            values[knob.name], sources[knob.name] = knob.parse_value(flag_value), "flag"
        elif knob.env and environ.get(knob.env) not in (None, ""):
            try:
                values[knob.name], sources[knob.name] = knob.parse_value(environ[knob.env]), "env"
            except KnobError as e:
                # The user never typed the flag: lead with the variable that gave the value.
                raise KnobError(knob, e.value, e.why, from_env=True) from None
        else:
            values[knob.name], sources[knob.name] = knob.default, "default"
    if values.get("shape_mode") is None and "shape_mode" in values:
        values["shape_mode"] = "file" if values.get("shape_file") else "upstream"
        sources["shape_mode"] = "derived"
    if values.get("provider") is None and "provider" in values:
        values["provider"] = "flaggems" if values.get("flaggems_dir") else "sample"
        sources["provider"] = "derived"
    return Settings(values, sources)


def fixed_on_resume(name: str) -> bool:
    """Whether a resumed batch must keep plan.json's value of setting ``name`` (an
    unknown name counts: it came from a newer or older table)."""
    knob = BY_NAME.get(name)
    return knob is None or knob.fixed_on_resume


def env_value(name: str, environ: Optional[Mapping[str, str]] = None) -> Any:
    """A knob as a benchmark process reads it from the environment ``zlbench run`` gave
    it: the flag's own parser; unset or blank is the default. Raises KnobError."""
    knob = BY_NAME[name]
    raw = (os.environ if environ is None else environ).get(knob.env) if knob.env else None
    return knob.default if raw is None or not raw.strip() else knob.parse_value(raw)


def knob_options(names: Iterable[str]):
    """Click decorator adding the flags of these knobs; values stay raw strings (or
    None when not given) so that resolve() can apply precedence and validation. The
    help is SHORT_HELP's where a knob has one (docs/cli.md has the whole text)."""
    knobs = [BY_NAME[n] for n in names]

    def decorate(fn):
        for knob in reversed(knobs):
            help_text = SHORT_HELP.get(knob.name, knob.help) + (f" Env: {knob.env}." if knob.env else "")
            if knob.switch:
                shown = "on" if knob.default else "off"
                fn = click.option(
                    f"{knob.flag}/--no-{knob.flag[2:]}",
                    knob.name,
                    default=None,
                    help=f"{help_text} [default: {shown}]",
                )(fn)
                continue
            fn = click.option(
                knob.flag,
                knob.name,
                default=None,
                metavar=knob.metavar or knob.env,
                help=f"{help_text}{default_help(knob)}",
            )(fn)
        return fn

    return decorate


def default_help(knob: Knob) -> str:
    if knob.default is None:
        return ""
    shown = f"{knob.default:g}" if isinstance(knob.default, float) else flag_text(knob.default)
    return f" [default: {shown}]"


def flag_text(value: Any) -> Optional[str]:
    """A knob value as its flag or variable spells it (True -> 1, a list -> a,b); None stays None."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value))
    return str(value)


# The settings of the benchmark process itself, not of what it measures: one help group
# of `run` and of `batch`.
BENCHMARK_PROCESS_KNOBS = [
    "tracer_prestart",
    "parallel_warmup_gpus",
    "compile_workers",
    "gc_freeze",
    "pytest_plugins",
    "output_cap_mb",
]
# The knobs `zlbench run` and `zlbench batch` share: what to measure and how.
MEASURE_KNOBS = [k.name for k in KNOBS if k.name not in ("op", "op_file", "test_node", "device", "out")]

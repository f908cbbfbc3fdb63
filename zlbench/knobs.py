"""Every setting of a run, in one table.

A knob has a CLI flag and an environment variable (the names users already export in
their scripts), a default, a parser that rejects bad values before any pytest starts,
and a ``caliber`` flag: caliber knobs change what a number means, so they are printed
in the run header, recorded in run_identity.json, and compared by ``summary --ab``.

Precedence: flag, then environment, then default.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Tuple

import click

from zlbench.timing import DEFAULT_NOISE_TARGET, DIRECT_MODES, WARMUP_RULES

from . import backends

BENCH_LEVELS = ("core", "comprehensive")
SHAPE_MODES = ("file", "upstream")
PROVIDERS = ("sample", "flaggems")
# FlagGems' --dtypes choices (benchmark/conftest.py).
KNOWN_DTYPES = ("float16", "float32", "bfloat16", "int16", "int32", "bool", "cfloat")


class KnobError(click.UsageError, ValueError):
    """A knob value that cannot be used; the message names flag, variable and fix."""

    def __init__(self, knob: "Knob", value: object, why: str, from_env: bool = False):
        self.knob = knob
        self.value = value
        self.why = why
        where = (
            f"{knob.env}={value!r} (from the environment; the flag is {knob.flag})"
            if from_env
            else f"{knob.flag} / {knob.env}={value!r}"
        )
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
    env: str
    flag: str
    default: Any
    parse: Callable[["Knob", str], Any]
    caliber: bool
    help: str

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
        False,
        "Where benchmarks come from: the bundled 'sample' corpus or a 'flaggems' checkout "
        "(default: flaggems when a FlagGems dir is given, else sample).",
    ),
    Knob(
        "flaggems_dir",
        "FLAGGEMS_DIR",
        "--flaggems-dir",
        None,
        _text,
        False,
        "FlagGems checkout (the parent of benchmark/); implies --provider flaggems.",
    ),
    Knob("op", "OP", "--op", None, _text, False, "Operator to measure (its pytest mark)."),
    Knob(
        "op_file",
        "OP_FILE",
        "--op-file",
        None,
        _text,
        False,
        "Benchmark file holding the operator, when its name does not say (test_<op>.py).",
    ),
    Knob(
        "test_node",
        "TEST_NODE",
        "--test-node",
        None,
        _text,
        False,
        "A pytest node to run as is (benchmark/test_abs.py::test_abs); overrides --op.",
    ),
    Knob(
        "backend",
        "ZL_BACKEND",
        "--backend",
        None,
        _text,
        True,
        f"{', '.join(backends.BACKENDS)}, or an alias "
        f"({', '.join(a for b in backends.BACKENDS.values() for a in b.aliases[:1])}, ...); "
        "default: detected.",
    ),
    Knob(
        "device",
        "ZL_DEVICE",
        "--device",
        None,
        _text,
        True,
        "Device index within the visible devices (default: the first).",
    ),
    Knob(
        "level",
        "BENCH_LEVEL",
        "--level",
        "core",
        _choice(BENCH_LEVELS),
        True,
        "FlagGems bench level: core or comprehensive (adds set_more_shapes).",
    ),
    Knob(
        "dtypes",
        "DTYPES",
        "--dtypes",
        None,
        _dtypes,
        True,
        "Comma-separated dtypes (float16,bfloat16); default: each operator's own.",
    ),
    Knob(
        "shape_file",
        "SHAPE_FILE",
        "--shape-file",
        None,
        _text,
        True,
        "Shape file (core_shapes.yaml format) to measure with.",
    ),
    Knob(
        "shape_mode",
        "SHAPE_MODE",
        "--shape-mode",
        None,
        _choice(SHAPE_MODES),
        True,
        "file: use --shape-file; upstream: the corpus' own core_shapes.yaml "
        "(default: file when a shape file is given, else upstream).",
    ),
    Knob(
        "replay_from",
        "REPLAY_FROM",
        "--replay-from",
        None,
        _text,
        True,
        "autotune_records/ dir (or a run dir holding one) whose configs to replay. "
        "In zlbench batch: an earlier batch dir (each op replays <dir>/<op>/autotune_records).",
    ),
    Knob(
        "use_flagtune",
        "USE_FLAGTUNE",
        "--use-flagtune",
        False,
        _bool,
        True,
        "1: FlagGems' FlagTune autotuning; 0 (default): plain autotune.",
    ),
    Knob(
        "isolate_tuner_cache",
        "ZL_ISOLATE_TUNER_CACHE",
        "--isolate-tuner-cache",
        False,
        _bool,
        True,
        "1: give the run its own FLAGGEMS_CACHE_DIR and TRITON_CACHE_DIR (default 0).",
    ),
    Knob(
        "direct_repeat",
        "ZL_DIRECT_REPEAT",
        "--direct-repeat",
        1,
        _positive_int,
        True,
        "Direct timer: repeat each timed call N times and take the median (default 1).",
    ),
    Knob(
        "direct_timer",
        "ZL_DIRECT_TIMER",
        "--direct-timer",
        "kernels",
        _choice(DIRECT_MODES),
        True,
        "How the direct timer measures (rows that cannot be graph-captured): kernels "
        "(every call on its own: the device time of the kernels and copies it ran, from "
        "the profiler's trace, host gaps left out like graph replay leaves them out; "
        "percall's clock where the backend has no tracer or a call ran nothing on the "
        "device), percall (device events around every call, host gaps in), both until "
        "the median is pinned to ZL_DIRECT_NOISE or 10x the rep budget, warm L2; or "
        "do_bench (FlagGems' kernel mode: triton's do_bench with its L2 flush, "
        "ZL_DIRECT_REPEAT times, median).",
    ),
    Knob(
        "direct_noise",
        "ZL_DIRECT_NOISE",
        "--direct-noise",
        DEFAULT_NOISE_TARGET * 100,
        _percent,
        True,
        "kernels and percall direct timers: stop once the median's 95% confidence half-width is "
        "within this many percent of it (nvbench's --max-noise; default 0.5).",
    ),
    Knob(
        "cpu_threads",
        "ZL_CPU_THREADS",
        "--cpu-threads",
        1,
        _positive_int,
        True,
        "cpu backend: torch threads (and OMP/MKL) of the benchmark process (default 1, "
        "so that rows repeat on a shared machine).",
    ),
    Knob(
        "cpu_keep_memory",
        "ZL_CPU_KEEP_MEMORY",
        "--cpu-keep-memory",
        True,
        _bool,
        True,
        "cpu backend: 1 (default) keeps the memory the benchmark process frees for its next "
        "allocation (glibc's mmap threshold fixed at 32 MiB, trim threshold at 1 GiB, by "
        "mallopt), so a row that allocates is not timed with the page faults of memory "
        "handed back and taken again; 0 leaves glibc's adaptive thresholds.",
    ),
    Knob(
        "enable_cudagraph",
        "ZL_ENABLE_CUDAGRAPH",
        "--enable-cudagraph",
        True,
        _bool,
        True,
        "0 forces the direct timer on backends that can graph-capture (default 1).",
    ),
    Knob(
        "graph_placements",
        "ZL_GRAPH_PLACEMENTS",
        "--graph-placements",
        8,
        _positive_int,
        True,
        "Graph timer: time each row over N placements of its inputs in device memory "
        "(the inputs where they are, then moved copies), replays pooled, so that a row's "
        "number does not hang on one process's addresses (default 8; 1: where they are).",
    ),
    Knob(
        "graph_noise",
        "ZL_GRAPH_NOISE",
        "--graph-noise",
        DEFAULT_NOISE_TARGET * 100,
        _percent_or_off,
        True,
        "Graph timer: after a first round of replays at every placement, stop once the pooled "
        "median's 95% confidence half-width is within this many percent of it; otherwise fill "
        "the caller's rep budget (default 0.5; 0: always fill it, as before this rule).",
    ),
    Knob(
        "warmup_rule",
        "ZL_WARMUP_RULE",
        "--warmup-rule",
        "settle",
        _choice(WARMUP_RULES),
        True,
        "How long each timing warms up after its first call: 'settle' (default) until per-call "
        "time stops drifting and the device is at its working clock, FlagGems' --warmup as the "
        "cap; 'budget' FlagGems' --warmup at least (1,000 ms per timing).",
    ),
    Knob(
        "parallel_warmup_gpus",
        "PARALLEL_WARMUP_GPUS",
        "--parallel-warmup-gpus",
        0,
        _nonneg_int,
        False,
        "Shard the autotune sweep over N devices before measuring on one (default 0: off).",
    ),
    Knob(
        "compile_workers",
        "ZL_COMPILE_WORKERS",
        "--compile-workers",
        0,
        _nonneg_int,
        False,
        "Autotuned kernels: compile the candidate configs an autotuner is about to "
        "benchmark in N forked processes at once (threads where the OS cannot fork), then "
        "benchmark them one by one as before, so the same config wins and only the wait "
        "changes (1: triton's own way, each compiled inside the benchmark loop; default 0: "
        "min(8, half the CPUs the process may use)).",
    ),
    Knob(
        "pytest_plugins",
        "ZL_PYTEST_PLUGINS",
        "--pytest-plugins",
        None,
        _names,
        False,
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
        False,
        "Most MiB of a benchmark's output kept in run.log: beyond it the first and last "
        "halves are kept and an OUTPUT_TRUNCATED line marks the cut.",
    ),
    Knob("out", "ZL_OUT", "--out", "runs", _text, False, "Root under which run dirs are created."),
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
    "memory, replays pooled.",
    "pytest_plugins": "Third-party pytest plugins the benchmark process loads (comma list; "
    "'autoload': all installed).",
    "output_cap_mb": "Most MiB of a benchmark's output kept in run.log (head and tail kept, "
    "OUTPUT_TRUNCATED between).",
}

# Settings of the commands that read results, not of a run: never in run_identity.json,
# and not flags of `run` or `batch`.
READER_KNOBS: List[Knob] = [
    Knob(
        "history_db",
        "ZL_HISTORY_DB",
        "--db",
        None,
        _text,
        False,
        "SQLite file that `zlbench history` records screens in (default: "
        "$XDG_DATA_HOME/zlbench/history.sqlite, else ~/.local/share/zlbench/history.sqlite).",
    ),
]

BY_NAME: Dict[str, Knob] = {k.name: k for k in KNOBS + READER_KNOBS}
BY_ENV: Dict[str, Knob] = {k.env: k for k in KNOBS + READER_KNOBS}


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
        elif environ.get(knob.env) not in (None, ""):
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


def env_value(name: str, environ: Optional[Mapping[str, str]] = None) -> Any:
    """A knob as a benchmark process reads it from the environment ``zlbench run`` gave
    it: the flag's own parser; unset or blank is the default. Raises KnobError."""
    knob = BY_NAME[name]
    raw = (os.environ if environ is None else environ).get(knob.env)
    return knob.default if raw is None or not raw.strip() else knob.parse_value(raw)


def knob_options(names: Iterable[str]):
    """Click decorator adding the flags of these knobs; values stay raw strings (or
    None when not given) so that resolve() can apply precedence and validation. The
    help is SHORT_HELP's where a knob has one (docs/cli.md has the whole text)."""
    knobs = [BY_NAME[n] for n in names]

    def decorate(fn):
        for knob in reversed(knobs):
            default_text = "" if knob.default in (None,) else f" [default: {flag_text(knob.default)}]"
            fn = click.option(
                knob.flag,
                knob.name,
                default=None,
                metavar=knob.env,
                help=f"{SHORT_HELP.get(knob.name, knob.help)} Env: {knob.env}.{default_text}",
            )(fn)
        return fn

    return decorate


def flag_text(value: Any) -> Optional[str]:
    """A knob value as its flag or variable spells it (True -> 1, a list -> a,b); None stays None."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value))
    return str(value)


# The knobs `zlbench run` and `zlbench batch` share: what to measure and how.
MEASURE_KNOBS = [k.name for k in KNOBS if k.name not in ("op", "op_file", "test_node", "device", "out")]

"""What a batch is asked to do (BatchConfig) and what it did (BatchResult).

Both are plain data so that other commands (an A/B comparison runs two batches) can
call ``run_batch`` without going through click.
"""

from __future__ import annotations

import math
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import click

from .. import knobs, proc
from .plan import WHOLE, HostShard
from .state import BatchError

# The batch-scope knobs' defaults (their home is knobs.BATCH_KNOBS).
DEFAULT_TIMEOUT_S = float(knobs.BY_NAME["timeout"].default)
DEFAULT_RETRIES = int(knobs.BY_NAME["retries"].default)
DEFAULT_FALLBACK_DTYPES: Tuple[Tuple[str, ...], ...] = (("float32",), ("float16",))
DEFAULT_KILL_GRACE_S = float(knobs.BY_NAME["kill_grace"].default)
RUN_MODES = knobs.RUN_MODES
DEFAULT_WORKER_MAX_OPS = int(knobs.BY_NAME["worker_max_ops"].default)
# Each batch-scope knob, as plan.json records it (the BatchConfig field of the same
# name): a --resume takes the plan's value where none is given now, and says what
# changed. The seconds that mean "no limit" at 0 are written as null.
PLAN_KEYS = {
    "timeout": "timeout_s",
    "retries": "retries",
    "kill_grace": "kill_grace_s",
    "stall_timeout": "stall_timeout_s",
    "run_mode": "run_mode",
    "worker_max_ops": "worker_max_ops",
    "worker_prestart": "worker_prestart",
}
NO_LIMIT_AT_ZERO = ("timeout", "stall_timeout")


def default_run_command() -> List[str]:
    return [*proc.python_module("zlbench"), "run"]


def default_out_dir(prefix: str) -> Path:
    """``<ZL_OUT or runs>/<prefix>-<timestamp>``: where a batch (or an A/B) goes unless told."""
    out = knobs.BY_NAME["out"]
    return Path(os.environ.get(out.env) or out.default) / time.strftime(f"{prefix}-%Y%m%d-%H%M%S")


def parse_devices_flag(text: Optional[str]) -> Optional[List[str]]:
    """``--devices 0,1`` (spaces separate too); None when not given. Every entry must
    be a device number: ``0,,x`` is refused, not read as ``0,x``."""
    if text is None:
        return None
    parts = re.split(r"\s*,\s*|\s+", text.strip())
    bad = [p for p in parts if not p.isdigit() or not p.isascii()]
    if bad or not parts:
        shown = ", ".join(repr(p) for p in bad) or "nothing"
        raise BatchError(
            f"--devices {text!r}: {shown} is not a device number; give numbers "
            "separated by commas, e.g. --devices 0,1"
        )
    return parts


class FiniteSeconds(click.ParamType):
    """A number of seconds >= 0 that a wait can use: inf, nan and 1e400 are refused here,
    not after a child has started."""

    name = "seconds"

    def convert(self, value, param, ctx):
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            number = float(value)
        else:
            try:
                number = float(str(value).strip())
            except ValueError:
                self.fail(f"{value!r} is not a number of seconds", param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number of seconds (0 means no limit)", param, ctx)
        if number < 0:
            self.fail(f"{value!r} is negative (0 means no limit)", param, ctx)
        return number


FINITE_SECONDS = FiniteSeconds()


_AUTO_HELP = (
    "give --shard K/N, or run inside a Slurm array task (SLURM_ARRAY_TASK_ID) or a "
    "Kubernetes indexed job (JOB_COMPLETION_INDEX, with --shards N)"
)


def _count(environ: Mapping[str, str], name: str) -> Optional[int]:
    value = environ.get(name, "").strip()
    if not value:
        return None
    if not value.isdigit():
        raise BatchError(f"--shard auto: {name}={value!r} is not a whole number; {_AUTO_HELP}")
    return int(value)


def resolve_shard(text: Optional[str], shards: Optional[int], environ: Mapping[str, str]) -> HostShard:
    """``--shard K/N``, or ``--shard auto`` from the scheduler's variables.

    auto: a Slurm array task gives K = SLURM_ARRAY_TASK_ID and N = --shards, else
    SLURM_ARRAY_TASK_COUNT (the array must then be 0..N-1: MIN 0, MAX N-1); a Kubernetes
    indexed job gives K = JOB_COMPLETION_INDEX and needs --shards N (its pods do not see
    the completion count).
    """
    if text is None:
        if shards is not None:
            raise BatchError("--shards N goes with --shard auto; for a fixed shard give --shard K/N")
        return WHOLE
    text = text.strip()
    if text.lower() == "auto":
        index = _count(environ, "SLURM_ARRAY_TASK_ID")
        if index is not None:
            count = shards
            if count is None:
                count = _count(environ, "SLURM_ARRAY_TASK_COUNT")
                low = _count(environ, "SLURM_ARRAY_TASK_MIN")
                high = _count(environ, "SLURM_ARRAY_TASK_MAX")
                if count is None and low is not None and high is not None:
                    count = high + 1
                if count is None or (low not in (None, 0)) or (high not in (None, count - 1)):
                    raise BatchError(
                        "--shard auto: this Slurm array is not 0..N-1 "
                        f"(SLURM_ARRAY_TASK_MIN={low}, MAX={high}, COUNT={count}); give "
                        "--shards N with the screen's shard count"
                    )
            source = "SLURM_ARRAY_TASK_ID"
        else:
            index = _count(environ, "JOB_COMPLETION_INDEX")
            if index is None:
                raise BatchError(
                    f"--shard auto: no SLURM_ARRAY_TASK_ID or JOB_COMPLETION_INDEX "
                    f"in the environment; {_AUTO_HELP}"
                )
            if shards is None:
                raise BatchError(
                    "--shard auto in a Kubernetes indexed job "
                    "(JOB_COMPLETION_INDEX) needs --shards N: the job's "
                    "completions"
                )
            count, source = shards, "JOB_COMPLETION_INDEX"
        if not 0 <= index < count:
            raise BatchError(
                f"--shard auto: {source}={index} is outside 0..{count - 1} for {count} shards; check --shards"
            )
        return HostShard(index, count)
    if shards is not None:
        raise BatchError(f"--shards goes with --shard auto; --shard {text} already gives N")
    k, sep, n = text.partition("/")
    if not sep or not k.strip().isdigit() or not n.strip().isdigit() or not 0 <= int(k) < int(n):
        raise BatchError(f"--shard {text}: expected K/N with 0 <= K < N (--shard 0/4), or 'auto'")
    return HostShard(int(k), int(n))


@dataclass
class BatchConfig:
    """Everything one batch needs.

    settings     measure knobs, as ``knobs.resolve(flags, environ, names=MEASURE_KNOBS)``
                 returns them (provider, backend, level, dtypes, shape file, ...);
                 ``settings.replay_from`` is an earlier *batch* dir: each operator replays
                 ``<replay_from>/<op>/autotune_records`` when it has one
    ops          operators to run; None (and no op_list): every operator of the provider
    devices      the caller's device numbering (``["6", "7"]``); None: all the backend finds
                 (the cpu backend: one worker slot)
    dismiss      dismiss list file; None: none
    timeout_s    per operator, per attempt; None or 0: no limit
    op_timeouts  per-operator overrides of timeout_s
    retries      extra attempts for failures that look transient
    fallback_dtypes  dtype lists for levels 1, 2, ... after a deterministic failure
    extra_env    added to every child's environment (recorded in plan.json)
    replay_dirs  op -> autotune_records dir, overriding settings.replay_from for that op
    balance_from an earlier batch dir: plan devices longest-first from its ops_status.csv
                 durations instead of by the stable hash
    progress     "auto" (live on a terminal, plain lines otherwise), "live", "plain", "off"
    shard        this batch's host shard: only operators with h % N == K (plan.py); the
                 caller puts ``out`` at ``<screen>/shard-K-of-N``
    run_command  how to start one operator's run; the batch appends --run-dir, --op,
                 --backend, --device and the knob flags
    run_mode     "worker": a warm worker per device forks each attempt (the default
                 run_command only); "fresh": every attempt starts run_command anew
    worker_max_ops  a worker is replaced after this many attempts
    worker_prestart a worker readies each next attempt's benchmark process, its library
                 imported, while the current attempt runs (zlbench.run.worker)
    stall_timeout_s stop an attempt after this many seconds without progress (no output,
                 no row timed, no new kernel or tuner cache entry); None or 0: off
    stages       FlagGems stages (stable, beta, alpha, removed): only the corpus' operators
                 whose current stage in conf/operators.yaml is one of them; None: all
    batch_settings  the batch-scope knobs (knobs.BATCH_KNOBS) behind timeout_s ...
                 worker_prestart, with their sources, when they came from flags
    """

    out: Path
    settings: knobs.Settings
    ops: Optional[Sequence[str]] = None
    op_list: Optional[Path] = None
    devices: Optional[Sequence[str]] = None
    dismiss: Optional[Path] = None
    timeout_s: Optional[float] = DEFAULT_TIMEOUT_S
    op_timeouts: Mapping[str, float] = field(default_factory=dict)
    retries: int = DEFAULT_RETRIES
    fallback_dtypes: Sequence[Sequence[str]] = DEFAULT_FALLBACK_DTYPES
    resume: bool = False
    extra_env: Mapping[str, str] = field(default_factory=dict)
    replay_dirs: Mapping[str, Path] = field(default_factory=dict)
    kill_grace_s: float = DEFAULT_KILL_GRACE_S
    balance_from: Optional[Path] = None
    progress: str = "auto"
    run_command: Sequence[str] = field(default_factory=default_run_command)
    shard: HostShard = WHOLE
    keep_failed: bool = False  # on resume, keep failed/timeout/crashed rows too
    replan: bool = False  # on resume, plan again over a corpus that changed
    run_mode: str = "worker"
    worker_max_ops: int = DEFAULT_WORKER_MAX_OPS
    worker_prestart: bool = True
    stall_timeout_s: Optional[float] = None
    environ: Optional[Mapping[str, str]] = None  # base environment; default os.environ
    stages: Optional[Sequence[str]] = None
    # The batch-scope knobs as resolved (values and where each came from); None when the
    # caller set the fields above itself.
    batch_settings: Optional[knobs.Settings] = None


@dataclass
class BatchResult:
    out: Path
    rows: Dict[str, Dict[str, str]]  # ops_status.csv, by operator
    planned: List[str]  # operators this driver was asked to cover
    interrupted: bool
    wall_s: float
    devices: List[str] = field(default_factory=list)

    def counts(self) -> Dict[str, int]:
        from ..rundir import count_statuses

        return count_statuses(self.rows, self.planned)

    @property
    def exit_code(self) -> int:
        """0 every operator ok/skipped/dismissed; 1 some failed, timed out or crashed;
        130 interrupted (resume with --resume)."""
        if self.interrupted:
            return 130
        from ..rundir import BAD, NOT_RUN

        return 1 if any(s in (*BAD, NOT_RUN) for s in self.counts()) else 0

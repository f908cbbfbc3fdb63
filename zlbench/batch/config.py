"""What a batch is asked to do (BatchConfig) and what it did (BatchResult).

Both are plain data so that other commands (an A/B comparison runs two batches) can
call ``run_batch`` without going through click.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from .. import knobs

DEFAULT_TIMEOUT_S = 1800.0
DEFAULT_RETRIES = 1
DEFAULT_FALLBACK_DTYPES: Tuple[Tuple[str, ...], ...] = (("float32",), ("float16",))
DEFAULT_KILL_GRACE_S = 10.0


def default_run_command() -> List[str]:
    return [sys.executable, "-m", "zlbench", "run"]


def default_out_dir(prefix: str) -> Path:
    """``<ZL_OUT or runs>/<prefix>-<timestamp>``: where a batch (or an A/B) goes unless told."""
    out = knobs.BY_NAME["out"]
    return Path(os.environ.get(out.env) or out.default) / time.strftime(f"{prefix}-%Y%m%d-%H%M%S")


def parse_devices_flag(text: Optional[str]) -> Optional[List[str]]:
    """``--devices 0,1`` (spaces separate too); None when not given."""
    return [d for d in (text or "").replace(" ", ",").split(",") if d] or None


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
    progress     "auto" (live on a terminal, plain lines otherwise), "live", "plain", "off"
    run_command  how to start one operator's run; the batch appends --run-dir, --op,
                 --backend, --device and the knob flags
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
    progress: str = "auto"
    run_command: Sequence[str] = field(default_factory=default_run_command)
    environ: Optional[Mapping[str, str]] = None   # base environment; default os.environ


@dataclass
class BatchResult:
    out: Path
    rows: Dict[str, Dict[str, str]]       # ops_status.csv, by operator
    planned: List[str]                    # operators this driver was asked to cover
    interrupted: bool
    wall_s: float
    measured: List[str] = field(default_factory=list)   # run by this driver (not skipped on resume)
    devices: List[str] = field(default_factory=list)

    def counts(self) -> Dict[str, int]:
        from .classify import count_statuses

        return count_statuses(self.rows, self.planned)

    @property
    def exit_code(self) -> int:
        """0 every operator ok/skipped/dismissed; 1 some failed, timed out or crashed;
        130 interrupted (resume with --resume)."""
        if self.interrupted:
            return 130
        from .classify import BAD, NOT_RUN

        return 1 if any(s in (*BAD, NOT_RUN) for s in self.counts()) else 0

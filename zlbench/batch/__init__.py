"""Many operators: a full-corpus screen across devices (``zlbench batch``).

``run_batch(BatchConfig(...))`` is the whole batch without click; see config.py for
what it takes and docs in command.py for the flags. Importing this package never
imports torch, triton or flag_gems.
"""

from .config import BatchConfig, BatchResult
from .driver import load_plan, run_batch
from .report import render_report
from .state import BatchError

__all__ = ["BatchConfig", "BatchResult", "BatchError", "run_batch", "load_plan", "render_report"]

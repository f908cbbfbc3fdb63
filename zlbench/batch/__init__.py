"""Many operators: a full-corpus screen across devices (``zlbench batch``).

``run_batch(BatchConfig(...))`` is the whole batch without click; see config.py for
what it takes and docs in command.py for the flags. Importing this package never
imports torch, triton or flag_gems.
"""

from .config import BatchConfig, BatchResult
from .state import BatchError

_LAZY = {"run_batch": "driver", "load_plan": "driver", "render_report": "report"}


def __getattr__(name):
    # The driver (processes, progress display) loads only when a batch runs, so that
    # readers of a batch dir's layout (summary) stay quick to import.
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["BatchConfig", "BatchResult", "BatchError", "run_batch", "load_plan", "render_report"]

"""What plugins hand each other, as keys of pytest's ``config.stash`` (kept out of
``zlbench.plugins`` itself: ``zlbench run`` imports that package to find the plugins,
and has no use for pytest)."""

from __future__ import annotations

from pathlib import Path

import pytest

# Set by the parallel warmup plugin (configured first) when its shards' merged records
# are to be replayed; the autotune plugin reads it in its own pytest_configure.
PARALLEL_WARMUP_REPLAY = pytest.StashKey[Path]()


# The timer plugin's row context (which table row a timing call belongs to), for the
# autotune plugin to name the row of a replay fallback. Typed loosely: importing
# row_context here would load it in every plugin.
ROW_CONTEXT: "pytest.StashKey[object]" = pytest.StashKey()


# Callables the timer's row context calls with each timed row (the phases plugin, which
# is configured before the timer, counts rows with one).
ROW_LISTENERS: "pytest.StashKey[list]" = pytest.StashKey()


# Callables the timer's row recorder calls with each finished row (a TimedRow); each
# returns fields to add to the row's record in row_stats.jsonl (the autotune plugin adds
# the configs the row's kernels ran with).
ROW_RECORD_FIELDS: "pytest.StashKey[list]" = pytest.StashKey()

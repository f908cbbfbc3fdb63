"""Where a run's time goes, as the benchmark process sees it.

Prints a ``RUN_PHASE phase=<name> t=<epoch seconds>`` line at four points: the pytest
session starts (imports, conftest and plugins are done), collection ends, the first row
has been timed on the library's side (its kernels compiled and autotuned), the session
ends. The batch reads them to split an attempt into start-up, collection, first-call
compile/autotune and measurement. ``plugins/phases.json`` carries the same times, the
rows timed so far (rewritten after each row: the batch's progress signal) and the
pytest plugins this process loaded.
"""

from __future__ import annotations

import os
import time
from typing import Any, Dict, Optional

import pytest

from ..markers import RUN_PHASE, format_marker
from ..tuner_cache import cache_dirs
from . import print_line, run_dir, write_plugin_json
from .keys import ROW_LISTENERS

PLUGIN = "phases"
# Order in which the phases happen; a later one implies the earlier ones ran.
PHASES = ("session_start", "collected", "first_row", "session_finish")


class PhaseClock:
    """The phase times of this process; registered with pytest's plugin manager (and on
    ``config.stash[CLOCK]``) when a run dir is given."""

    def __init__(self) -> None:
        self.times: Dict[str, float] = {}
        self.rows = 0
        self.last_row_t: Optional[float] = None
        self.plugins: Dict[str, Any] = {}
        self.active = False

    def mark(self, phase: str) -> None:
        if not self.active or phase in self.times:
            return
        now = time.time()
        self.times[phase] = now
        print_line(format_marker(RUN_PHASE, phase=phase, t=f"{now:.3f}"))
        self.write()

    def on_row(self, timing: Any) -> None:
        self.rows += 1
        self.last_row_t = time.time()
        side = getattr(getattr(timing, "row", None), "side", None)
        if side != "torch":  # the library's side is where compile and autotune happen
            self.mark("first_row")
        self.write()

    # -- hooks (the clock is a registered plugin)
    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self) -> None:
        self.mark("session_start")

    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(self) -> None:
        self.mark("collected")

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self) -> None:
        self.mark("session_finish")

    def pytest_unconfigure(self, config) -> None:
        listeners = config.stash.get(ROW_LISTENERS, [])
        if self.on_row in listeners:
            listeners.remove(self.on_row)
        self.active = False

    def write(self) -> None:
        write_plugin_json(
            PLUGIN,
            {
                "times": dict(self.times),
                "rows_timed": self.rows,
                "last_row_t": self.last_row_t,
                "cache_dirs": cache_dirs(os.environ),
                "pytest_plugins": self.plugins,
            },
        )


def loaded_plugins(config) -> Dict[str, Any]:
    """Third-party plugins (setuptools entry points) and -p modules this session loaded."""
    pm = config.pluginmanager
    dists = sorted({f"{d.project_name}-{d.version}" for _, d in pm.list_plugin_distinfo()})
    names = (getattr(p, "__name__", None) for _, p in pm.list_name_plugin() if p is not None)
    modules = sorted(
        {
            n
            for n in names
            if isinstance(n, str)
            and not n.endswith("conftest")
            and not n.startswith(("_pytest.", "pytest_", "pluggy"))
        }
    )
    return {
        "autoload": os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD") in (None, ""),
        "distributions": dists,
        "modules": modules,
    }


CLOCK = pytest.StashKey[PhaseClock]()


def pytest_configure(config) -> None:
    if run_dir() is None:
        return
    clock = PhaseClock()
    clock.active = True
    clock.plugins = loaded_plugins(config)
    # The timer plugin's row context (configured after this one) calls these.
    config.stash.setdefault(ROW_LISTENERS, []).append(clock.on_row)
    config.stash[CLOCK] = clock
    config.pluginmanager.register(clock, "zlbench-phases")

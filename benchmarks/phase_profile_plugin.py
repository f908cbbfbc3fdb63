"""pytest plugin for benchmarks/fixed_cost.py only: profile the benchmark process phase by
phase, to find where an operator's fixed cost goes.

Loaded into the benchmark process with ``PYTEST_ADDOPTS="-p phase_profile_plugin"`` and
this directory on PYTHONPATH; never by zlbench itself. With a run dir (ZL_RUN_DIR) it runs
one cProfile per phase of the process and writes each as ``<run dir>/phase_profile/
<phase>.pstats``, with ``spans.json``: each phase's wall seconds (the profiler on) and the
epoch time it began (``t``; ``t["end"]``: the end of the last), which the script sets
against the batch's attempt start and result, outside this process' profile:

  configure   from the loading of the first conftests (this -p plugin is registered
              before them) to the session's start: the conftests and every plugin's
              configure hook
  collect     session start to the end of collection
  first_call  end of collection to the first row timed on the library's side (the
              phases plugin's ``first_row``, through zlbench's row listeners); where no
              such row comes, to the session's end (no ``measure`` then)
  measure     from there to the session's end; profiled only with PHASE_PROFILE_MEASURE=1
              (the profiler's cost per call slows the timers' loops), else timed alone
  teardown    the session's end to pytest's unconfigure, the last hook before the
              process exits (what the exit itself costs is the batch's to read)
"""

from __future__ import annotations

import cProfile
import json
import os
import time
from pathlib import Path
from typing import Dict, Optional

import pytest

DIR = "phase_profile"


class PhaseProfile:
    def __init__(self, out: Path, profile_measure: bool) -> None:
        self.out = out
        self.profile_measure = profile_measure
        self.spans: Dict[str, float] = {}
        self.epochs: Dict[str, float] = {}
        self.phase: Optional[str] = None
        self.started = 0.0
        self.profiler: Optional[cProfile.Profile] = None

    def enter(self, phase: Optional[str]) -> None:
        """End the phase under way (its span, its profile) and start ``phase`` (None: none)."""
        now = time.perf_counter()
        if self.profiler is not None:
            self.profiler.disable()
            self.out.mkdir(parents=True, exist_ok=True)
            self.profiler.dump_stats(str(self.out / f"{self.phase}.pstats"))
            self.profiler = None
        self.epochs[phase or "end"] = time.time()
        if self.phase is not None:
            self.spans[self.phase] = round(now - self.started, 4)
            self.out.mkdir(parents=True, exist_ok=True)
            (self.out / "spans.json").write_text(json.dumps({"spans": self.spans, "t": self.epochs}))
        self.phase, self.started = phase, time.perf_counter()
        if phase is not None and (phase != "measure" or self.profile_measure):
            self.profiler = cProfile.Profile()
            self.profiler.enable()

    def on_row(self, timing) -> None:
        side = getattr(getattr(timing, "row", None), "side", None)
        if self.phase == "first_call" and side != "torch":
            self.enter("measure")

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self) -> None:
        self.enter("collect")

    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(self) -> None:
        self.enter("first_call")

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self) -> None:
        self.enter("teardown")

    @pytest.hookimpl(trylast=True)
    def pytest_unconfigure(self, config) -> None:
        self.enter(None)


_profile: Optional[PhaseProfile] = None


def _stop_in_child() -> None:
    """A process the benchmark forks (the compile pool's children) is not profiled: the
    profiler it inherits would slow its work, and its profile would never be written."""
    global _profile
    if _profile is not None and _profile.profiler is not None:
        _profile.profiler.disable()
    _profile = None


os.register_at_fork(after_in_child=_stop_in_child)


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config, parser, args) -> None:
    global _profile
    if os.environ.get("ZL_RUN_DIR"):
        out = Path(os.environ["ZL_RUN_DIR"]) / DIR
        _profile = PhaseProfile(out, os.environ.get("PHASE_PROFILE_MEASURE") == "1")
        _profile.enter("configure")


def pytest_configure(config) -> None:
    if _profile is None:
        return
    from zlbench.plugins.keys import ROW_LISTENERS

    config.stash.setdefault(ROW_LISTENERS, []).append(_profile.on_row)
    config.pluginmanager.register(_profile, "phase-profile")

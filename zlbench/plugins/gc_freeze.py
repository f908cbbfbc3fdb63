"""pytest plugin: keep the benchmark's own garbage collections short.

FlagGems' benchmark loop calls ``gc.collect()`` after every row. A full collection walks
every object the process tracks: torch, triton, FlagGems and pytest, hundreds of
thousands of objects that live as long as the process. That walk is the larger part of
the time between two rows, and FlagGems' kernel mode pays it too. When collection ends
(every test module and the library are imported) this plugin collects once and moves
the survivors to the permanent generation (``gc.freeze()``): later collections visit
only what was made since (a row's tensors, its closures), and still free all of that.
Nothing timed changes, so it is not caliber: ZL_GC_FREEZE=0 turns it off.

What it did is recorded in ``$ZL_RUN_DIR/plugins/gc_freeze.json``: the objects frozen
and one full collection's time before and after.

A warm worker's prestarted benchmark process imports the library before its run begins
and freezes what that import left (``freeze_import``), while the run before it still
measures: the collection at the end of collection then walks only what pytest made
since, instead of the library's import too (61-84 ms an operator on an H100 host).
"""

from __future__ import annotations

import gc
import time
from typing import Callable, Dict, Mapping, Optional

from zlbench import knobs
from zlbench.plugins import print_line, run_dir, write_plugin_json

PLUGIN = "gc_freeze"


def freeze(collect: Callable[[], int] = gc.collect) -> Dict[str, float]:
    """Collect, freeze what survives; the figures for the plugin's record."""
    begin = time.perf_counter()
    collect()
    before_ms = (time.perf_counter() - begin) * 1e3
    gc.freeze()
    begin = time.perf_counter()
    collect()
    after_ms = (time.perf_counter() - begin) * 1e3
    return {
        "frozen": gc.get_freeze_count(),
        "collect_ms_before": round(before_ms, 3),
        "collect_ms_after": round(after_ms, 3),
    }


def freeze_import(environ: Optional[Mapping[str, str]] = None) -> Optional[int]:
    """Collect and freeze what a benchmark process's import of its library left, before
    its run: the objects this freeze added (the worker's, frozen before it forked, are
    not counted), or None where ZL_GC_FREEZE turns freezing off (an invalid value too:
    the plugin says why when the run configures it)."""
    try:
        if not knobs.env_value("gc_freeze", environ):
            return None
    except knobs.KnobError:
        return None
    before = gc.get_freeze_count()
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count() - before


class GcFreeze:
    def __init__(self) -> None:
        self.done = False

    def pytest_collection_finish(self, session) -> None:
        if self.done:
            return
        self.done = True
        figures = freeze()
        write_plugin_json(PLUGIN, {"enabled": True, **figures})
        # Never unfrozen: pytest collects several times on its way out (its unraisable-
        # exception check), and unfrozen those walks cost 0.2 s per operator on an H200.


def pytest_configure(config) -> None:
    if run_dir() is None:
        return
    try:
        enabled = knobs.env_value("gc_freeze")
    except knobs.KnobError as e:
        print_line(f"zlbench[{PLUGIN}] {e}; not freezing")
        write_plugin_json(PLUGIN, {"enabled": False, "error": str(e)})  # off, and why
        return
    if not enabled:
        write_plugin_json(PLUGIN, {"enabled": False})
        return
    config.pluginmanager.register(GcFreeze(), f"zlbench-{PLUGIN}")

"""pytest plugin: the benchmark process's own overheads, cut where nothing measured changes.

Two costs every operator paid before its first timing (H200 host, FlagGems HEAD):

- Collection walked the whole benchmark package. pytest (8 and later) collects the
  directory of a file it is given, making a node for every module in it (1,060 in
  FlagGems' benchmark/), and only then keeps the one asked for: 0.73 s of the
  collection phase's 0.84 s under the profiler (which slows this Python code; the phase's
  median is 0.29 s without it). ``pytest_ignore_collect`` here turns away, before
  pytest makes its node, every path that lies outside the paths the run names (its
  command line's files or directories); what those hold is collected as before, and
  ``__init__.py`` and ``conftest.py`` files are left to pytest. Not on pytest 7, whose
  collection neither pays this nor asks the hook only of unnamed paths.
- FlagGems' Benchmark parses its whole shape file (core_shapes.yaml, 17 KB) with
  ``yaml.safe_load`` in every test it runs: 74 ms with PyYAML's pure-Python parser on
  the H200 host. PyYAML's C parser (``yaml.CSafeLoader``, where PyYAML was built with
  libyaml, as its wheels are) feeds the same constructor and resolver and takes 10 ms.
  For the benchmark process ``yaml.safe_load`` goes to it; a document the C parser
  refuses is parsed again by the pure-Python one (from the same text, under the stream's
  own name), so the result, or the error, is the one the benchmark would have had; the
  first such document of a process is named in its output.

Nothing timed changes: not caliber, and no knob. What was done is recorded in
``$ZL_RUN_DIR/plugins/overheads.json``: ``collect_ignored`` (paths turned away),
``libyaml`` (whether PyYAML has it), ``parsed`` (documents the C parser read) and
``fallback`` (documents it refused, read by the pure-Python parser).
"""

from __future__ import annotations

import functools
import importlib
import io
import os
import traceback
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest

from zlbench.plugins import print_line, run_dir, write_plugin_json

PLUGIN = "overheads"
# Files pytest reads for what they configure, not as benchmark modules.
LEFT_TO_PYTEST = frozenset({"__init__.py", "conftest.py"})


# ---- collection -----------------------------------------------------------------


def named_paths(config) -> Optional[List[Path]]:
    """The absolute paths the command line names (``file.py::test`` -> file.py; with no
    argument pytest has put its testpaths or the directory it runs in there), or None
    under ``--pyargs``, whose arguments are module names."""
    if config.getoption("pyargs", False):
        return None
    root = Path(config.invocation_params.dir)
    return [Path(os.path.abspath(root / arg.split("::", 1)[0])) for arg in config.args]


def narrows_collection() -> bool:
    """pytest 8 and later make a node for every module of a named file's package, and
    ask ``pytest_ignore_collect`` only of paths not named (nor above a named one)."""
    return int(pytest.__version__.split(".")[0]) >= 8


class NamedOnly:
    """Collect only below the paths the run names."""

    def __init__(self, named: List[Path]) -> None:
        self.named = named
        self.ignored = 0

    def ignore(self, collection_path: Path) -> Optional[bool]:
        """``pytest_ignore_collect``'s answer: True outside the named paths, else None
        (pytest's own rules decide)."""
        if collection_path.name in LEFT_TO_PYTEST:
            return None
        path = Path(os.path.abspath(collection_path))
        if any(path == p or p in path.parents or path in p.parents for p in self.named):
            return None
        self.ignored += 1
        return True


# ---- YAML -----------------------------------------------------------------------


class SafeLoad:
    """``yaml.safe_load`` with the C parser first; ``original`` is the one it replaced."""

    def __init__(self, yaml: Any, loader: type) -> None:
        self.yaml = yaml
        self.loader = loader
        self.original = yaml.safe_load
        self.counts: Dict[str, int] = {"parsed": 0, "fallback": 0}
        functools.update_wrapper(self, self.original)

    def __call__(self, stream):
        if isinstance(stream, (str, bytes)):
            text, name = stream, None
        elif hasattr(stream, "read"):
            # Read once: each parser gets the same text, under the stream's own name
            # (which a YAML error cites), and a file the C parser gave up on halfway
            # is not read from where it stopped.
            text, name = stream.read(), getattr(stream, "name", "<file>")
        else:
            return self.original(stream)  # whatever the original makes of it

        def source():
            if name is None:
                return text
            buffer = io.StringIO(text) if isinstance(text, str) else io.BytesIO(text)
            buffer.name = name
            return buffer

        try:
            data = self.yaml.load(source(), Loader=self.loader)
        except self.yaml.YAMLError as e:
            self.counts["fallback"] += 1
            if self.counts["fallback"] == 1:  # said once a process; overheads.json counts them
                problem = str(e).splitlines()[0] if str(e) else type(e).__name__
                print_line(
                    f"zlbench[{PLUGIN}] PyYAML's C parser refused {name or 'a document'} ({problem}); "
                    "the pure-Python parser reads it"
                )
            return self.original(source())
        self.counts["parsed"] += 1
        return data


def install_libyaml(module: Any = None) -> Optional[SafeLoad]:
    """Point ``module.safe_load`` (PyYAML's) at the C parser; None where PyYAML has no
    libyaml. ``uninstall_libyaml`` puts the original back."""
    if module is None:
        module = importlib.import_module("yaml")
    loader = getattr(module, "CSafeLoader", None)
    if loader is None:
        return None
    load = SafeLoad(module, loader)
    module.safe_load = load
    return load


def uninstall_libyaml(load: SafeLoad) -> None:
    if load.yaml.safe_load is load:
        load.yaml.safe_load = load.original


# ---- hooks ----------------------------------------------------------------------


class Overheads:
    """What this plugin changed in the benchmark process, registered for its run."""

    def __init__(self, narrow: Optional[NamedOnly], load: Optional[SafeLoad]) -> None:
        self.narrow = narrow
        self.load = load

    def record(self) -> None:
        write_plugin_json(
            PLUGIN,
            {
                "collect_ignored": self.narrow.ignored if self.narrow else None,
                "libyaml": self.load is not None,
                **(self.load.counts if self.load else {}),
            },
        )

    @pytest.hookimpl(tryfirst=True)
    def pytest_ignore_collect(self, collection_path: Path, config) -> Optional[bool]:
        return self.narrow.ignore(collection_path) if self.narrow else None

    def pytest_collection_finish(self, session) -> None:
        self.record()

    def pytest_sessionfinish(self, session) -> None:
        self.record()

    def pytest_unconfigure(self, config) -> None:
        if self.load is not None:
            uninstall_libyaml(self.load)


def pytest_configure(config) -> None:
    if run_dir() is None:
        return
    named = named_paths(config) if narrows_collection() else None
    try:
        load = install_libyaml()
    except Exception:  # noqa: BLE001 - a speed-up that cannot be had is not the run's failure
        traceback.print_exc()
        load = None
    plugin = Overheads(NamedOnly(named) if named else None, load)
    config.pluginmanager.register(plugin, f"zlbench-{PLUGIN}")
    plugin.record()

"""pytest plugin: the benchmark process's own overheads, cut where nothing measured changes.

Two costs every operator paid before its first timing (H200 host, FlagGems HEAD):

- Collection walked the whole benchmark package. pytest (8 and later) collects the
  directory of a file it is given, making a node for every module in it (1,060 in
  FlagGems' benchmark/), and only then keeps the one asked for: 0.25-0.3 s of each
  operator's 0.29 s median collection. ``pytest_ignore_collect`` here turns away, before
  pytest makes its node, every path that lies outside the paths the run names (its
  command line's files or directories); what those hold is collected as before, and
  ``__init__.py`` and ``conftest.py`` files are left to pytest.
- FlagGems' Benchmark parses its whole shape file (core_shapes.yaml, 17 KB) with
  ``yaml.safe_load`` in every test it runs: 74 ms with PyYAML's pure-Python parser on
  the H200 host. PyYAML's C parser (``yaml.CSafeLoader``, where PyYAML was built with
  libyaml, as its wheels are) feeds the same constructor and resolver and takes 10 ms.
  For the benchmark process ``yaml.safe_load`` goes to it; a document the C parser
  refuses is parsed again by the pure-Python one, so the result, or the error, is the
  one the benchmark would have had.

Nothing timed changes: not caliber, and no knob. What was done is recorded in
``$ZL_RUN_DIR/plugins/overheads.json``: ``collect_ignored`` (paths turned away),
``libyaml`` (whether PyYAML has it), ``parsed`` (documents the C parser read) and
``fallback`` (documents it refused, read by the pure-Python parser).
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest

from zlbench.plugins import run_dir, write_plugin_json

PLUGIN = "overheads"
# Files pytest reads for what they configure, not as benchmark modules.
LEFT_TO_PYTEST = frozenset({"__init__.py", "conftest.py"})


# ---- collection -----------------------------------------------------------------


def named_paths(config) -> Optional[List[Path]]:
    """The absolute paths the command line names (``file.py::test`` -> file.py), or
    None where they cannot be told (``--pyargs``: its arguments are module names, or no
    argument at all: pytest then collects its testpaths)."""
    if config.getoption("pyargs", False) or not config.args:
        return None
    root = Path(config.invocation_params.dir)
    return [Path(os.path.abspath(root / arg.split("::", 1)[0])) for arg in config.args]


class NamedOnly:
    """Collect only below the paths the run names."""

    def __init__(self, named: List[Path]) -> None:
        self.named = named
        self.ignored = 0

    @pytest.hookimpl(tryfirst=True)
    def pytest_ignore_collect(self, collection_path: Path, config) -> Optional[bool]:
        if collection_path.name in LEFT_TO_PYTEST:
            return None
        # pytest asks only of paths that are not named, nor (directories) above a named one.
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

    def __call__(self, stream):
        # Read once: a file the C parser gave up on halfway is read again from the text.
        text = stream.read() if hasattr(stream, "read") else stream
        try:
            data = self.yaml.load(text, Loader=self.loader)
        except self.yaml.YAMLError:
            self.counts["fallback"] += 1
            return self.original(text)
        self.counts["parsed"] += 1
        return data


_installed: Optional[SafeLoad] = None


def install_libyaml(module: Any = None) -> Optional[SafeLoad]:
    """Point ``module.safe_load`` (PyYAML's) at the C parser; None where PyYAML has no
    libyaml."""
    global _installed
    if module is None:
        module = importlib.import_module("yaml")
    loader = getattr(module, "CSafeLoader", None)
    if loader is None:
        return None
    if _installed is None:
        _installed = SafeLoad(module, loader)
        module.safe_load = _installed
    return _installed


def uninstall_libyaml() -> None:
    global _installed
    if _installed is not None:
        _installed.yaml.safe_load = _installed.original
        _installed = None


# ---- hooks ----------------------------------------------------------------------

_narrow: Optional[NamedOnly] = None


def _record() -> None:
    write_plugin_json(
        PLUGIN,
        {
            "collect_ignored": _narrow.ignored if _narrow else None,
            "libyaml": _installed is not None,
            **(_installed.counts if _installed else {}),
        },
    )


def pytest_configure(config) -> None:
    global _narrow
    if run_dir() is None:
        return
    named = named_paths(config)
    if named:
        _narrow = NamedOnly(named)
        config.pluginmanager.register(_narrow, f"zlbench-{PLUGIN}-collect")
    install_libyaml()
    _record()


def pytest_collection_finish(session) -> None:
    if run_dir() is not None:
        _record()


def pytest_sessionfinish(session) -> None:
    if run_dir() is not None:
        _record()


def pytest_unconfigure(config) -> None:
    global _narrow
    uninstall_libyaml()
    _narrow = None

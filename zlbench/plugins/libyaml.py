"""pytest plugin: the benchmark's YAML parsed by libyaml, where PyYAML has it.

FlagGems' Benchmark parses its whole shape file (core_shapes.yaml, 17 KB) with
``yaml.safe_load`` in every test it runs, in each operator's first call: PyYAML's
pure-Python parser takes 57-75 ms for it on a CPU host. PyYAML's C parser
(``yaml.CSafeLoader``, present where PyYAML was built with libyaml, as its wheels are)
feeds the same constructor and resolver and takes 8 ms. For the benchmark process this
plugin points ``yaml.safe_load`` at it; a document the C parser refuses is parsed again
by the pure-Python one, so the result, or the error, is the one the benchmark would have
had. Nothing timed changes: not caliber.

What it did is recorded in ``$ZL_RUN_DIR/plugins/libyaml.json``: ``libyaml`` (whether
PyYAML has it), ``parsed`` (documents the C parser read) and ``fallback`` (documents it
refused, read by the pure-Python parser).
"""

from __future__ import annotations

import importlib
from typing import Any, Dict, Optional

from zlbench.plugins import run_dir, write_plugin_json

PLUGIN = "libyaml"


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


def install(module: Any = None) -> Optional[SafeLoad]:
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


def uninstall() -> None:
    global _installed
    if _installed is not None:
        _installed.yaml.safe_load = _installed.original
        _installed = None


def _record() -> None:
    write_plugin_json(PLUGIN, {"libyaml": _installed is not None, **(_installed.counts if _installed else {})})


def pytest_configure(config) -> None:
    if run_dir() is None:
        return
    install()
    _record()


def pytest_sessionfinish(session) -> None:
    if run_dir() is not None:
        _record()


def pytest_unconfigure(config) -> None:
    uninstall()

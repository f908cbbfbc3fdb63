"""The backend registry: one module per vendor, like pre-commit's languages/.

A new vendor is a module here that defines ``BACKEND`` and one line in ``_MODULES``.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from . import ascend, cpu, cuda, musa, rocm
from .base import GEMS_VENDORS, Backend, Device, DeviceError

_MODULES = (cuda, musa, rocm, ascend, cpu)
BACKENDS: Dict[str, Backend] = {m.BACKEND.name: m.BACKEND for m in _MODULES}
# Detection order: hardware vendors first, cpu last.
DETECT_ORDER = ("cuda", "musa", "rocm", "ascend")

__all__ = [
    "Backend",
    "Device",
    "DeviceError",
    "BACKENDS",
    "GEMS_VENDORS",
    "get_backend",
    "detect_backend",
    "plugin_plan",
    "canonical_name",
    "union",
    "gems_vendor",
]


class UnknownBackend(ValueError):
    pass


def canonical_name(name: str) -> str:
    """``nvidia`` -> ``cuda``; raises UnknownBackend listing what is accepted."""
    key = name.strip().lower()
    for backend in BACKENDS.values():
        if key == backend.name or key in backend.aliases:
            return backend.name
    accepted = ", ".join(f"{b.name} ({'/'.join(b.aliases)})" for b in BACKENDS.values())
    raise UnknownBackend(f"unknown backend {name!r}; accepted: {accepted}")


def get_backend(name: str) -> Backend:
    return BACKENDS[canonical_name(name)]


def detect_backend() -> Backend:
    """The first vendor whose tool or torch extension is present, else cpu."""
    for name in DETECT_ORDER:
        if BACKENDS[name].present():
            return BACKENDS[name]
    return BACKENDS["cpu"]


# Libraries under test that initialise a device when imported (FlagGems does, at HEAD).
DEVICE_AT_IMPORT = ("flag_gems",)


def initialised_runtimes() -> List[str]:
    """What in this process has touched a device: backend names whose runtime is
    initialised, and imported libraries that initialise one at import. Empty means a
    fork of this process can still use every device."""
    import sys

    found = [
        b.name for b in BACKENDS.values() if b.runtime_initialised is not None and b.runtime_initialised()
    ]
    return sorted(set(found)) + [m for m in DEVICE_AT_IMPORT if m in sys.modules]


def choose_timer(backend: Backend, enable_cudagraph: bool = True) -> str:
    return backend.default_timer if enable_cudagraph else "direct"


def plugin_plan(backend: Backend, enable_cudagraph: bool = True) -> List[str]:
    """The pytest -p list for a benchmark process on this backend.

    Compat plugins come first: they rewrite collection-time markers that every later
    plugin reads. No graph-capture plugin where the backend cannot capture.
    """
    timer = choose_timer(backend, enable_cudagraph)
    return [
        *backend.compat_plugins,
        "zlbench.plugins.phases",
        "zlbench.plugins.device_setup",
        "zlbench.plugins.gc_freeze",
        "zlbench.plugins.overheads",
        "zlbench.plugins.graph_timer" if timer == "graph" else "zlbench.plugins.direct_timer",
        "zlbench.plugins.autotune",
        # Its configure hook is tryfirst: it can switch autotune to replaying the
        # merged sweep before the autotune plugin reads its settings.
        "zlbench.plugins.parallel_warmup",
    ]


def union(attribute: str) -> Tuple[Any, ...]:
    """Every backend's entries of a tuple attribute, in registry order, each once: what
    to patch, record or recognise when the vendor at hand is not known (an error text
    seen by the batch, a timer a corpus may call)."""
    out: Dict[Any, None] = {}
    for backend in BACKENDS.values():
        for item in getattr(backend, attribute):
            out[item] = None
    return tuple(out)


def gems_vendor(name: Optional[str]) -> Tuple[Optional[str], str]:
    """(vendor FlagGems knows the backend by, where that came from). A backend may refine
    it by probing torch in this process (``gems_vendor_probe``); a probe that fails or
    names a vendor FlagGems does not accept is ignored."""
    backend = BACKENDS.get(name or "")
    if backend is None:
        return None, f"backend:{name}:unknown"
    probe = getattr(backend, "gems_vendor_probe", None)
    if probe is not None:
        try:
            found = probe()
        except Exception:
            found = None
        if found in GEMS_VENDORS:
            return found, f"probe:{name}"
    return backend.gems_vendor, f"backend:{name}"


def visibility_env(backend: Backend, device: Device) -> Dict[str, str]:
    """Variables that make a child see exactly ``device``."""
    if backend.visible_key is None or device.visible is None:
        return {}
    return {backend.visible_key: device.visible, "ZL_VISIBLE_KEY": backend.visible_key}

"""What a backend is: one vendor's devices, visibility variable, capabilities, and the
vendor knowledge the rest of zlbench asks for (timers to patch, packages whose versions
are recorded, error texts, the name FlagGems knows it by).

A backend module builds one ``Backend``; the registry (``__init__``) collects them.
Nothing outside backends/ names a vendor.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

# A vendor tool that hangs must not hang zlbench (FlagGems' own probe has no timeout).
TOOL_TIMEOUT_S = 10.0
# The vendor names FlagGems accepts in GEMS_VENDOR; v5.0.2 silently ignores anything else.
GEMS_VENDORS = frozenset(
    {
        "nvidia",
        "cambricon",
        "metax",
        "iluvatar",
        "mthreads",
        "kunlunxin",
        "hygon",
        "amd",
        "aipu",
        "ascend",
        "tsingmicro",
        "sunrise",
        "enflame",
    }
)
# Where benchmark code looks its timer up at call time, on any backend with triton.
TRITON_TIMER = ("triton.testing", "do_bench")
# What each vendor tool listed in this process: (its path, its mtime, its arguments) ->
# [(physical index, model)] (``Backend.probe_devices``).
_PROBED: Dict[Tuple[Any, ...], List[Tuple[str, str]]] = {}


@dataclass(frozen=True)
class Device:
    """One device as the caller addresses it.

    ``index`` is the id the user types (--device / --devices), in the caller's own
    numbering; ``visible`` is the value to put in the backend's visibility variable so
    that a child process sees exactly this device.
    """

    index: str
    visible: Optional[str]
    model: str = "unknown"


class DeviceState:
    """Clocks, temperature, power and throttle reasons of one device, read around rows.

    ``sample()`` returns ``{"sm_mhz", "mem_mhz", "temp_c", "power_w", "throttle"}``
    (a value the vendor does not expose is None; ``throttle`` is a list of reason
    names that slow the device down; a closing sample may add ``sm_mhz_window``, the
    SM clock the vendor sampled while the row ran: ``{"n", "min", "median"}``);
    ``ending`` says whether the sample closes a row (after its timed calls) or opens
    one, for readings that cover the time since the last row's end (NVML's
    ``other_procs``, ``sm_mhz_window``). ``describe()`` says where the numbers come from
    and whether clocks are locked (True, False or "unknown"). This base class is the
    answer where a vendor exposes nothing.
    """

    source = "unavailable"

    def __init__(self, reason: str = "this backend exposes no device state") -> None:
        self.reason = reason

    def available(self) -> bool:
        return False

    def sample(self, ending: bool = True) -> Dict[str, Any]:
        return {}

    def busy_sample(self) -> Dict[str, Any]:
        """``sm_mhz`` and ``throttle`` alone, cheap enough to read while a timing's work
        runs (``timing.CapWatch``); {} where the vendor exposes none."""
        return {}

    def describe(self) -> Dict[str, Any]:
        return {"source": self.source, "reason": self.reason, "clocks_locked": "unknown"}

    def close(self) -> None:
        pass


def open_device_state(backend: "Backend") -> DeviceState:
    """The backend's reader, or the unavailable one saying why; never raises."""
    if backend.device_state is None:
        return DeviceState()
    try:
        return backend.device_state()
    except Exception as e:  # a missing library or a driver refusing: say so per run
        return DeviceState(f"{type(e).__name__}: {e}")


class DeviceError(Exception):
    """A device selection that cannot be satisfied; the message says how to fix it."""


@dataclass(frozen=True)
class Backend:
    name: str
    aliases: Tuple[str, ...]
    visible_key: Optional[str]
    gems_vendor: Optional[str]
    can_graph_capture: bool
    compat_plugins: Tuple[str, ...] = ()
    # Command that lists devices, one per line as "<index>, <model>".
    list_tool: Optional[Tuple[str, ...]] = None
    parse_tool_output: Optional[Callable[[str], List[Tuple[str, str]]]] = None
    # Python distributions whose presence (found without importing) marks this vendor;
    # their versions are recorded in run_identity.json.
    torch_extensions: Tuple[str, ...] = ()
    description: str = ""
    # Refines gems_vendor inside the benchmark process (may import torch there, never in
    # the orchestrator): several vendors share one runtime API (hygon speaks ROCm).
    gems_vendor_probe: Optional[Callable[[], Optional[str]]] = None
    # Backends whose devices are worker slots rather than hardware (cpu).
    slots_only: bool = field(default=False)
    # True when this process has initialised the vendor runtime (a forked child could
    # not use the device). Reads sys.modules only: never imports torch.
    runtime_initialised: Optional[Callable[[], bool]] = None
    # The torch attribute with Event(enable_timing=True) and synchronize() for this
    # vendor ("cuda", "musa", "npu"); None: time on the host clock (cpu).
    torch_device: Optional[str] = None
    # Opens a reader of clocks, temperature, power and throttling for the device the
    # benchmark process sees; called there only (it may import vendor libraries).
    device_state: Optional[Callable[[], "DeviceState"]] = None
    # Extra variables for the benchmark process, from the run's knob values (cpu pins
    # its thread count here).
    run_env: Optional[Callable[[Mapping[str, object]], Dict[str, str]]] = None
    # Knobs (by name) the benchmark process gets on this backend only; elsewhere their
    # variables are absent, which the plugins read as "not asked".
    child_knobs: Tuple[str, ...] = ()
    # (module, attribute) of the do_bench functions benchmark code calls here: the
    # direct timer patches them. Vendor modules are patched only once loaded.
    timer_targets: Tuple[Tuple[str, str], ...] = (TRITON_TIMER,)
    # The torch.profiler activity that traces this device's kernels and copies
    # (ProfilerActivity.<name>): the direct timer's "kernels" clock. None: no tracer.
    profiler_activity: Optional[str] = None
    # Runtime error texts (lower case) after which the device context is dead, the enum
    # name prefixes torch prints ("cudaerror" in "cudaErrorIllegalAddress"), and the
    # numeric codes exceptions may carry for the same errors.
    fatal_texts: Tuple[str, ...] = ()
    error_enum_prefixes: Tuple[str, ...] = ()
    fatal_codes: frozenset = frozenset()
    # Error texts (lower case) meaning "this work cannot be graph-captured".
    capture_texts: Tuple[str, ...] = ()
    # Regex alternatives for errors that usually mean the device hiccuped (retry).
    transient_patterns: Tuple[str, ...] = ()
    # Device files the vendor driver creates (globs): hardware without the vendor tool.
    device_nodes: Tuple[str, ...] = ()

    @property
    def default_timer(self) -> str:
        return "graph" if self.can_graph_capture else "direct"

    # -- detection ---------------------------------------------------------
    def tool_path(self) -> Optional[str]:
        """Where the vendor listing tool is on PATH, or None."""
        return shutil.which(self.list_tool[0]) if self.list_tool else None

    def tool_available(self) -> bool:
        return self.tool_path() is not None

    def extension_installed(self) -> bool:
        return any(importlib.util.find_spec(name) is not None for name in self.torch_extensions)

    def present(self) -> bool:
        return self.tool_available() or self.extension_installed()

    def nodes_present(self) -> bool:
        return any(glob.glob(pattern) for pattern in self.device_nodes)

    # -- enumeration -------------------------------------------------------
    def probe_devices(self) -> List[Tuple[str, str]]:
        """(physical index, model) from the vendor tool; [] when it is missing or fails.

        A process asks the tool once (what it listed is kept, per tool binary): a warm
        worker asks before it forks, and the attempts it forks inherit the answer instead
        of each starting the tool before its benchmark could begin."""
        tool = self.tool_path()
        if tool is None or self.parse_tool_output is None:
            return []
        try:
            key = (tool, os.stat(tool).st_mtime_ns, *self.list_tool[1:])
        except OSError:
            return []
        if key in _PROBED:
            return list(_PROBED[key])
        try:
            out = subprocess.run(list(self.list_tool), capture_output=True, text=True, timeout=TOOL_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired):
            return []
        if out.returncode != 0:
            return []
        found = self.parse_tool_output(out.stdout)
        if found:
            _PROBED[key] = list(found)
        return found

    def devices(
        self,
        environ: Mapping[str, str],
        selection: Optional[Sequence[str]] = None,
        probed: Optional[List[Tuple[str, str]]] = None,
    ) -> List[Device]:
        """The devices a run or batch may use, in the caller's numbering.

        With a visibility variable already set, index i means its i-th entry (as the
        vendor runtime numbers them), so a caller who chose 6,7 is never moved to 0,1.
        ``probed``: ``probe_devices()`` already run, for a caller asking twice.
        """
        if self.slots_only:
            return _slots(selection)
        caller = _split(environ.get(self.visible_key, "")) if self.visible_key else []
        if probed is None:
            probed = self.probe_devices()
        models = dict(probed)
        if caller:
            universe = [(str(i), v) for i, v in enumerate(caller)]
        elif probed:
            universe = [(idx, idx) for idx, _ in probed]
        elif selection and (self.present() or self.nodes_present()):
            # No device listed, but the vendor's tool, torch extension or device files
            # are here: trust the explicit list as physical ids.
            universe = [(s, s) for s in selection]
        elif selection:
            # Nothing of the vendor on this host: a run here would measure nothing on
            # this backend (every row falls back), and must not report ok.
            raise DeviceError(
                f"no {self.name} device on this host: {self.visible_key or 'no visibility variable'} "
                f"unset, {(self.list_tool or ('no vendor tool',))[0]} not found, no "
                f"{' '.join(self.device_nodes) or 'device files'}; run on a {self.name} host or "
                "pick the backend this host has (--backend)"
            )
        else:
            universe = []
        if selection is None:
            chosen = universe
        else:
            known = dict(universe)
            missing = [s for s in selection if s not in known]
            if missing:
                where = f"{self.visible_key}={','.join(caller)}" if caller else "the devices found"
                raise DeviceError(
                    f"device {', '.join(missing)} is not among {where} "
                    f"(indices: {', '.join(known) or 'none'}); pick from those with --device/--devices"
                )
            chosen = [(s, known[s]) for s in selection]
        return [Device(idx, vis, models.get(vis, "unknown")) for idx, vis in chosen]


def torch_runtime_initialised(attr: str) -> Callable[[], bool]:
    """A probe for ``torch.<attr>.is_initialized()`` (cuda, musa, npu) that is False
    wherever torch or the extension was never imported."""

    def probe() -> bool:
        torch = sys.modules.get("torch")
        module = getattr(torch, attr, None) if torch is not None else None
        check = getattr(module, "is_initialized", None)
        return bool(check()) if callable(check) else False

    return probe


def _split(text: str) -> List[str]:
    return [p.strip() for p in text.split(",") if p.strip()]


def _slots(selection: Optional[Sequence[str]]) -> List[Device]:
    ids = list(selection) if selection else ["0"]
    return [Device(i, None, "cpu") for i in ids]


def parse_csv_index_name(text: str) -> List[Tuple[str, str]]:
    """Parse ``0, NVIDIA H200`` lines (nvidia-smi --query-gpu=index,name --format=csv,noheader)."""
    rows = []
    for line in text.splitlines():
        if "," in line:
            idx, name = line.split(",", 1)
            if idx.strip().isdigit():
                rows.append((idx.strip(), name.strip()))
    return rows

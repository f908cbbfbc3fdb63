"""Device state of an NVIDIA GPU through NVML (``pip install 'zlbench[nvml]'``).

Imported by the cuda backend's ``device_state`` inside the benchmark process only: the
orchestrator never loads pynvml. The device is found by the UUID torch reports for
the one device the process sees (NVML ignores CUDA_VISIBLE_DEVICES), else by the
visibility value when it is a plain index or a UUID.
"""

from __future__ import annotations

import os
import statistics
import time
from typing import Any, Callable, Dict, List, Optional, Sequence

from .base import DeviceState

# Reasons that slow a busy device down. Idle, application-clock and display-clock
# reasons are left out: they say how clocks were set, not that the row was throttled.
SLOWDOWN_REASONS = (
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal"),
    (0x40, "hw_thermal"),
    (0x80, "hw_power_brake"),
)


def reason_names(mask: int) -> List[str]:
    return [name for bit, name in SLOWDOWN_REASONS if mask & bit]


# A process counts as busy on the device from this much SM or memory utilization in a
# sample: below it sit a display server, a monitoring agent, or a batch's prestarted
# process touching the device while it imports.
BUSY_MIN_PCT = 5


def _busy(sample: Any) -> bool:
    utils = [getattr(sample, name, 0) or 0 for name in ("smUtil", "memUtil")]
    return all(u <= 100 for u in utils) and max(utils) >= BUSY_MIN_PCT  # NVML can report junk above 100%


def other_busy_processes(samples: Sequence[Any], own_pid: int) -> Optional[int]:
    """How many processes other than this one kept the device's SMs or memory busy
    (``BUSY_MIN_PCT``) in NVML's per-process utilization ``samples`` (``pid``,
    ``smUtil``, ``memUtil``); None without samples. Where NVML shows this process's pid,
    every other busy pid is another; where it does not (a container's pids are the
    host's), every busy process but one is: a process this one cannot name then goes
    unseen while this one is idle, never the other way round."""
    samples = [s for s in samples if int(s.pid) != 0]  # NVML pads its array with zeroed entries
    if not samples:
        return None
    busy = {int(s.pid) for s in samples if _busy(s)}
    if any(int(s.pid) == own_pid for s in samples):
        return len(busy - {own_pid})
    return max(0, len(busy) - 1)


def _visible_entry() -> Optional[str]:
    key = os.environ.get("ZL_VISIBLE_KEY") or "CUDA_VISIBLE_DEVICES"
    value = os.environ.get(key, "").split(",")[0].strip()
    return value or None


def _torch_uuid() -> Optional[str]:
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        uuid = getattr(torch.cuda.get_device_properties(torch.cuda.current_device()), "uuid", None)
    except Exception:
        return None
    if uuid is None:
        return None
    text = str(uuid)
    return text if text.startswith(("GPU-", "MIG-")) else f"GPU-{text}"


class NvmlState(DeviceState):
    source = "nvml"

    def __init__(self) -> None:
        import pynvml

        self.nvml = pynvml
        pynvml.nvmlInit()
        self.handle = self._find_handle()
        self.reason = ""
        self.pid = os.getpid()
        self.last_utilization_us = 0  # NVML's timestamp of the newest utilization sample read
        self.last_clock_us = 0  # ... and of the newest SM clock sample read
        # Rows' closing samples with an SM clock window, and without one (none kept since).
        self.clock_windows = {"read": 0, "none": 0}
        # NVML's error for a clock-sample read other than "none newer" (NotFound), by name.
        self.clock_error: Optional[str] = None
        self.asked_utilization = False
        # Device samples that could say whether another process used the device, and did.
        self.shared_checks = {"answered": 0, "unanswered": 0}

    def _find_handle(self):
        nv = self.nvml
        uuid = _torch_uuid()
        if uuid:
            return nv.nvmlDeviceGetHandleByUUID(uuid)
        entry = _visible_entry()
        if entry is None or entry.isdigit():
            return nv.nvmlDeviceGetHandleByIndex(int(entry or 0))
        if entry.startswith(("GPU-", "MIG-")):
            return nv.nvmlDeviceGetHandleByUUID(entry)
        raise RuntimeError(f"cannot map visible device {entry!r} to an NVML device")

    def available(self) -> bool:
        return True

    def _read(self, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(self.handle, *args)
        except Exception:  # NVML_ERROR_NOT_SUPPORTED and friends: report None
            return None

    def _reasons(self) -> Optional[int]:
        nv = self.nvml
        fn = (
            getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None)
            or nv.nvmlDeviceGetCurrentClocksThrottleReasons
        )
        return self._read(fn)

    def _others(self) -> Optional[int]:
        """Other processes busy on the device since the last time this asked (None: NVML
        has no per-process samples for that time, or cannot give them)."""
        fn = getattr(self.nvml, "nvmlDeviceGetProcessUtilization", None)
        since = self.last_utilization_us
        samples = [s for s in self._read(fn, since) or [] if int(s.timeStamp) > since] if fn else []
        self.asked_utilization = True
        if samples:
            self.last_utilization_us = max(int(s.timeStamp) for s in samples)
        others = other_busy_processes(samples, self.pid)
        self.shared_checks["unanswered" if others is None else "answered"] += 1
        return others

    def _keeps_clock_samples(self) -> bool:
        return hasattr(self.nvml, "nvmlDeviceGetSamples") and hasattr(self.nvml, "NVML_PROCESSOR_CLK_SAMPLES")

    def _clock_window(self, ending: bool) -> Optional[Dict[str, Any]]:
        """The SM clock samples the driver kept since the last sample (NVML's
        ``nvmlDeviceGetSamples``, several a second): on a row's closing sample, those of
        the row's warm-up and timed calls, ``{"n", "min", "median"}`` in MHz; None where
        there are none or this NVML keeps none. An opening sample only moves the window's
        start. The point readings before and after a row can both show the top clock
        while the row ran a step lower; on H100s whole operators moved by 0.3-0.7% while
        every point reading was 1980 MHz (docs/design.md, Device state and spread per
        row, where one such level was measured at the top effective clock)."""
        if not self._keeps_clock_samples():
            return None
        since = self.last_clock_us
        samples = self._clock_samples(since)
        if samples:
            self.last_clock_us = max(int(s.timeStamp) for s in samples)
        elif not since:
            # None kept yet: the window opens now (NVML stamps samples in the CPU's
            # microseconds), not at the first sample, which would take in what ran before.
            self.last_clock_us = time.time_ns() // 1000
        if not ending or not since:  # the first read holds what came before this process
            return None
        self.clock_windows["read" if samples else "none"] += 1
        if not samples:
            return None
        values = sorted(int(s.sampleValue.uiVal) for s in samples)
        return {"n": len(values), "min": values[0], "median": statistics.median(values)}

    def _clock_samples(self, since: int) -> List[Any]:
        """The SM clock samples NVML kept after ``since``; [] for none (NotFound), and
        for an error, whose name ``describe`` reports (a driver that keeps no clock
        samples answers every read so, and its rows would otherwise read as short)."""
        nv = self.nvml
        try:
            _, got = nv.nvmlDeviceGetSamples(self.handle, nv.NVML_PROCESSOR_CLK_SAMPLES, since)
        except Exception as exc:
            if not isinstance(exc, getattr(nv, "NVMLError_NotFound", ())):
                self.clock_error = type(exc).__name__
            return []
        return [s for s in got if int(s.timeStamp) > since]

    def busy_sample(self) -> Dict[str, Any]:
        mask = self._reasons()
        return {
            "sm_mhz": self._read(self.nvml.nvmlDeviceGetClockInfo, self.nvml.NVML_CLOCK_SM),
            "throttle": None if mask is None else reason_names(int(mask)),
        }

    def sample(self, ending: bool = True) -> Dict[str, Any]:
        nv = self.nvml
        power_mw = self._read(nv.nvmlDeviceGetPowerUsage)
        mask = self._reasons()
        # The per-process query is the costly read (1.7 ms on an H200 host, 3.9 s of a
        # 24-operator pass when every sample asked): only a row's last sample asks, for
        # the time since the last row's (the benchmark's work between the rows, the
        # row's warm-up and its timed calls), and the process's first sample, which
        # opens the first window (what NVML holds from before, such as the last
        # operator's process, stays out of it).
        others = self._others() if ending or not self.asked_utilization else None
        window = self._clock_window(ending)
        reading = {
            "sm_mhz": self._read(nv.nvmlDeviceGetClockInfo, nv.NVML_CLOCK_SM),
            "mem_mhz": self._read(nv.nvmlDeviceGetClockInfo, nv.NVML_CLOCK_MEM),
            "temp_c": self._read(nv.nvmlDeviceGetTemperature, nv.NVML_TEMPERATURE_GPU),
            "power_w": None if power_mw is None else round(power_mw / 1000.0, 1),
            "throttle": None if mask is None else reason_names(int(mask)),
            # An opening sample's count covers what came before the window: no row's.
            "other_procs": others if ending else None,
        }
        if window:
            reading["sm_mhz_window"] = window
        return reading

    def describe(self) -> Dict[str, Any]:
        nv = self.nvml
        sm = nv.NVML_CLOCK_SM
        app = self._read(nv.nvmlDeviceGetClock, sm, nv.NVML_CLOCK_ID_APP_CLOCK_TARGET)
        app_default = self._read(nv.nvmlDeviceGetClock, sm, nv.NVML_CLOCK_ID_APP_CLOCK_DEFAULT)
        p0 = None
        getter = getattr(nv, "nvmlDeviceGetMinMaxClockOfPState", None)
        if getter is not None:
            try:
                p0 = tuple(int(v) for v in getter(self.handle, sm, 0))
            except Exception:
                p0 = None
        return {
            "source": self.source,
            "name": _text(self._read(nv.nvmlDeviceGetName)),
            "uuid": _text(self._read(nv.nvmlDeviceGetUUID)),
            "max_sm_mhz": self._read(nv.nvmlDeviceGetMaxClockInfo, sm),
            "app_sm_mhz": app,
            "default_app_sm_mhz": app_default,
            "p0_sm_mhz_range": list(p0) if p0 else None,
            "clocks_locked": clocks_locked(app, app_default, p0),
            # How often a row could be checked for another process on the device
            # (device_shared): never, where this NVML gives no per-process samples.
            "device_shared_check": (
                dict(self.shared_checks)
                if hasattr(self.nvml, "nvmlDeviceGetProcessUtilization")
                else "unavailable: this NVML has no nvmlDeviceGetProcessUtilization"
            ),
            # How many rows' closing samples carried the SM clock NVML sampled while the
            # row ran (sm_mhz_window), and how many found none kept since the opening one.
            "sm_clock_window": self._clock_window_counts(),
        }

    def _clock_window_counts(self) -> Any:
        if not self._keeps_clock_samples():
            return "unavailable: this NVML has no nvmlDeviceGetSamples for the SM clock"
        counts: Dict[str, Any] = dict(self.clock_windows)
        if self.clock_error:
            counts["error"] = self.clock_error
        return counts

    def close(self) -> None:
        try:
            self.nvml.nvmlShutdown()
        except Exception:
            pass


def _text(value: Any) -> Optional[str]:
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return None if value is None else str(value)


def clocks_locked(app: Optional[int], app_default: Optional[int], p0_range) -> Any:
    """True when application clocks differ from their default or the P0 SM clock range
    is a single frequency (``nvidia-smi -lgc F,F``); False when both were read and show
    neither; "unknown" when NVML would not say."""
    evidence = []
    if app is not None and app_default is not None:
        evidence.append(app != app_default)
    if p0_range:
        evidence.append(p0_range[0] == p0_range[1])
    if not evidence:
        return "unknown"
    return any(evidence)


def open_state() -> DeviceState:
    try:
        import pynvml  # noqa: F401
    except ImportError:
        return DeviceState("pynvml is not installed (pip install 'zlbench[nvml]')")
    return NvmlState()

"""Autotune records: which config each autotuned kernel used, per key, on disk.

A run leaves ``<run_dir>/autotune_records/<kernel>.json``, one readable JSON file per
kernel::

    {
      "format": "zlbench.autotune_records/1",
      "kernel": "flag_gems.ops.mm.mm_kernel_general",
      "tuner": "libtuner",              # or "autotuner" (plain @triton.autotune)
      "tuner_class": "DefaultLibTunerImpl",
      "key_names": ["M", "N", "K", "stride_am", "stride_bk"],
      "use_flagtune": "0",
      "entries": [
        {"key": [1024, 1024, 1024, 1024, 1, "torch.float16"],
         "config": {"kwargs": {"BLOCK_M": 128, ...}, "num_warps": 8, "num_stages": 3,
                    "num_ctas": 1, "maxnreg": null, "has_pre_hook": false},
         "origin": "tuned"}             # tuned | cached | replayed | disk_cache
      ]
    }

Keys are tuples of ints, strs and dtypes. ``encode_value`` maps them to JSON values
(a dtype becomes ``{"dtype": "torch.float16"}``) and ``key_id`` is the canonical text
of that form, so a key read back from a file matches the live key it came from.

Everything here is pure: no torch, no triton. The pytest plugin
(zlbench.plugins.autotune) is the glue that feeds it live tuners and configs.
"""

from __future__ import annotations

import hashlib
import json
import numbers
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Set, Tuple

from .atomic import write_atomic

FORMAT = "zlbench.autotune_records/1"

LIBTUNER = "libtuner"
AUTOTUNER = "autotuner"

# Where the config a call used came from.
ORIGIN_TUNED = "tuned"  # benchmarked in this call
ORIGIN_CACHED = "cached"  # taken from the tuner's cache (a warm FlagGems DB)
ORIGIN_REPLAYED = "replayed"  # injected from REPLAY_FROM
ORIGIN_DISK = "disk_cache"  # from triton's autotune disk cache: an earlier process tuned it

# Why a key was not replayed (AUTOTUNE_REPLAY_FALLBACK reason=...).
KEY_MISSING = "key_missing"
PRE_HOOK_DROPPED = "pre_hook_dropped"
PRE_HOOK_UNMATCHED = "pre_hook_unmatched"
COMPILE_FAILED = "compile_failed"
NO_EVICT = "no_evict"

_STANDARD_LAUNCH = ("num_warps", "num_stages", "num_ctas", "maxnreg")


# ---- keys -----------------------------------------------------------------------


def encode_value(value: Any) -> Any:
    """A JSON value standing for one element of a key or a config kwarg."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, (tuple, list)):
        return [encode_value(v) for v in value]
    if isinstance(value, dict):
        # Already encoded (a dtype tag read back from a file) or a real mapping.
        return {str(k): encode_value(v) for k, v in value.items()}
    # torch.dtype and triton.language.dtype are both classes named "dtype".
    if type(value).__name__ == "dtype":
        return {"dtype": str(value)}
    return {"object": f"{type(value).__module__}.{type(value).__qualname__}", "repr": repr(value)}


def encode_key(key: Iterable[Any]) -> List[Any]:
    return [encode_value(v) for v in key]


def key_id(key: Iterable[Any]) -> str:
    """Canonical text of a key; equal for a live key and its JSON round trip."""
    return json.dumps(encode_key(key), sort_keys=True, separators=(",", ":"))


# ---- configs --------------------------------------------------------------------


def encode_config(config: Any) -> Dict[str, Any]:
    """A triton.Config-shaped object as JSON (kwargs, launch options, has_pre_hook)."""
    kwargs = dict(getattr(config, "kwargs", {}) or {})
    launch: Dict[str, Any] = {}
    all_kwargs = getattr(config, "all_kwargs", None)
    if callable(all_kwargs):
        launch = {k: v for k, v in all_kwargs().items() if k not in kwargs}
    for name in _STANDARD_LAUNCH:
        launch.setdefault(name, getattr(config, name, None))
    out: Dict[str, Any] = {"kwargs": {k: encode_value(v) for k, v in sorted(kwargs.items())}}
    for name in _STANDARD_LAUNCH:
        out[name] = encode_value(launch.pop(name))
    extra = {k: encode_value(v) for k, v in sorted(launch.items()) if v is not None}
    if extra:
        out["extra"] = extra
    out["has_pre_hook"] = getattr(config, "pre_hook", None) is not None
    return out


def config_id(encoded: Mapping[str, Any]) -> str:
    """What makes two configs the same kernel launch: everything but the hook."""
    body = {k: v for k, v in encoded.items() if k != "has_pre_hook"}
    for name in _STANDARD_LAUNCH:
        if body.get(name) is None:
            body.pop(name, None)
    return json.dumps(body, sort_keys=True, separators=(",", ":"))


def index_configs(configs: Iterable[Any]) -> Dict[str, Any]:
    """config_id -> the tuner's own config object (the first of equal ones)."""
    index: Dict[str, Any] = {}
    for candidate in configs:
        index.setdefault(config_id(encode_config(candidate)), candidate)
    return index


def build_config(encoded: Mapping[str, Any], factory: Callable[..., Any]) -> Any:
    """A fresh config from its JSON form; ``factory`` is the tuner's Config class."""
    launch = {k: encoded.get(k) for k in _STANDARD_LAUNCH if encoded.get(k) is not None}
    config = factory(dict(encoded.get("kwargs", {})), **launch)
    for name, value in (encoded.get("extra") or {}).items():
        setattr(config, name, value)
    return config


# ---- replay decision ------------------------------------------------------------


@dataclass(frozen=True)
class ReplayChoice:
    inject: bool
    reason: Optional[str] = None  # why not, when inject is False
    use_original: bool = False  # inject the tuner's own config object (hook kept)


def choose_replay(
    entry: Optional[Mapping[str, Any]], tuner_kind: str, matched_original: bool
) -> ReplayChoice:
    """Whether to inject a recorded config.

    LibTuner configs keep their pre_hook (hopper TMA mm needs it to set descriptor
    block shapes); the hook comes from the tuner's own matching config. A plain
    triton Autotuner drops pre_hook records, as triton's own disk cache does, and the
    key falls back visibly. A hooked config with no match cannot get its hook back.
    """
    if entry is None:
        return ReplayChoice(False, KEY_MISSING)
    has_hook = bool(entry["config"].get("has_pre_hook"))
    if has_hook and tuner_kind != LIBTUNER:
        return ReplayChoice(False, PRE_HOOK_DROPPED)
    if matched_original:
        return ReplayChoice(True, use_original=True)
    if has_hook:
        return ReplayChoice(False, PRE_HOOK_UNMATCHED)
    return ReplayChoice(True)


_COMPILE_ERRORS = {"OutOfResources", "CompilationError", "PTXASError", "CompileTimeAssertionFailure"}


def is_compile_failure(exc: BaseException) -> bool:
    """A compile-time failure of one config (worth falling back), by class name."""
    return any(cls.__name__ in _COMPILE_ERRORS for cls in type(exc).__mro__)


# ---- record files ---------------------------------------------------------------


@dataclass
class KernelRecords:
    kernel: str
    tuner: str
    tuner_class: str = ""
    key_names: List[str] = field(default_factory=list)
    use_flagtune: Optional[str] = None
    entries: Dict[str, Dict[str, Any]] = field(default_factory=dict)  # key_id -> entry

    def put(self, key: Iterable[Any], config: Dict[str, Any], origin: str) -> bool:
        """Store the config used for key; True when this changed the record."""
        encoded = encode_key(key)
        kid = key_id(encoded)
        old = self.entries.get(kid)
        if old is not None and old["config"] == config:
            return False  # same config again: keep how it was first obtained
        self.entries[kid] = {"key": encoded, "config": config, "origin": origin}
        return True

    def to_json(self) -> Dict[str, Any]:
        return {
            "format": FORMAT,
            "kernel": self.kernel,
            "tuner": self.tuner,
            "tuner_class": self.tuner_class,
            "key_names": list(self.key_names),
            "use_flagtune": self.use_flagtune,
            "entries": [self.entries[k] for k in sorted(self.entries)],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "KernelRecords":
        if data.get("format") != FORMAT:
            raise ValueError(f"not an autotune record (format={data.get('format')!r})")
        rec = cls(
            kernel=data["kernel"],
            tuner=data.get("tuner", AUTOTUNER),
            tuner_class=data.get("tuner_class", ""),
            key_names=list(data.get("key_names", [])),
            use_flagtune=data.get("use_flagtune"),
        )
        for entry in data.get("entries", []):
            rec.entries[key_id(entry["key"])] = dict(entry)
        return rec


_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def record_filename(kernel: str) -> str:
    """A readable file name; a hash suffix where the name had to be altered."""
    safe = _UNSAFE.sub("_", kernel)
    if safe != kernel or len(safe) > 150:
        digest = hashlib.sha1(kernel.encode("utf-8")).hexdigest()[:8]
        safe = f"{safe[:150]}-{digest}"
    return f"{safe}.json"


def dumps_records(rec: KernelRecords) -> str:
    return json.dumps(rec.to_json(), indent=1, sort_keys=True) + "\n"


def write_records(records_dir: Path, rec: KernelRecords) -> Path:
    """Write one kernel's file atomically (a killed run leaves whole files)."""
    records_dir.mkdir(parents=True, exist_ok=True)
    path = records_dir / record_filename(rec.kernel)
    write_atomic(path, dumps_records(rec))
    return path


def load_records(records_dir: Path) -> Tuple[Dict[str, KernelRecords], List[str]]:
    """Every kernel's records under a dir, and the files that could not be read."""
    out: Dict[str, KernelRecords] = {}
    problems: List[str] = []
    for path in sorted(Path(records_dir).glob("*.json")):
        try:
            rec = KernelRecords.from_json(json.loads(path.read_text()))
        except (OSError, ValueError, KeyError, TypeError) as e:
            problems.append(f"{path.name}: {e}")
            continue
        out[rec.kernel] = rec
    return out, problems


# ---- coverage -------------------------------------------------------------------


@dataclass
class Coverage:
    """Distinct (kernel, key) pairs by outcome. A fallback outranks an earlier replay
    of the same key (a replayed config that then failed to compile fell back)."""

    replayed: Set[Tuple[str, str]] = field(default_factory=set)
    fell_back: Dict[Tuple[str, str], str] = field(default_factory=dict)
    recorded: Dict[Tuple[str, str], str] = field(default_factory=dict)  # -> origin

    def note_replayed(self, kernel: str, kid: str) -> None:
        if (kernel, kid) not in self.fell_back:
            self.replayed.add((kernel, kid))

    def note_fallback(self, kernel: str, kid: str, reason: str) -> bool:
        """True the first time this key falls back (print its marker once)."""
        self.replayed.discard((kernel, kid))
        first = (kernel, kid) not in self.fell_back
        self.fell_back[(kernel, kid)] = reason
        return first

    def note_recorded(self, kernel: str, kid: str, origin: str) -> None:
        self.recorded[(kernel, kid)] = origin

    def counts(self) -> Dict[str, Any]:
        reasons: Dict[str, int] = {}
        for reason in self.fell_back.values():
            reasons[reason] = reasons.get(reason, 0) + 1
        origins: Dict[str, int] = {}
        for origin in self.recorded.values():
            origins[origin] = origins.get(origin, 0) + 1
        return {
            "replayed": len(self.replayed),
            "fell_back": len(self.fell_back),
            "fallback_reasons": dict(sorted(reasons.items())),
            "recorded_keys": len(self.recorded),
            "recorded_kernels": len({k for k, _ in self.recorded}),
            "recorded_origins": dict(sorted(origins.items())),
        }

    def per_kernel(self) -> Dict[str, Dict[str, int]]:
        out: Dict[str, Dict[str, int]] = {}
        for name, table in (
            ("replayed", self.replayed),
            ("fell_back", self.fell_back),
            ("recorded", self.recorded),
        ):
            for kernel, _ in table:
                row = out.setdefault(kernel, {"replayed": 0, "fell_back": 0, "recorded": 0})
                row[name] += 1
        return dict(sorted(out.items()))


def unused_records(records: Mapping[str, KernelRecords], asked: Iterable[Tuple[str, str]]) -> int:
    """Recorded keys that no call of this run asked for."""
    asked_set = set(asked)
    return sum(1 for kernel, rec in records.items() for kid in rec.entries if (kernel, kid) not in asked_set)


def footer(mode: str, counts: Mapping[str, Any]) -> str:
    if mode == "replay":
        return f"autotune: replayed {counts['replayed']}, fell back {counts['fell_back']}"
    return f"autotune: recorded {counts['recorded_keys']} keys in {counts['recorded_kernels']} kernels"

"""Parallel autotune warmup: the decisions, free of processes and pytest.

PARALLEL_WARMUP_GPUS=N shards the autotune sweep of one operator over N devices before
the normal serial measurement replays the merged configs. This module decides: which
shape-file keys the selected tests read (statically, before any Benchmark exists),
how their shapes split into shards, what each shard's shape file, command line,
environment and device are, whether to refuse, and how the shards' records merge.
The pytest plugin (zlbench.plugins.parallel_warmup) runs the processes.

A refusal is never silent: it is a ``PARALLEL_WARMUP_REFUSED reason=...`` marker and
the normal serial sweep. It refuses whenever coverage could be partial, because a
merged config set with holes is exactly what replay must not be handed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from . import autotune_records as ar
from . import benchenv, knobs
from .backends.base import _split  # visibility lists parse as the backends parse them
from .corpus.layout import TreeError
from .corpus.scan import find_construction, scan_module, shape_key_for
from .corpus.tree import BenchTree
from .markers import PARALLEL_WARMUP_REFUSED, format_marker
from .tuner_cache import flaggems_db_path

# Refusal reasons (PARALLEL_WARMUP_REFUSED reason=...).
LEVEL_COMPREHENSIVE = "level_comprehensive"
SET_SHAPES_OVERRIDE = "set_shapes_override"
NO_SHAPE_KEY = "no_shape_key"
NO_SHAPES = "no_shapes"
REPLAY_REQUESTED = "replay_requested"
AUTOTUNE_OFF = "autotune_off"
SHARD_FAILED = "shard_failed"
RECORDS_UNREADABLE = "records_unreadable"
NO_RECORDS = "no_records"
WARMUP_ERROR = "warmup_error"

# Shards' timings are thrown away: the shortest measurement the corpus accepts.
FAST_TIMING = {"--warmup": "1", "--iter": "1"}
_MARK_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class Refusal(NamedTuple):
    reason: str
    fields: Dict[str, Any]
    detail: str

    def marker(self) -> str:
        return format_marker(PARALLEL_WARMUP_REFUSED, reason=self.reason, **self.fields)


# ---- where shards run ----------------------------------------------------------


def device_pool(environ: Mapping[str, str]) -> Tuple[Optional[str], List[str]]:
    """(visibility variable, the caller's devices as visibility values, own one first).

    ZL_WARMUP_DEVICES carries values, not indices, so a caller who chose 6,7 stays on
    6,7. Without it only the run's own device is known (never a bare 0, 1, ...).
    """
    key = environ.get("ZL_VISIBLE_KEY") or None
    pool = list(benchenv.warmup_devices(environ))
    if not pool and key and environ.get(key):
        pool = _split(environ[key])[:1]
    return key, pool


def shard_devices(pool: Sequence[str], n: int) -> List[Optional[str]]:
    """Device i of the pool for shard i, wrapping when there are more shards."""
    if not pool:
        return [None] * n
    return [pool[i % len(pool)] for i in range(n)]


# ---- which shape keys the selected tests read ----------------------------------


@dataclass
class Resolution:
    """The shape key one selected test reads, found statically."""

    test: str
    op: Optional[str] = None
    key: Optional[str] = None
    candidates_tried: List[str] = field(default_factory=list)
    shapes_from: Optional[str] = None  # "<Class>.set_shapes" when the class overrides it
    problem: Optional[str] = None  # why nothing could be resolved

    def to_json(self) -> Dict[str, Any]:
        return {
            "test": self.test,
            "op": self.op,
            "key": self.key,
            "candidates_tried": list(self.candidates_tried),
            "shapes_from": self.shapes_from,
            "problem": self.problem,
        }


def selected_tests(
    root: Path, args: Sequence[str], markexpr: str
) -> Tuple[List[Tuple[str, str, Optional[str]]], List[str]]:
    """(file, function, op) for every test the pytest selection can run, and problems.

    Node ids name their function; a file with ``-m <op>`` means every test function in
    it carrying that mark (v5.0.2 puts marks on parametrizations: any case counts).
    """
    op = markexpr.strip() if _MARK_NAME.match(markexpr.strip() or "-") else None
    problems: List[str] = []
    if markexpr.strip() and op is None:
        problems.append(f"-m {markexpr!r} is not a single operator mark")
    if not args:
        problems.append("no test file or node in the pytest arguments")
    tree = BenchTree(root)
    out: List[Tuple[str, str, Optional[str]]] = []
    for arg in args:
        file_part, _, rest = arg.partition("::")
        rel = _relative(root, file_part)
        if rel is None or not (tree.root / rel).is_file():
            problems.append(f"{arg}: not a benchmark file under {root}")
            continue
        if rest:
            func = rest.split("::")[-1]
            out.append((rel, func, op or _op_from_param_id(func)))
            continue
        module = tree.module_at(rel)
        entries = [] if module is None else scan_module(tree, module)
        chosen = [e for e in entries if op is None or op in e.marks]
        if not chosen:
            problems.append(f"{arg}: no test function" + (f" marked {op}" if op else ""))
        out.extend((rel, e.function, op) for e in chosen)
    return out, problems


def _relative(root: Path, file_part: str) -> Optional[str]:
    path = Path(file_part)
    if path.is_absolute():
        try:
            return path.resolve().relative_to(Path(root).resolve()).as_posix()
        except ValueError:
            return None
    return path.as_posix()


def _op_from_param_id(func: str) -> Optional[str]:
    """``test_x[mm-...]``: v5.0.2 ids start with the operator name."""
    if "[" not in func:
        return None
    head = func.split("[", 1)[1].split("-", 1)[0].rstrip("]")
    return head if _MARK_NAME.match(head) else None


def resolve_keys(
    root: Path, args: Sequence[str], markexpr: str, shapes: Mapping[str, Any]
) -> List[Resolution]:
    """One Resolution per selected test (or one carrying the selection's problem)."""

    try:
        tests, problems = selected_tests(root, args, markexpr)
    except TreeError as e:
        tests, problems = [], [str(e)]
    out = [Resolution(test=" ".join(args) or "-", problem=p) for p in problems]
    for rel, func, op in tests:
        res = Resolution(test=f"{rel}::{func}", op=op)
        try:
            construction = find_construction(root, rel, func, op)
            if construction is None:
                res.problem = "no Benchmark construction found"
            elif construction.shapes_from != "shape file":
                res.shapes_from = construction.shapes_from
            else:
                # The construction in hand: resolve_shape_key would scan the module again.
                res.key, res.candidates_tried = shape_key_for(construction, shapes)
        except (FileNotFoundError, LookupError) as e:
            res.problem = str(e)
        out.append(res)
    return out


def shapes_by_key(resolutions: Sequence[Resolution], shapes: Mapping[str, Any]) -> Dict[str, List[Any]]:
    """The shape list under each resolved key, in first-seen order."""
    out: Dict[str, List[Any]] = {}
    for res in resolutions:
        if res.key and res.key not in out:
            entry = shapes.get(res.key)
            listed = entry.get("shapes") if isinstance(entry, Mapping) else None
            out[res.key] = list(listed) if isinstance(listed, list) else []
    return out


# ---- refusing ------------------------------------------------------------------


def refusal_before_launch(
    level: Optional[str],
    autotune_mode: str,
    replay_from: Optional[str],
    resolutions: Sequence[Resolution],
    by_key: Mapping[str, List[Any]],
) -> Optional[Refusal]:
    """Why the sweep must not be sharded, or None. Checked in order of cheapness."""
    mode = (autotune_mode or "record").strip().lower()
    if mode == "off":
        return Refusal(AUTOTUNE_OFF, {}, "ZL_AUTOTUNE_MODE=off: nothing would replay the merged configs")
    if mode == "replay" or replay_from:
        return Refusal(
            REPLAY_REQUESTED,
            {"replay_from": replay_from or "-"},
            "this run already replays REPLAY_FROM; there is nothing to sweep",
        )
    if (level or "comprehensive") == "comprehensive":
        # set_more_shapes is arbitrary per-class Python and BLAS adds transposed variants:
        # a static split cannot promise every shard's keys are covered.
        return Refusal(
            LEVEL_COMPREHENSIVE,
            {"level": level or "comprehensive"},
            "--level comprehensive adds shapes from set_more_shapes(), which a shape-file split cannot cover",
        )
    for res in resolutions:
        if res.shapes_from:
            return Refusal(
                SET_SHAPES_OVERRIDE,
                {"test": res.test, "shapes_from": res.shapes_from},
                f"{res.shapes_from} ignores the shape file ({res.test})",
            )
    for res in resolutions:
        if res.key is None:
            tried = ",".join(res.candidates_tried)
            why = res.problem or f"no shape-file key among {tried or 'no candidates'}"
            return Refusal(
                NO_SHAPE_KEY, {"test": res.test, "tried": tried or "-"}, f"no shape key for {res.test}: {why}"
            )
    if not resolutions:
        return Refusal(NO_SHAPE_KEY, {"tried": "-"}, "the selection names no test")
    for key, listed in by_key.items():
        if not listed:
            return Refusal(NO_SHAPES, {"key": key}, f"shape-file key {key} lists no shapes")
    return None


def first_failure(exit_codes: Sequence[int], logs: Sequence[Path]) -> Optional[Refusal]:
    for i, rc in enumerate(exit_codes):
        if rc != 0:
            return Refusal(
                SHARD_FAILED,
                {"shard": i, "rc": rc, "log": str(logs[i])},
                f"shard {i} exited {rc} (log {logs[i]}); the whole sweep is discarded",
            )
    return None


# ---- splitting shapes ----------------------------------------------------------


def plan_shards(by_key: Mapping[str, List[Any]], n: int) -> List[Dict[str, List[Any]]]:
    """Round-robin the shapes over at most n shards, one deal across all keys.

    The deal continues from one key to the next rather than restarting at shard 0, so
    shard sizes differ by at most one shape overall (mm's 5 BLAS + 9 transposed shapes
    split 7/7 on two shards, not 8/6: the slowest shard is the sweep's wall time).
    No more shards than the longest key has shapes. A key with fewer shapes than shards
    gives the extra shards one of its shapes again rather than none: an empty list in
    a shape file would make FlagGems measure nothing, and a duplicate costs only time.
    """
    longest = max((len(v) for v in by_key.values()), default=0)
    count = max(1, min(n, longest))
    shards: List[Dict[str, List[Any]]] = [{} for _ in range(count)]
    dealt = 0
    for key, listed in by_key.items():
        for i, shard in enumerate(shards):
            subset = [s for j, s in enumerate(listed) if (dealt + j) % count == i]
            shard[key] = subset if subset or not listed else [listed[i % len(listed)]]
        dealt += len(listed)
    return shards


def shard_shape_data(shapes: Mapping[str, Any], subsets: Mapping[str, List[Any]]) -> Dict[str, Any]:
    """The shape file with the resolved keys cut down to a shard's subset; every other
    key stays, so FlagGems' class-chain lookup still finds what it found before."""
    out = dict(shapes)
    for key, subset in subsets.items():
        entry = shapes.get(key)
        out[key] = {**(entry if isinstance(entry, Mapping) else {}), "shapes": list(subset)}
    return out


# ---- a shard's command line and environment ----------------------------------


def option_value(args: Sequence[str], name: str) -> Optional[str]:
    """The last value of ``--name V`` or ``--name=V`` in an argument list."""
    value = None
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith(name + "="):
            value = arg[len(name) + 1 :]
    return value


def without_options(args: Sequence[str], names: Sequence[str]) -> List[str]:
    out: List[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg in names:
            skip = True
            continue
        if any(arg.startswith(n + "=") for n in names):
            continue
        out.append(arg)
    return out


def shard_args(args: Sequence[str], shape_file: Path, fast_timing: bool) -> List[str]:
    """The main run's pytest arguments for a shard: same nodes, level and dtypes; its own
    shape file; the shortest timing the corpus accepts; no colour codes in its log; no
    --record/--output (the shards would write, concurrently, the run's own result file)."""
    drop = ["--shape_file", "--record", "--output"] + (list(FAST_TIMING) if fast_timing else [])
    out = [a for a in without_options(args, drop) if not a.startswith("--color")]
    if fast_timing:
        for name, value in FAST_TIMING.items():
            out += [name, value]
    return out + ["--shape_file", str(shape_file), "--color=no"]


def shard_env(
    environ: Mapping[str, str],
    shard_dir: Path,
    visible_key: Optional[str],
    device: Optional[str],
    shards: int = 1,
) -> Dict[str, str]:
    """Record mode into the shard's own dir, on its own device, and no recursion.

    Under ZL_ISOLATE_TUNER_CACHE=1 each shard also gets its own FlagGems tuner DB, inside
    the run's isolated one (dropped with it): in one shared fresh DB a shard would take
    another shard's winner as "cached" and the conflict count would miss that key.
    """
    env = benchenv.sweep_shard_env(environ, shard_dir, shards)
    if visible_key and device is not None:
        env[visible_key] = device
    isolated = environ.get("FLAGGEMS_CACHE_DIR")
    if knobs.env_value("isolate_tuner_cache", environ) and isolated:
        cache = Path(isolated) / f"warmup-{shard_dir.name}"
        env["FLAGGEMS_CACHE_DIR"] = str(cache)
        if environ.get("FLAGGEMS_DB_URL"):  # the URL wins over the dir inside FlagGems
            env["FLAGGEMS_DB_URL"] = f"sqlite:///{flaggems_db_path(cache)}"
    return env


def sqlite_dir(env: Mapping[str, str]) -> Optional[Path]:
    """The directory a sqlite FLAGGEMS_DB_URL needs to exist, if any."""
    url = env.get("FLAGGEMS_DB_URL", "")
    return Path(url[len("sqlite:///") :]).parent if url.startswith("sqlite:///") else None


# ---- merging what the shards recorded ------------------------------------------


@dataclass
class Merge:
    records: Dict[str, ar.KernelRecords]
    keys: int
    conflicts: List[Tuple[str, str]]  # (kernel, key_id) whose winners differ
    problems: List[str]

    def warning(self) -> str:
        # The count is how far to trust the run; a WARNING only when there is one to heed.
        if not self.conflicts:
            return f"parallel warmup: 0 of {self.keys} keys chose different configs on different shards"
        return (
            f"WARNING: parallel warmup: {len(self.conflicts)} of {self.keys} keys chose "
            "different configs on different shards"
        )


def merge_records(shard_records: Sequence[Mapping[str, ar.KernelRecords]]) -> Merge:
    """One record set from the shards'. A key several shards recorded keeps the lowest
    shard's config; it is a conflict when another shard chose a different launch."""
    merged: Dict[str, ar.KernelRecords] = {}
    conflicts: List[Tuple[str, str]] = []
    for records in shard_records:
        for kernel, rec in sorted(records.items()):
            into = merged.get(kernel)
            if into is None:
                into = ar.KernelRecords(
                    rec.kernel, rec.tuner, rec.tuner_class, list(rec.key_names), rec.use_flagtune
                )
                merged[kernel] = into
            for kid, entry in sorted(rec.entries.items()):
                held = into.entries.get(kid)
                if held is None:
                    into.entries[kid] = dict(entry)
                elif (
                    ar.config_id(held["config"]) != ar.config_id(entry["config"])
                    and (kernel, kid) not in conflicts
                ):
                    conflicts.append((kernel, kid))
    keys = sum(len(r.entries) for r in merged.values())
    return Merge(merged, keys, conflicts, [])


def load_and_merge(records_dirs: Sequence[Path]) -> Merge:
    loaded, problems = [], []
    for i, d in enumerate(records_dirs):
        recs, bad = ar.load_records(d) if Path(d).is_dir() else ({}, [])
        loaded.append(recs)
        problems += [f"shard {i}: {p}" for p in bad]
    merge = merge_records(loaded)
    merge.problems = problems
    return merge


def write_merged(merge: Merge, out_dir: Path) -> Path:
    for rec in merge.records.values():
        ar.write_records(out_dir, rec)
    return out_dir


def refusal_after_merge(merge: Merge) -> Optional[Refusal]:
    if merge.problems:
        return Refusal(
            RECORDS_UNREADABLE,
            {"files": len(merge.problems)},
            "unreadable shard records: " + "; ".join(merge.problems[:3]),
        )
    if merge.keys == 0:
        return Refusal(NO_RECORDS, {}, "the shards recorded no autotuned keys")
    return None

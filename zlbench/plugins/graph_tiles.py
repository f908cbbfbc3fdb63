"""Tiled graphs: a graph of many calls built from one captured tile of a few.

The graph timer unrolls a small kernel's calls into one graph until a replay lasts about
a millisecond (``timing.plan_graph``: up to 1,000 calls). A capture goes call by call
through the library's Python wrapper (FlagGems: 80-250 us a call), so a 1 us kernel
paid a capture of 800 calls at each of its placements: on an H200 sample, a fifth of
the projected corpus' graph work. A tiled graph captures ``tile`` calls once and chains
``copies`` of that capture as child-graph nodes of a new graph (the driver's
``cuGraphAddChildGraphNode``): the same kernels on the same addresses in the same order
as an unrolled capture of ``tile * copies`` calls, for the capture of one tile.

CUDA only: the driver API through ctypes (``libcuda.so.1`` comes with the driver) and
torch's ``CUDAGraph(keep_graph=True).raw_cuda_graph()``. Elsewhere, or once the driver
refuses, ``Tiling.on`` is False and the timer captures every call as before;
``Tiling.why_off`` says why (plugins/graph_timer.json).

A row's tile is the probe's calls, which follow a call's wall time in the warm-up; for a
row bound by the library's wrapper that time moves from process to process, so each
row's first tile on a device is kept on disk (``TileSizes``), and with it the calls of
its first tiled graph: every later timing of the row there builds its graphs from that
tile to that length, the same graph in every run on the host.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
from pathlib import Path
from typing import Any, Callable, Dict, NamedTuple, Optional, Tuple

from zlbench.atomic import write_json_atomic
from zlbench.timing import MIN_TILE_COPIES, TimedRow


class Tiles(NamedTuple):
    """How a timing's graphs are built: ``tile`` calls captured, chained to make up the
    plan's calls where they are a whole number (MIN_TILE_COPIES or more) of tiles."""

    tiling: "Tiling"
    tile: int

    def copies(self, calls: int) -> int:
        """Copies of the tile that make ``calls``; 0 where the calls are to be captured."""
        if not self.tiling.on or self.tile < 1 or calls % self.tile:
            return 0
        copies = calls // self.tile
        return copies if copies >= MIN_TILE_COPIES else 0


class _Driver:
    """The few driver-API entry points a tiled graph needs."""

    def __init__(self, lib: Any):
        self.lib = lib
        for name in (
            "cuGraphCreate",
            "cuGraphAddChildGraphNode",
            "cuGraphInstantiateWithFlags",
            "cuGraphLaunch",
            "cuGraphExecDestroy",
            "cuGraphDestroy",
        ):
            getattr(lib, name).restype = ctypes.c_int

    def check(self, status: int, what: str) -> None:
        if status != 0:
            raise RuntimeError(f"{what} failed with CUresult {status}")

    def chain(self, child: int, copies: int) -> int:
        """A new executable graph of ``copies`` copies of graph ``child``, one after another."""
        graph = ctypes.c_void_p()
        self.check(self.lib.cuGraphCreate(ctypes.byref(graph), ctypes.c_uint(0)), "cuGraphCreate")
        try:
            last: Optional[ctypes.c_void_p] = None
            for _ in range(copies):
                node = ctypes.c_void_p()
                deps = (ctypes.c_void_p * 1)(last) if last is not None else None
                self.check(
                    self.lib.cuGraphAddChildGraphNode(
                        ctypes.byref(node),
                        graph,
                        deps,
                        ctypes.c_size_t(0 if last is None else 1),
                        ctypes.c_void_p(child),
                    ),
                    "cuGraphAddChildGraphNode",
                )
                last = node
            executable = ctypes.c_void_p()
            self.check(
                self.lib.cuGraphInstantiateWithFlags(ctypes.byref(executable), graph, ctypes.c_ulonglong(0)),
                "cuGraphInstantiateWithFlags",
            )
            return int(executable.value)
        finally:
            self.lib.cuGraphDestroy(graph)  # the executable keeps its own copy

    def launch(self, executable: int, stream: int) -> None:
        self.check(
            self.lib.cuGraphLaunch(ctypes.c_void_p(executable), ctypes.c_void_p(stream)), "cuGraphLaunch"
        )

    def destroy(self, executable: int) -> None:
        self.lib.cuGraphExecDestroy(ctypes.c_void_p(executable))


class TiledGraph:
    """``copies`` copies of the captured ``tile`` (a torch CUDAGraph kept as a graph),
    replayed on the current stream as one graph. The tile stays referenced: its private
    pool holds the memory every copy's kernels read and write."""

    def __init__(self, torch: Any, driver: _Driver, tile: Any, copies: int):
        self.torch = torch
        self.driver = driver
        self.tile = tile
        self.copies = copies
        self.executable = driver.chain(int(tile.raw_cuda_graph()), copies)

    def replay(self) -> None:
        self.driver.launch(self.executable, int(self.torch.cuda.current_stream().cuda_stream))

    def __del__(self) -> None:
        executable, self.executable = getattr(self, "executable", None), None
        if executable is not None:
            try:
                self.driver.destroy(executable)
            except Exception:  # noqa: BLE001 - never raise under GC
                pass


class Tiling:
    """Whether this process builds tiled graphs, and how. ``on`` once the driver and
    torch offer what it needs; ``off(reason)`` for good after a failure."""

    def __init__(self, torch: Any, loader: Optional[Callable[[], Any]] = None):
        self.torch = torch
        self.driver: Optional[_Driver] = None
        self.why_off: Optional[str] = None
        self.graphs = 0  # tiled graphs built
        try:
            if not getattr(getattr(torch, "version", None), "cuda", None):
                raise RuntimeError("not a CUDA build of torch")
            graph = torch.cuda.CUDAGraph(keep_graph=True)
            if not hasattr(graph, "raw_cuda_graph"):
                raise RuntimeError("this torch's CUDAGraph does not give its cudaGraph_t")
            del graph
            self.driver = _Driver((loader or (lambda: ctypes.CDLL("libcuda.so.1")))())
        except Exception as exc:  # noqa: BLE001 - any reason leaves the plain capture
            self.off(f"{type(exc).__name__}: {exc}")

    @property
    def on(self) -> bool:
        return self.driver is not None

    def off(self, reason: str) -> None:
        self.driver = None
        self.why_off = self.why_off or reason

    def new_tile(self) -> Any:
        """A CUDAGraph to capture a tile into (kept as a graph for chaining)."""
        return self.torch.cuda.CUDAGraph(keep_graph=True)

    def chain(self, tile: Any, copies: int) -> TiledGraph:
        assert self.driver is not None
        tiled = TiledGraph(self.torch, self.driver, tile, copies)
        self.graphs += 1
        return tiled

    def report(self) -> dict:
        return {"on": self.on, "graphs": self.graphs, **({"why_off": self.why_off} if self.why_off else {})}


# --- each row's tile, kept per device --------------------------------------------------

TILE_SIZES_FORMAT = 2  # 1: tiles only; 2: each row's graph calls beside its tile
READABLE_FORMATS = (1, TILE_SIZES_FORMAT)
MAX_TILE = 100  # the probe's most calls (graph_timer.graph_bench)
MAX_KEPT_CALLS = 100_000  # far over any plan (timing.MAX_CALLS_PER_GRAPH): a sanity bound
# A kept tile this many times the probe's calls is the tile of another row (its call has
# become that much slower since): the probe's own is taken instead.
STALE_RATIO = 4


def default_tile_dir(environ: Optional[Dict[str, str]] = None) -> Path:
    """Where tiles are kept unless ZL_GRAPH_TILE_CACHE says: beside the other caches of
    the user's (``$XDG_CACHE_HOME``, else ``~/.cache``), as Triton keeps its kernels."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "zlbench" / "graph_tiles"


def _slug(text: str) -> str:
    """A file name for ``text``: cumsum_ and cumsum stay apart, no name starts with a dot."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).lstrip(".") or "_"


def _whole_tiles(calls: int, tile: int) -> bool:
    """Are ``calls`` a whole number of ``tile``-call tiles, MIN_TILE_COPIES or more?"""
    return tile >= 1 and calls % tile == 0 and calls // tile >= MIN_TILE_COPIES


class _OpSizes(NamedTuple):
    """One operator's kept sizes: key -> tile, key -> calls per tiled graph."""

    tiles: Dict[str, int]
    calls: Dict[str, int]


class TileSizes:
    """Each row's tile size and graph length, kept per device and operator under ``root``
    (``<root>/<device>/<op>.json``), so that every run on a host builds a row's graphs from
    tiles of one size to one length: the other batch of an A/A, both sides of an A/B,
    tomorrow's screen.

    Why the tile: the probe's calls follow a call's wall time in the warm-up, which for a
    row bound by the library's wrapper is host time and moves from process to process (an
    H100 A/A of the sample: 382 of 533 tiled rows took another tile in the second batch, 10
    calls against 16 say). A tile's size does not move a row by itself
    (``benchmarks/graph_tiles.py --sweep``: within 0.5% from 4 to 80 calls on an H100).

    Why the calls: a graph's length does. Each replay carries the graph's fixed launch
    cost (about 3 us), a share of every call's time that falls as the graph grows, and the
    plan's length follows the probe's per-call time, which moves from process to process
    by more than a tile: in an H100 A/A of the sample 99 of 529 rows compared were built
    to another length in the second batch (threshold 64x64: 372 calls against 564), and
    those rows moved by a median 0.18% against 0.03-0.05% for the rows built alike, each
    the way its length said (more calls, faster).

    ``tile(row, fresh)``: the kept tile of ``row``, else ``fresh`` (the probe's calls),
    kept from now on; ``calls(row, fresh, unit)`` the same for the calls of a tiled graph
    (``fresh``: the plan's) in whole tiles of ``unit``, two at least, where ``unit`` is
    the row's kept tile: a plan under two tiles keeps none, nor does a timing whose tile
    is not the kept one (that went stale, or none could be kept), and kept calls no
    whole number of the row's tile (an edited file) give way to the plan's. A row
    without a dtype or shape keeps none (its key would stand for other rows), nor does
    one whose kept tile is over ``STALE_RATIO`` times the probe's calls, or whose kept
    calls are that far from the plan's either way (its call has become that much slower
    or faster). A file that cannot be read is
    started again, one of a newer format left alone, one of format 1 (tiles only) read
    and kept on in this one; a directory that cannot be written stops the keeping of new
    sizes for the process (``why_not_written``) while kept ones are still read, and a
    lock not had in 10 s leaves that one size unkept. Never raises.
    """

    def __init__(self, root: Optional[Path], device: str):
        self.root = root
        self.device = _slug(device)
        self.why_off: Optional[str] = None if root is not None else "ZL_GRAPH_TILE_CACHE=off"
        self.why_not_written: Optional[str] = None
        self.kept = 0  # timings that took a kept tile
        self.new = 0  # timings whose tile was kept now
        self.stale = 0  # timings whose kept tile was over STALE_RATIO times the probe's
        self.calls_kept = 0  # timings whose graph took the row's kept calls
        self.calls_new = 0  # ... whose calls were kept now
        self.calls_stale = 0  # ... whose kept calls were over STALE_RATIO from the plan's
        self.calls_other_tile = 0  # ... whose kept calls were no whole number of the row's tile
        self.lock_timeouts = 0
        self.newer: Dict[str, int] = {}  # op -> the newer format its file is in
        self.restarted: Dict[str, str] = {}  # op -> why its file was started again
        self._ops: Dict[str, _OpSizes] = {}

    def path(self, op: str) -> Path:
        assert self.root is not None
        return self.root / self.device / f"{_slug(op)}.json"

    @staticmethod
    def key(row: TimedRow) -> str:
        return f"{row.side}|{row.dtype}|{row.shape}"

    def _keeps(self, row: TimedRow) -> bool:
        return self.why_off is None and bool(row.op and row.dtype and row.shape)

    def tile(self, row: TimedRow, fresh: int) -> Tuple[int, bool]:
        """(the tile to build this row's graphs from, whether it was kept from before)."""
        if not self._keeps(row):
            return fresh, False
        key = self.key(row)
        kept = self._load(row.op).tiles.get(key)
        if kept is not None:
            if kept > STALE_RATIO * fresh:
                self.stale += 1
                return fresh, False
            self.kept += 1
            return kept, True
        got, before = self._keep(row.op, key, "tiles", fresh)
        if got is not None:
            self.kept += before
            self.new += not before
            return got, before
        return fresh, False

    def calls(self, row: TimedRow, fresh: int, unit: int) -> Tuple[int, bool]:
        """(the calls of this row's tiled graph, whether they were kept from before):
        the kept ones where they are whole tiles of ``unit``, else ``fresh`` (the plan's),
        kept from now on where they are."""
        if not self._keeps(row):
            return fresh, False
        key = self.key(row)
        sizes = self._load(row.op)
        if sizes.tiles.get(key) != unit:
            # This timing's tile is not the row's kept one (it went stale, or none could
            # be kept): a length in its tiles would stand for no later timing's graph.
            return fresh, False
        kept = sizes.calls.get(key)
        if kept is None:
            if not _whole_tiles(fresh, unit):
                return fresh, False  # a plan under two tiles is captured call by call
            got, before = self._keep(row.op, key, "calls", fresh)
            if got is None or not before:
                self.calls_new += got is not None
                return fresh, False
            kept = got  # another process kept the row's calls first
        if not _whole_tiles(kept, unit):
            self.calls_other_tile += 1  # kept by other rules (an edited file)
            return fresh, False
        if kept > STALE_RATIO * fresh or fresh > STALE_RATIO * kept:
            self.calls_stale += 1
            return fresh, False
        self.calls_kept += 1
        return kept, True

    def _read(self, path: Path, op: str) -> _OpSizes:
        empty = _OpSizes({}, {})
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            return empty
        except (OSError, ValueError, RecursionError) as exc:  # RecursionError: nested too deep
            self.restarted[op] = f"{type(exc).__name__}: {exc}"[:200]
            return empty
        fmt = data.get("format") if isinstance(data, dict) else None
        if type(fmt) is int and fmt > TILE_SIZES_FORMAT:
            self.newer[op] = fmt  # a later zlbench's: read nothing, write nothing
            return empty
        readable = type(fmt) is int and fmt in READABLE_FORMATS
        tiles = data.get("tiles") if readable else None
        calls = data.get("calls", {}) if readable else None
        if not isinstance(tiles, dict) or not isinstance(calls, dict):
            self.restarted[op] = "not a tile file of this format"
            return empty
        return _OpSizes(
            {k: v for k, v in tiles.items() if type(v) is int and 1 <= v <= MAX_TILE},
            {k: v for k, v in calls.items() if type(v) is int and 1 <= v <= MAX_KEPT_CALLS},
        )

    def _load(self, op: str) -> _OpSizes:
        if op not in self._ops:
            self._ops[op] = self._read(self.path(op), op)
        return self._ops[op]

    def _keep(self, op: str, key: str, kind: str, value: int) -> Tuple[Optional[int], bool]:
        """Add one size (``kind``: "tiles" or "calls") to the op's file: read again under a
        lock (another process on the host may have kept sizes of this op since), merged,
        replaced whole. Returns (the size kept for ``key``: one another process kept first
        wins; None where none could be kept, whether it was kept before)."""
        if self.why_not_written is not None or op in self.newer:
            return None, False
        path = self.path(op)
        try:
            from filelock import FileLock, Timeout

            path.parent.mkdir(parents=True, exist_ok=True)
            with FileLock(str(path) + ".lock", timeout=10):
                sizes = self._read(path, op)
                if op in self.newer:
                    return None, False
                theirs = getattr(sizes, kind).get(key)
                if theirs is None:
                    getattr(sizes, kind)[key] = value
                    write_json_atomic(
                        path,
                        {
                            "format": TILE_SIZES_FORMAT,
                            "device": self.device,
                            "tiles": sizes.tiles,
                            "calls": sizes.calls,
                        },
                    )
            self._ops[op] = sizes
        except Timeout:
            self.lock_timeouts += 1
            return None, False
        except Exception as exc:  # noqa: BLE001 - an unwritable cache costs only the keeping
            self.why_not_written = (
                f"cannot keep tiles or graph lengths in {path.parent}: {type(exc).__name__}: {exc}"[:300]
            )
            return None, False
        if theirs is not None:
            return theirs, True
        return value, False

    def report(self) -> dict:
        out: dict = {
            "dir": None if self.root is None else str(self.root / self.device),
            "timings_kept_tile": self.kept,
            "tiles_kept_now": self.new,
            "timings_kept_calls": self.calls_kept,
            "calls_kept_now": self.calls_new,
        }
        if self.why_off:
            out["why_off"] = self.why_off
        if self.why_not_written:
            out["why_not_written"] = self.why_not_written
        for name, value in (
            ("stale", self.stale),
            ("calls_stale", self.calls_stale),
            ("calls_other_tile", self.calls_other_tile),
            ("lock_timeouts", self.lock_timeouts),
        ):
            if value:
                out[name] = value
        if self.newer:
            out["newer_format_left_alone"] = dict(self.newer)
        if self.restarted:
            out["files_started_again"] = dict(self.restarted)
        return out

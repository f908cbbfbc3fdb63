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
row's first tile on a device is kept on disk (``TileSizes``) and every later timing of
the row there builds its graphs from it: the same graph in every run on the host.
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

TILE_SIZES_FORMAT = 1
MAX_TILE = 100  # the probe's most calls (graph_timer.graph_bench)
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


class TileSizes:
    """Each row's tile size, kept per device and operator under ``root``
    (``<root>/<device>/<op>.json``), so that every run on a host builds a row's graphs from
    tiles of one size: the other batch of an A/A, both sides of an A/B, tomorrow's screen.

    Why: the probe's calls (the tile) follow a call's wall time in the warm-up, which for
    a row bound by the library's wrapper is host time and moves from process to process
    (an H100 A/A of the sample: 382 of 533 tiled rows took another tile in the second
    batch, 10 calls against 16 say). Keeping it takes the graph's build out of what
    differs between two runs. It does not steady a row by itself: a tile's size did not
    move a row (``benchmarks/graph_tiles.py --sweep``: within 0.5% from 4 to 80 calls on
    an H100), and FlagGems' cumsum_ float32 1024x1024 read 5.49-5.73 us over five batches
    with the same kept tile.

    ``tile(row, fresh)``: the kept tile of ``row``, else ``fresh`` (the probe's calls),
    kept from now on. A row without a dtype or shape keeps none (its key would stand for
    other rows), nor does one whose kept tile is over ``STALE_RATIO`` times the probe's
    calls. A file that cannot be read is started again, one of a newer format left
    alone; a directory that cannot be written stops the keeping of new tiles for the
    process (``why_not_written``) while kept ones are still read, and a lock not had in
    10 s leaves that one tile unkept. Never raises.
    """

    def __init__(self, root: Optional[Path], device: str):
        self.root = root
        self.device = _slug(device)
        self.why_off: Optional[str] = None if root is not None else "ZL_GRAPH_TILE_CACHE=off"
        self.why_not_written: Optional[str] = None
        self.kept = 0  # timings that took a kept tile
        self.new = 0  # timings whose tile was kept now
        self.stale = 0  # timings whose kept tile was over STALE_RATIO times the probe's
        self.lock_timeouts = 0
        self.newer: Dict[str, int] = {}  # op -> the newer format its file is in
        self.restarted: Dict[str, str] = {}  # op -> why its file was started again
        self._ops: Dict[str, Dict[str, int]] = {}

    def path(self, op: str) -> Path:
        assert self.root is not None
        return self.root / self.device / f"{_slug(op)}.json"

    @staticmethod
    def key(row: TimedRow) -> str:
        return f"{row.side}|{row.dtype}|{row.shape}"

    def tile(self, row: TimedRow, fresh: int) -> Tuple[int, bool]:
        """(the tile to build this row's graphs from, whether it was kept from before)."""
        if self.why_off is not None or not row.op or not row.dtype or not row.shape:
            return fresh, False
        tiles = self._load(row.op)
        key = self.key(row)
        kept = tiles.get(key)
        if kept is not None:
            if kept > STALE_RATIO * fresh:
                self.stale += 1
                return fresh, False
            self.kept += 1
            return kept, True
        if self.why_not_written is not None or row.op in self.newer:
            return fresh, False
        return self._save(row.op, key, fresh)

    def _read(self, path: Path, op: str) -> Dict[str, int]:
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            self.restarted[op] = f"{type(exc).__name__}: {exc}"[:200]
            return {}
        fmt = data.get("format") if isinstance(data, dict) else None
        if type(fmt) is int and fmt > TILE_SIZES_FORMAT:
            self.newer[op] = fmt  # a later zlbench's: read nothing, write nothing
            return {}
        tiles = data.get("tiles") if fmt == TILE_SIZES_FORMAT else None
        if not isinstance(tiles, dict):
            self.restarted[op] = "not a tile file of this format"
            return {}
        return {k: v for k, v in tiles.items() if type(v) is int and 1 <= v <= MAX_TILE}

    def _load(self, op: str) -> Dict[str, int]:
        if op not in self._ops:
            self._ops[op] = self._read(self.path(op), op)
        return self._ops[op]

    def _save(self, op: str, key: str, tile: int) -> Tuple[int, bool]:
        """Add one tile to the op's file: read again under a lock (another process on
        the host may have kept tiles of this op since), merged, replaced whole. Returns
        the tile kept for ``key`` (one another process kept first wins, and is then a
        kept tile) and whether it was kept before."""
        path = self.path(op)
        try:
            from filelock import FileLock, Timeout

            path.parent.mkdir(parents=True, exist_ok=True)
            with FileLock(str(path) + ".lock", timeout=10):
                tiles = self._read(path, op)
                if op in self.newer:
                    return tile, False
                theirs = tiles.get(key)
                if theirs is None:
                    tiles[key] = tile
                    write_json_atomic(
                        path, {"format": TILE_SIZES_FORMAT, "device": self.device, "tiles": tiles}
                    )
            self._ops[op] = tiles
        except Timeout:
            self.lock_timeouts += 1
            return tile, False
        except Exception as exc:  # noqa: BLE001 - an unwritable cache costs only the keeping
            self.why_not_written = f"cannot keep tiles in {path.parent}: {type(exc).__name__}: {exc}"[:300]
            return tile, False
        if theirs is not None:
            self.kept += 1
            return theirs, True
        self.new += 1
        return tile, False

    def report(self) -> dict:
        out: dict = {
            "dir": None if self.root is None else str(self.root / self.device),
            "timings_kept_tile": self.kept,
            "tiles_kept_now": self.new,
        }
        if self.why_off:
            out["why_off"] = self.why_off
        if self.why_not_written:
            out["why_not_written"] = self.why_not_written
        for name, value in (("stale", self.stale), ("lock_timeouts", self.lock_timeouts)):
            if value:
                out[name] = value
        if self.newer:
            out["newer_format_left_alone"] = dict(self.newer)
        if self.restarted:
            out["files_started_again"] = dict(self.restarted)
        return out

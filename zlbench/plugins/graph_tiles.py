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
"""

from __future__ import annotations

import ctypes
from typing import Any, Callable, NamedTuple, Optional

from zlbench.timing import MIN_TILE_COPIES


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

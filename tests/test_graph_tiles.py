"""Tiled graphs (zlbench.plugins.graph_tiles): the plan in whole tiles, the capture of one
tile chained, and the fall back to capturing every call. The driver and torch are small
fakes here; tests/test_plugin_graph_timer_gpu.py runs the real ones."""

import contextlib
import ctypes
import types

import pytest

from zlbench import timing
from zlbench.plugins import graph_tiles, graph_timer
from zlbench.plugins.graph_tiles import Tiles, Tiling


def test_a_plan_takes_the_nearest_whole_number_of_tiles():
    # A 1.2 us kernel: 833 calls a millisecond, in tiles of the probe's 100 calls.
    plan = timing.plan_graph(0.0012, 100)
    tiled = timing.tiled_plan(plan, 0.0012, 100, 100)
    assert plan.calls_per_graph == 833 and tiled.calls_per_graph == 800
    assert tiled.replays == round(100 / (800 * 0.0012))  # the rep budget, sized again
    assert timing.tiled_plan(timing.GraphPlan(860, 97), 0.0012, 100, 100).calls_per_graph == 900
    # Fewer than two tiles: the plan as it was (its calls captured).
    assert timing.tiled_plan(timing.GraphPlan(140, 100), 0.007, 100, 100) == timing.GraphPlan(140, 100)
    assert timing.tiled_plan(timing.GraphPlan(1, 5), 2.0, 100, 1) == timing.GraphPlan(1, 5)
    assert timing.tiled_plan(timing.GraphPlan(300, 5), 0.003, 100, 0) == timing.GraphPlan(300, 5)


class _FakeTiling:
    def __init__(self, fail: bool = False):
        self.on = True
        self.fail = fail
        self.chained = []
        self.why_off = None

    def off(self, reason):
        self.on = False
        self.why_off = reason

    def new_tile(self):
        return _Graph(kept=True)

    def chain(self, tile, copies):
        if self.fail:
            raise RuntimeError("CUresult 801")
        self.chained.append((tile, copies))
        return ("tiled", tile, copies)


class _Graph:
    def __init__(self, kept=False):
        self.kept = kept

    def capture_begin(self):
        pass

    def capture_end(self):
        pass


def _torch():
    cuda = types.SimpleNamespace(
        CUDAGraph=lambda: _Graph(),
        stream=lambda s: contextlib.nullcontext(),
        mem_get_info=lambda: (10, 10),
        synchronize=lambda: None,
    )
    return types.SimpleNamespace(cuda=cuda)


@pytest.fixture
def no_rng(monkeypatch):
    monkeypatch.setattr(graph_timer, "throwaway_rng", lambda torch: contextlib.nullcontext())


def test_tiles_stand_for_calls_only_in_whole_numbers_of_two_or_more():
    tiling = _FakeTiling()
    tiles = Tiles(tiling, 100)
    assert tiles.copies(800) == 8 and tiles.copies(100) == 0 and tiles.copies(850) == 0
    tiling.off("gone")
    assert tiles.copies(800) == 0


def test_a_plan_of_whole_tiles_captures_one_tile_and_chains_it(no_rng):
    calls, moves = [], []
    tiling = _FakeTiling()
    graph = graph_timer.capture(
        _torch(), lambda: calls.append(1), 800, None, None, lambda i, n: moves.append((i, n)), Tiles(tiling, 100)
    )
    assert len(calls) == 100  # one tile captured, not 800 calls
    assert graph[0] == "tiled" and graph[2] == 8 and graph[1].kept
    assert moves[0] == (0, 100) and moves[-1] == (99, 100)  # a placement's segments within the tile


def test_a_driver_that_refuses_turns_tiling_off_and_every_call_is_captured(no_rng):
    calls = []
    tiling = _FakeTiling(fail=True)
    graph = graph_timer.capture(_torch(), lambda: calls.append(1), 800, None, None, tiles=Tiles(tiling, 100))
    assert len(calls) == 100 + 800 and isinstance(graph, _Graph)
    assert not tiling.on and "CUresult 801" in tiling.why_off
    calls.clear()
    graph_timer.capture(_torch(), lambda: calls.append(1), 800, None, None, tiles=Tiles(tiling, 100))
    assert len(calls) == 800 and not tiling.chained  # no second try


def test_a_plan_not_in_whole_tiles_captures_every_call(no_rng):
    calls = []
    tiling = _FakeTiling()
    graph = graph_timer.capture(_torch(), lambda: calls.append(1), 140, None, None, tiles=Tiles(tiling, 100))
    assert len(calls) == 140 and graph.kept and not tiling.chained  # kept: it may be a later tile
    calls.clear()
    graph = graph_timer.capture(_torch(), lambda: calls.append(1), 140, None, None)
    assert len(calls) == 140 and not graph.kept


def test_tiling_is_off_with_its_reason_where_torch_or_the_driver_lacks_it():
    rocm = types.SimpleNamespace(version=types.SimpleNamespace(cuda=None, hip="6.2"))
    assert not Tiling(rocm).on and "not a CUDA build" in Tiling(rocm).why_off

    class OldGraph:
        def __init__(self, keep_graph=False):
            pass

    old = types.SimpleNamespace(
        version=types.SimpleNamespace(cuda="12.4"), cuda=types.SimpleNamespace(CUDAGraph=OldGraph)
    )
    assert "cudaGraph_t" in Tiling(old).why_off

    class Graph(OldGraph):
        def raw_cuda_graph(self):
            return 0

    new = types.SimpleNamespace(version=types.SimpleNamespace(cuda="13.0"), cuda=types.SimpleNamespace(CUDAGraph=Graph))

    def no_driver():
        raise OSError("libcuda.so.1: cannot open shared object file")

    tiling = Tiling(new, loader=no_driver)
    assert not tiling.on and "libcuda.so.1" in tiling.why_off
    assert tiling.report() == {"on": False, "graphs": 0, "why_off": tiling.why_off}


class _FakeDriver:
    """libcuda's graph calls, writing handles through their out-pointers as ctypes passes them."""

    def __init__(self, fail_at=None):
        self.log = []
        self.fail_at = fail_at
        self.next = 0x100

        def entry(name, body):
            def call(*args):
                self.log.append((name, args))
                if name == self.fail_at:
                    return 999
                return body(*args) or 0

            call.restype = None
            setattr(self, name, call)

        def out(ref):
            self.next += 1
            ref._obj.value = self.next

        entry("cuGraphCreate", lambda ref, flags: out(ref))
        entry("cuGraphAddChildGraphNode", lambda ref, graph, deps, n, child: out(ref))
        entry("cuGraphInstantiateWithFlags", lambda ref, graph, flags: out(ref))
        entry("cuGraphLaunch", lambda exe, stream: None)
        entry("cuGraphExecDestroy", lambda exe: None)
        entry("cuGraphDestroy", lambda graph: None)


def test_the_driver_chains_copies_one_after_another_and_frees_the_graph_it_built():
    lib = _FakeDriver()
    executable = graph_tiles._Driver(lib).chain(0xC0DE, 3)
    nodes = [args for name, args in lib.log if name == "cuGraphAddChildGraphNode"]
    assert len(nodes) == 3 and all(args[4].value == 0xC0DE for args in nodes)
    assert nodes[0][2] is None and nodes[0][3].value == 0  # the first copy waits on nothing
    made = [args[0]._obj.value for args in nodes]
    for (_, _, deps, n, _), before in zip(nodes[1:], made):
        assert n.value == 1 and deps[0] == before  # each copy after the one before
    graph = [args[0]._obj.value for name, args in lib.log if name == "cuGraphCreate"][0]
    assert [args[0].value for name, args in lib.log if name == "cuGraphDestroy"] == [graph]
    assert executable == [args[0]._obj.value for name, args in lib.log if name == "cuGraphInstantiateWithFlags"][0]


def test_a_refused_chain_says_which_call_and_still_frees_the_graph():
    lib = _FakeDriver(fail_at="cuGraphInstantiateWithFlags")
    with pytest.raises(RuntimeError, match="cuGraphInstantiateWithFlags failed with CUresult 999"):
        graph_tiles._Driver(lib).chain(0xC0DE, 2)
    assert [name for name, _ in lib.log][-1] == "cuGraphDestroy"


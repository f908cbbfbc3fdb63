"""Tiled graphs (zlbench.plugins.graph_tiles): the plan in whole tiles, the capture of one
tile chained, and the fall back to capturing every call. The driver and torch are small
fakes here; tests/test_plugin_graph_timer_gpu.py runs the real ones."""

import contextlib
import json
import os
import types
from pathlib import Path

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
        _torch(),
        lambda: calls.append(1),
        800,
        None,
        None,
        lambda i, n: moves.append((i, n)),
        Tiles(tiling, 100),
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

    new = types.SimpleNamespace(
        version=types.SimpleNamespace(cuda="13.0"), cuda=types.SimpleNamespace(CUDAGraph=Graph)
    )

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
    assert (
        executable
        == [args[0]._obj.value for name, args in lib.log if name == "cuGraphInstantiateWithFlags"][0]
    )


def test_a_refused_chain_says_which_call_and_still_frees_the_graph():
    lib = _FakeDriver(fail_at="cuGraphInstantiateWithFlags")
    with pytest.raises(RuntimeError, match="cuGraphInstantiateWithFlags failed with CUresult 999"):
        graph_tiles._Driver(lib).chain(0xC0DE, 2)
    assert [name for name, _ in lib.log][-1] == "cuGraphDestroy"


# --- each row's tile, kept per device (graph_tiles.TileSizes) ---------------------------


def _row(shape="[torch.Size([1024, 1024]), 1]", side="gems", op="cumsum_"):
    return timing.TimedRow(op, "torch.float32", shape, side)


def test_a_rows_first_tile_is_kept_and_a_later_process_builds_from_it(tmp_path):
    first = graph_tiles.TileSizes(tmp_path, "NVIDIA H100 80GB HBM3")
    assert first.tile(_row(), 5) == (5, False)
    assert first.tile(_row(side="torch"), 12) == (12, False)
    # The next batch's process: its probe took 4 calls, the row is built from 5 as before.
    later = graph_tiles.TileSizes(tmp_path, "NVIDIA H100 80GB HBM3")
    assert later.tile(_row(), 4) == (5, True)
    assert later.tile(_row(side="torch"), 16) == (12, True)
    assert later.tile(_row(shape="[torch.Size([64, 64]), 1]"), 9) == (9, False)  # a row not seen yet
    assert later.report()["timings_kept_tile"] == 2 and later.report()["tiles_kept_now"] == 1
    data = json.loads((tmp_path / "NVIDIA_H100_80GB_HBM3" / "cumsum_.json").read_text())
    assert data["format"] == graph_tiles.TILE_SIZES_FORMAT and len(data["tiles"]) == 3
    # Another device keeps its own.
    assert graph_tiles.TileSizes(tmp_path, "NVIDIA H200").tile(_row(), 4) == (4, False)


def test_a_tile_another_process_kept_first_wins(tmp_path):
    mine = graph_tiles.TileSizes(tmp_path, "gpu")
    assert mine.tile(_row(shape="other"), 3) == (3, False)  # this op's file loaded and written
    graph_tiles.TileSizes(tmp_path, "gpu").tile(_row(), 7)  # another process, meanwhile
    assert mine.tile(_row(), 5) == (7, True)
    assert mine.report()["tiles_kept_now"] == 1  # only "other": the row's was theirs
    assert graph_tiles.TileSizes(tmp_path, "gpu").tile(_row(shape="other"), 9) == (3, True)  # nothing lost


@pytest.mark.parametrize(
    "text",
    [
        "{not json",
        '{"format": "1", "tiles": {}}',
        '{"format": 1, "tiles": {"gems|torch.float32|x": 0}}',
        '{"format": 1, "tiles": {"gems|torch.float32|x": true}}',
    ],
)
def test_an_unreadable_tile_file_is_started_again_and_says_so(tmp_path, text):
    path = tmp_path / "gpu" / "cumsum_.json"
    path.parent.mkdir()
    path.write_text(text)
    sizes = graph_tiles.TileSizes(tmp_path, "gpu")
    assert sizes.tile(_row(shape="x"), 6) == (6, False)  # a tile of 0 calls is no tile
    assert json.loads(path.read_text())["tiles"] == {"gems|torch.float32|x": 6}
    if text.startswith("{not") or '"1"' in text:
        assert "cumsum_" in sizes.report()["files_started_again"]


def test_a_tile_file_of_a_newer_format_is_left_alone(tmp_path):
    path = tmp_path / "gpu" / "cumsum_.json"
    path.parent.mkdir()
    text = '{"format": 99, "tiles": {"whatever": {"calls": 5}}}'
    path.write_text(text)
    sizes = graph_tiles.TileSizes(tmp_path, "gpu")
    assert sizes.tile(_row(), 6) == (6, False)
    assert path.read_text() == text and sizes.report()["newer_format_left_alone"] == {"cumsum_": 99}


def test_a_cache_that_cannot_be_written_leaves_every_tile_the_probes(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    sizes = graph_tiles.TileSizes(blocker / "tiles", "gpu")  # its parent is a file
    assert sizes.tile(_row(), 5) == (5, False)
    assert sizes.tile(_row(), 4) == (4, False)  # off for the process: no second try
    assert "cannot keep tiles" in sizes.report()["why_not_written"]
    off = graph_tiles.TileSizes(None, "gpu")
    assert off.tile(_row(), 5) == (5, False) and off.report()["why_off"] == "ZL_GRAPH_TILE_CACHE=off"
    assert graph_tiles.TileSizes(tmp_path, "gpu").tile(timing.TimedRow(None, None, None, "gems"), 5) == (
        5,
        False,
    )


def test_an_unwritable_cache_still_serves_the_tiles_it_holds(tmp_path, monkeypatch):
    graph_tiles.TileSizes(tmp_path, "gpu").tile(_row(), 7)
    graph_tiles.TileSizes(tmp_path, "gpu").tile(_row(op="abs"), 9)
    sizes = graph_tiles.TileSizes(tmp_path, "gpu")

    def refuse(*_a, **_k):
        raise PermissionError("read-only file system")

    monkeypatch.setattr(graph_tiles, "write_json_atomic", refuse)
    assert sizes.tile(_row(shape="new"), 5) == (5, False)  # cannot be kept ...
    assert sizes.tile(_row(), 4) == (7, True) and sizes.tile(_row(op="abs"), 4) == (
        9,
        True,
    )  # ... kept ones read
    assert "read-only" in sizes.report()["why_not_written"]


def test_rows_without_a_key_of_their_own_or_with_a_stale_tile_take_the_probes(tmp_path):
    sizes = graph_tiles.TileSizes(tmp_path, "gpu")
    # No shape recorded: its key would stand for every such row of the operator.
    assert sizes.tile(timing.TimedRow("cumsum_", "torch.float32", None, "gems"), 5) == (5, False)
    assert not (tmp_path / "gpu" / "cumsum_.json").exists()
    assert sizes.tile(_row(), 40) == (40, False)
    later = graph_tiles.TileSizes(tmp_path, "gpu")
    assert later.tile(_row(), 12) == (40, True)  # a few times the probe's: the row's own tile
    assert later.tile(_row(), 9) == (9, False)  # over STALE_RATIO times: its call got slower
    assert later.report()["stale"] == 1


def test_the_tile_cache_knob_takes_a_dir_or_off_and_defaults_beside_the_users_caches(tmp_path):
    from zlbench import knobs

    assert knobs.env_value("graph_tile_cache", {}) is None
    assert knobs.env_value("graph_tile_cache", {"ZL_GRAPH_TILE_CACHE": "off"}) == "off"
    assert knobs.env_value("graph_tile_cache", {"ZL_GRAPH_TILE_CACHE": "0"}) == "off"
    assert knobs.env_value("graph_tile_cache", {"ZL_GRAPH_TILE_CACHE": str(tmp_path)}) == str(tmp_path)
    # Absolute where it is read: the benchmark process' cwd is the corpus root.
    assert knobs.env_value("graph_tile_cache", {"ZL_GRAPH_TILE_CACHE": "tiles"}) == os.path.abspath("tiles")
    assert (
        graph_tiles.default_tile_dir({"XDG_CACHE_HOME": str(tmp_path)})
        == tmp_path / "zlbench" / "graph_tiles"
    )


def test_a_parallel_warmup_shard_keeps_no_tile():
    # Its timings are a sweep's (1 ms warm-up on a host busy compiling): the run's own
    # timings set the tiles.
    from zlbench import benchenv, knobs

    env = benchenv.sweep_shard_env({"ZL_GRAPH_TILE_CACHE": "/cache"}, Path("/tmp/shard"), 4)
    assert knobs.env_value("graph_tile_cache", env) == "off"


def test_an_interleaved_graphs_tile_holds_a_segment_at_each_of_its_placements(no_rng):
    # FlagGems' 1 us kernels: the probe's 7 calls. Eight placements in two graphs of
    # four: the fewest tiles of 7 holding 8 calls at each of four is 35 calls.
    tiling = _FakeTiling()
    tiles = graph_timer.interleaved_tiles(Tiles(tiling, 7), 8)
    assert tiles.tile == 35
    assert graph_timer.interleaved_tiles(Tiles(tiling, 40), 8).tile == 40  # already long enough
    assert graph_timer.interleaved_tiles(Tiles(tiling, 5), 3).tile == 20  # sets [0, 2] and [1]
    plan = timing.tiled_plan(timing.GraphPlan(581, 90), 0.0012, 100, tiles.tile)
    assert plan.calls_per_graph == 595  # 17 tiles
    calls, moves = [], []
    sets = graph_timer.interleaved_sets(8)[0]
    graph = graph_timer.capture(
        _torch(),
        lambda: calls.append(1),
        plan.calls_per_graph,
        None,
        None,
        lambda i, n: moves.append(sets[i * len(sets) // n]),
        tiles,
    )
    assert len(calls) == 35 and graph[2] == 17  # one tile captured, not 595 calls
    segments = [moves.count(p) for p in sets]
    assert sorted(set(moves)) == sets and min(segments) >= graph_timer.MIN_SEGMENT


_KEY = "gems|torch.float32|[torch.Size([1024, 1024]), 1]"


def _keeping(root, probe_calls):
    """A process's TileSizes after its timing of _row() took its tile, as graph_bench does."""
    sizes = graph_tiles.TileSizes(root, "gpu")
    sizes.tile(_row(), probe_calls)
    return sizes


def test_a_rows_graph_length_is_kept_and_a_later_process_builds_to_it(tmp_path):
    first = _keeping(tmp_path, 7)
    assert first.calls(_row(), 595, 7) == (595, False)
    # The next batch: its probe read the call 30% slower and planned 420 calls (60 tiles).
    later = _keeping(tmp_path, 9)
    assert later.calls(_row(), 420, 7) == (595, True)
    assert later.report()["timings_kept_calls"] == 1 and first.report()["calls_kept_now"] == 1
    data = json.loads((tmp_path / "gpu" / "cumsum_.json").read_text())
    assert data["format"] == 2 and data["calls"] == {_KEY: 595} and data["tiles"] == {_KEY: 7}


def test_a_timing_whose_tile_is_not_the_rows_kept_one_keeps_no_length(tmp_path):
    # The kept tile of 7 is over 4 times this probe's 1 call (the call got that much
    # slower): the timing builds from 1-call tiles, and a length in those would stand
    # for no later timing's graph, whose tile is the kept 7 again.
    _keeping(tmp_path / "a", 7)
    stale = graph_tiles.TileSizes(tmp_path / "a", "gpu")
    assert stale.tile(_row(), 1) == (1, False)
    assert stale.calls(_row(), 60, 1) == (60, False)
    assert json.loads((tmp_path / "a" / "gpu" / "cumsum_.json").read_text())["calls"] == {}
    # Nor where no tile could be kept (the directory is unwritable).
    blocked = tmp_path / "b"
    blocked.write_text("a file where the directory would be")
    sizes = graph_tiles.TileSizes(blocked, "gpu")
    assert sizes.tile(_row(), 7) == (7, False) and sizes.calls(_row(), 70, 7) == (70, False)
    assert sizes.report()["calls_kept_now"] == 0


def test_kept_calls_that_are_stale_or_no_whole_number_of_the_rows_tile_give_way_to_the_plans(tmp_path):
    _keeping(tmp_path, 8).calls(_row(), 600, 8)
    sizes = _keeping(tmp_path, 8)
    assert sizes.calls(_row(), 140, 8) == (140, False)  # over 4 times the plan's: its call got slower
    assert sizes.calls(_row(), 2600, 8) == (2600, False)  # ... or faster
    assert sizes.calls(_row(), 500, 8) == (600, True)
    assert sizes.report()["calls_stale"] == 2
    # What was kept stays: the row's length is its first one's.
    assert _keeping(tmp_path, 8).calls(_row(), 800, 8) == (600, True)
    # A kept length no whole number of the row's tile (the file edited, or kept by a
    # zlbench of other rules) gives way too, counted apart.
    path = tmp_path / "gpu" / "cumsum_.json"
    data = json.loads(path.read_text())
    data["calls"][_KEY] = 598
    path.write_text(json.dumps(data))
    sizes = _keeping(tmp_path, 8)
    assert sizes.calls(_row(), 500, 8) == (500, False)
    assert (sizes.report()["calls_other_tile"], sizes.report().get("calls_stale")) == (1, None)


def test_a_plan_under_two_tiles_keeps_no_graph_length(tmp_path):
    # 9 calls of a 7-call tile: the graph is captured call by call, so no length in
    # whole tiles stands for it, and a later plan that tiles keeps its own.
    sizes = _keeping(tmp_path, 7)
    assert sizes.calls(_row(), 9, 7) == (9, False)
    assert sizes.report()["calls_kept_now"] == 0
    assert json.loads((tmp_path / "gpu" / "cumsum_.json").read_text())["calls"] == {}
    assert sizes.calls(_row(), 70, 7) == (70, False)
    assert _keeping(tmp_path, 7).calls(_row(), 63, 7) == (70, True)


def test_a_tile_file_nested_too_deep_is_started_again(tmp_path):
    path = tmp_path / "gpu" / "cumsum_.json"
    path.parent.mkdir()
    path.write_text("[" * 200_000)
    sizes = graph_tiles.TileSizes(tmp_path, "gpu")
    assert sizes.tile(_row(), 7) == (7, False)
    assert "RecursionError" in sizes.report()["files_started_again"]["cumsum_"]


def test_calls_another_process_kept_first_win_and_rows_without_a_key_keep_none(tmp_path):
    mine = graph_tiles.TileSizes(tmp_path, "gpu")
    assert mine.tile(_row(), 7) == (7, False)  # this op's file loaded
    graph_tiles.TileSizes(tmp_path, "gpu").calls(_row(), 560, 7)  # another process, meanwhile
    assert mine.calls(_row(), 581, 7) == (560, True)
    assert mine.report()["calls_kept_now"] == 0
    no_shape = timing.TimedRow("cumsum_", "torch.float32", None, "gems")
    assert mine.calls(no_shape, 581, 7) == (581, False)
    assert graph_tiles.TileSizes(None, "gpu").calls(_row(), 581, 7) == (581, False)


def test_a_tile_file_of_format_1_is_read_and_kept_on_in_format_2(tmp_path):
    # Written by zlbench before graph lengths were kept: its tiles still count.
    path = tmp_path / "gpu" / "cumsum_.json"
    path.parent.mkdir()
    key = "gems|torch.float32|[torch.Size([1024, 1024]), 1]"
    path.write_text(json.dumps({"format": 1, "device": "gpu", "tiles": {key: 7}}))
    sizes = graph_tiles.TileSizes(tmp_path, "gpu")
    assert sizes.tile(_row(), 9) == (7, True)
    assert sizes.calls(_row(), 581, 7) == (581, False)
    data = json.loads(path.read_text())
    assert data == {"format": 2, "device": "gpu", "tiles": {key: 7}, "calls": {key: 581}}
    assert "files_started_again" not in sizes.report()

"""Input placements for the graph timer (zlbench.plugins.placement), on CPU tensors:
which inputs are found and may move, and that moving and restoring keep the values and
the caller's tensor objects. The capture over placements is tested on the GPU
(tests/test_plugin_graph_timer_gpu.py)."""

import functools

import pytest

torch = pytest.importorskip("torch")

from zlbench.plugins.placement import (  # noqa: E402
    MEMORY_SHARE,
    Placements,
    closure_tensors,
    movable_inputs,
    placement_count,
)
from zlbench.timing import replays_per_placement  # noqa: E402


def anywhere(_t):
    return True


def test_the_inputs_of_a_flaggems_style_lambda_are_found_once_each():
    x, w, b = torch.randn(8, 4), torch.randn(4), torch.randn(4)
    args, kwargs = (x, [4], w), {"bias": b, "eps": 1e-5}

    def op(*a, **k):
        return None

    fn = lambda: op(*args, **kwargs)  # noqa: E731 - the shape of FlagGems' get_latency
    found = closure_tensors(fn, torch.is_tensor)
    assert [t is x for t in found].count(True) == 1
    assert {id(t) for t in found} == {id(x), id(w), id(b)}


def test_partials_and_nested_closures_are_followed_and_repeats_counted_once():
    x, y = torch.randn(3), torch.randn(3)
    inner = functools.partial(torch.add, x, y)
    fn = lambda: (inner(), x)  # noqa: E731
    found = closure_tensors(fn, torch.is_tensor)
    assert len(found) == 2 and {id(t) for t in found} == {id(x), id(y)}
    assert closure_tensors(lambda: 1, torch.is_tensor) == []


def test_only_tensors_that_own_their_storage_alone_may_move():
    own = torch.randn(16)
    base = torch.randn(4, 8)
    view = base[1]
    shared_a = torch.randn(10)
    shared_b = shared_a.view(2, 5)
    transposed = torch.randn(4, 6).t()
    movable, why = movable_inputs([own, view, shared_a, shared_b, transposed], anywhere)
    assert why is None and len(movable) == 1 and movable[0] is own
    none, why = movable_inputs([view, transposed], anywhere)
    assert none == [] and "storage" in why
    assert movable_inputs([], anywhere) == ([], "no tensor input found")


def test_nothing_moves_when_an_input_takes_part_in_autograd():
    leaf = torch.randn(8, requires_grad=True)
    out = leaf * 2
    for inputs in ([torch.randn(8), leaf], [out.detach(), out]):
        movable, why = movable_inputs(inputs, anywhere)
        assert movable == [] and why == "an input takes part in autograd"


def test_a_tensor_whose_storage_is_also_used_outside_the_inputs_stays_put():
    use_count = torch._C._storage_Use_Count
    users = lambda t: use_count(t.untyped_storage()._cdata)  # noqa: E731
    alone, seen_elsewhere = torch.randn(8), torch.randn(8)
    kept_view = seen_elsewhere[2:]  # held by someone the closure walk never sees
    movable, why = movable_inputs([alone, seen_elsewhere], anywhere, users)
    assert movable == [alone] and why is None and kept_view.numel() == 6


def test_an_odd_object_in_the_closure_means_one_placement_not_an_error():
    class Odd:
        def __getattr__(self, name):
            raise RuntimeError("no")

        def __call__(self):
            return None

    class Torchish:
        _C = torch._C

        @staticmethod
        def is_tensor(obj):
            raise RuntimeError("cannot tell")

    odd = Odd()
    plan = Placements.plan(Torchish, lambda: odd(), 4)
    assert plan.count == 1 and plan.why_fewer == "finding the inputs failed: RuntimeError"


def test_limit_keeps_the_smaller_count_and_says_why():
    places = Placements([torch.randn(4)], 8)
    places.limit(12, "plenty")
    assert places.count == 8 and places.why_fewer is None
    places.limit(3, "the replay budget")
    assert places.count == 3 and places.why_fewer == "the replay budget"


def test_tensors_off_the_device_stay_put():
    host = torch.randn(8)
    assert movable_inputs([host], lambda t: False) == ([], "no movable input on the device")


def test_moving_gives_new_storage_with_the_same_values_and_restore_puts_it_back():
    x = torch.arange(64, dtype=torch.float32)
    ptr = x.data_ptr()
    fn = lambda: x.data_ptr()  # noqa: E731 - what a captured graph would bake in
    places = Placements([x], 3)
    seen = set()
    for index in (1, 2, 1):
        places.move(index)
        seen.add(fn())
        assert torch.equal(x, torch.arange(64, dtype=torch.float32))
    assert len(seen) == 2 and ptr not in seen  # each placement has addresses of its own
    places.restore()
    assert x.data_ptr() == ptr and places.copies == []
    places.move(0)
    assert x.data_ptr() == ptr


def test_a_plan_on_host_tensors_keeps_one_placement_and_says_why():
    x = torch.randn(8)
    plan = Placements.plan(torch, lambda: x + 1, 4)
    assert plan.count == 1 and plan.why_fewer == "no movable input on the device"
    one = Placements.plan(torch, lambda: x + 1, 1)
    assert one.count == 1 and one.why_fewer is None


def test_placements_fit_the_free_memory_share():
    assert placement_count(4, 1000, None) == 4
    assert placement_count(1, 1000, 10**9) == 1
    assert placement_count(4, 0, 10**9) == 1
    gib = 2**30
    # Each copy costs the inputs' size; at most MEMORY_SHARE of free memory goes to copies.
    assert placement_count(8, gib, int(2 * gib / MEMORY_SHARE)) == 3
    assert placement_count(8, gib, gib) == 1


def test_replays_are_split_over_the_placements_with_a_floor():
    assert replays_per_placement(200, 4, 5) == 50
    assert replays_per_placement(201, 4, 5) == 51
    assert replays_per_placement(10, 4, 5) == 5
    assert replays_per_placement(30, 1, 5) == 30


def test_sparse_and_inference_tensors_stay_put():
    with torch.inference_mode():
        frozen = torch.randn(8)
    sparse = torch.randn(4, 4).to_sparse()
    assert movable_inputs([frozen, sparse], anywhere) == ([], "no movable input on the device")


def test_a_tensor_that_refuses_its_copy_leaves_the_others_restored():
    x, y = torch.randn(8), torch.randn(8)
    ptrs = (x.data_ptr(), y.data_ptr())
    places = Placements([x, y], 2)
    places.copies.append([x.data.clone(), torch.randn(3, dtype=torch.float64).to_sparse()])
    with pytest.raises(Exception):
        places.move(1)
    assert x.data_ptr() != ptrs[0]  # x moved before y refused
    places.restore()
    assert (x.data_ptr(), y.data_ptr()) == ptrs


def test_fewer_placements_are_said_in_run_log_once_per_reason(monkeypatch, capsys):
    from zlbench.plugins.direct_timer import DirectSettings, RowRecorder
    from zlbench.plugins.graph_timer import GraphTimer
    from zlbench.plugins.row_context import RowContext

    monkeypatch.setenv("ZL_GRAPH_PLACEMENTS", "8")
    timer = GraphTimer(DirectSettings("kernels", 1, 0.005), RowRecorder(None), RowContext())
    for count, why in ((8, None), (1, "an input takes part in autograd"), (1, "an input takes part in autograd"),
                       (3, "placement 4 failed: OutOfMemoryError")):
        timer.note_placements(count, why)
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("zlbench graph timer:")]
    assert lines == [
        "zlbench graph timer: timed over fewer input placements than ZL_GRAPH_PLACEMENTS=8: "
        "an input takes part in autograd (counts in plugins/graph_timer.json)",
        "zlbench graph timer: timed over fewer input placements than ZL_GRAPH_PLACEMENTS=8: "
        "placement 4 failed: OutOfMemoryError (counts in plugins/graph_timer.json)",
    ]
    counts = timer.counts()
    assert counts["timings_per_placements"] == {"1": 2, "3": 1, "8": 1}
    assert counts["timings_fewer_placements"] == 3 and counts["placements_wanted"] == 8

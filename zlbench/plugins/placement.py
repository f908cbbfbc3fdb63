"""Where a timed row's inputs sit in device memory, and moving them for the graph timer.

A kernel's time depends on the addresses of its data (which L2 slices and memory
channels they map to), and a process gets one set of addresses from its allocator. On an
H200, torch's layer_norm over [20, 6, 65536] halves took 412-488 us by graph replay
over 8 placements of its inputs in one process (FlagGems' 42.7-46.2 us), so two
processes disagreed by up to 7% on a row whose replays agreed within 0.1%. The graph
timer therefore times a row over several placements, as Stabilizer randomises layout
for sound comparisons: it moves the tensors the timed function reads to fresh
allocations (``tensor.data = clone``: same Python object, new storage), captures and
replays there, and puts the originals back. The row's median and spread then describe
the kernel, not one process's addresses.

Only tensors the function closes over are found (closure cells, ``functools.partial``
arguments, and lists, tuples and dicts in them, a few levels deep), and only those that
own their whole storage alone are moved: a view, or a tensor whose storage another
tensor also uses (an input or anything else), keeps its place; if any input takes part in
autograd (a backward row's saved tensors point at the old storage), none moves. Nothing
here imports torch: the caller passes it.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, List, Optional, Tuple

MAX_DEPTH = 4  # closure -> args tuple -> list -> tensor, with one level to spare
MEMORY_SHARE = 0.25  # the extra placements may hold at most this share of free memory


def closure_tensors(fn: Callable, is_tensor: Callable[[Any], bool]) -> List[Any]:
    """The tensors ``fn`` reads through its closure, each once, in the order found."""
    found: List[Any] = []
    seen: set = set()

    def walk(obj: Any, depth: int) -> None:
        if depth < 0 or id(obj) in seen:
            return
        seen.add(id(obj))
        if is_tensor(obj):
            found.append(obj)
        elif isinstance(obj, (list, tuple)):
            for item in obj:
                walk(item, depth - 1)
        elif isinstance(obj, dict):
            for item in obj.values():
                walk(item, depth - 1)
        elif isinstance(obj, functools.partial):
            walk(obj.func, depth - 1)
            walk(obj.args, depth - 1)
            walk(obj.keywords, depth - 1)
        elif callable(obj):
            for cell in getattr(obj, "__closure__", None) or ():
                try:
                    walk(cell.cell_contents, depth - 1)
                except ValueError:  # an empty cell
                    pass

    walk(fn, MAX_DEPTH)
    return found


def movable_inputs(
    tensors: List[Any], on_device: Callable[[Any], bool], storage_users: Optional[Callable[[Any], int]] = None
) -> Tuple[List[Any], Optional[str]]:
    """The tensors that may move, or ([], why none may). ``storage_users(tensor)``
    counts the references to the tensor's storage (torch's ``_storage_Use_Count``: 2 for
    a tensor alone, the tensor and the storage object asked), so that a view held outside
    the closure keeps its base in place too."""
    if any(getattr(t, "requires_grad", False) or getattr(t, "grad_fn", None) is not None for t in tensors):
        return [], "an input takes part in autograd"
    owners: dict = {}
    for t in tensors:
        try:
            if str(t.layout) != "torch.strided" or t.is_inference() or not on_device(t):
                continue  # sparse or inference tensors cannot take new storage
            owners.setdefault(t.untyped_storage().data_ptr(), []).append(t)
        except Exception:  # noqa: BLE001 - a tensor subclass without storage stays put
            continue
    movable = []
    for group in owners.values():
        if len(group) > 1:
            continue  # shared storage: moving one would break the aliasing
        t = group[0]
        whole = t.storage_offset() == 0 and t.untyped_storage().nbytes() == t.numel() * t.element_size()
        alone = storage_users is None or storage_users(t) <= 2
        if whole and alone and t._base is None and t.is_contiguous():
            movable.append(t)
    if not movable:
        if not tensors:
            return [], "no tensor input found"
        return [], "no input owns its storage alone" if owners else "no movable input on the device"
    return movable, None


def placement_count(wanted: int, input_bytes: int, free_bytes: Optional[int]) -> int:
    """How many placements to time: the one the inputs have plus moved copies, as many
    as ``wanted`` and the free-memory share allow (every copy stays alive until the end,
    so that each gets addresses of its own)."""
    if wanted <= 1 or input_bytes <= 0:
        return 1
    if free_bytes is None:
        return wanted
    extra = int(MEMORY_SHARE * free_bytes // input_bytes)
    return max(1, min(wanted, 1 + extra))


class Placements:
    """The inputs of one timed function at their own place (index 0) and at moved ones.

    ``move(i)`` puts the inputs at placement ``i`` (copies made on first use and kept
    until ``restore``); ``restore()`` puts the original storage back, also after an error.
    """

    def __init__(
        self,
        tensors: List[Any],
        count: int,
        why_fewer: Optional[str] = None,
        clone: Optional[Callable[[Any], Any]] = None,
    ):
        self.tensors = tensors
        self.count = count if tensors else 1
        self.why_fewer = why_fewer  # why fewer placements than asked for, if so
        self.originals = [t.data for t in tensors]
        self.moved = [False] * len(tensors)
        self.copies: List[List[Any]] = []
        self.clone = clone or (lambda t: t.clone())
        self.nbytes = sum(t.untyped_storage().nbytes() for t in tensors)

    @classmethod
    def plan(cls, torch: Any, fn: Callable, wanted: int) -> "Placements":
        """The placements for ``fn``'s inputs; never raises (one placement, and why)."""
        if wanted <= 1:
            return cls([], 1, None)
        try:
            found = closure_tensors(fn, torch.is_tensor)
            use_count = getattr(torch._C, "_storage_Use_Count", None)
            users = (lambda t: use_count(t.untyped_storage()._cdata)) if use_count else None
            tensors, why = movable_inputs(found, lambda t: t.device.type != "cpu", users)
        except Exception as exc:  # noqa: BLE001 - an odd object in the closure: time in place
            return cls([], 1, f"finding the inputs failed: {type(exc).__name__}")
        if not tensors:
            return cls([], 1, why)
        size = sum(t.untyped_storage().nbytes() for t in tensors)
        try:
            free: Optional[int] = int(torch.cuda.mem_get_info()[0])
        except Exception:  # noqa: BLE001 - a backend without the query: trust the wanted count
            free = None
        count = placement_count(wanted, size, free)
        why_fewer = None if count == wanted else f"free memory holds {count - 1} copies"
        return cls(tensors, count, why_fewer, native_clone(torch))

    def limit(self, most: int, why: str) -> None:
        """At most ``most`` placements, for the reason given."""
        if most < self.count:
            self.count = most
            self.why_fewer = why

    def fewer(self, why: str) -> None:
        self.why_fewer = why

    def move(self, index: int) -> None:
        if index == 0:
            self._put_back()
            return
        self.prepare(index + 1)
        for i, (t, copy) in enumerate(zip(self.tensors, self.copies[index - 1])):
            t.data = copy
            self.moved[i] = True

    def prepare(self, count: int) -> None:
        """Make the copies of placements 1 .. count-1 now (a device copy each), so that
        ``move`` only swaps storage: inside a graph capture no copy may run."""
        while len(self.copies) < count - 1:
            self.copies.append([self.clone(original) for original in self.originals])

    def _put_back(self) -> None:
        # Only tensors that did move: one that refused its copy never left.
        for i, (t, original) in enumerate(zip(self.tensors, self.originals)):
            if self.moved[i]:
                t.data = original
                self.moved[i] = False

    def restore(self) -> None:
        self._put_back()
        self.copies.clear()


def native_clone(torch: Any) -> Callable[[Any], Any]:
    """A copy by torch's own device copy, never a library's override of ``aten::copy_``.

    Inside FlagGems' ``use_gems()`` (around every gems-side timing) ``clone`` runs
    FlagGems' copy kernel, whose first use in a process loads or compiles it: about 3 s
    on an H200, charged to the first row of every operator. Redispatching ``copy_`` to
    CompositeExplicitAutograd reaches torch's copy (FlagGems falls back the same way).
    """
    try:
        keys = torch._C.DispatchKeySet(torch._C.DispatchKey.CompositeExplicitAutograd)
        copy = torch.ops.aten.copy_.default
    except Exception:  # noqa: BLE001 - an older torch: the plain clone
        return lambda t: t.clone()

    def clone(t: Any) -> Any:
        out = torch.empty_like(t)
        copy.redispatch(keys, out, t, False)
        return out

    return clone

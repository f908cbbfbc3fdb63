"""A warm batch worker: imports what can be imported without touching a device, then
forks one fresh ``zlbench run`` per operator attempt.

Started by the batch (``python -m zlbench.run.worker --backend cuda --corpus-root R``),
one per device slot. It talks JSON lines: requests on stdin, replies on the stdout it
had at start (its own fd 1 then points at its log, so nothing an import prints can
corrupt a reply).

    <- {"event": "ready", "pid", "imported": [...], "failed": {...}, "import_s"}
       or {"event": "refused", "reason", "detail"} and exit
    -> {"cmd": "attempt", "argv": [zlbench run args], "env": {...}, "cwd", "log"}
    <- {"event": "started", "pid"}   the child: a new session, its output to "log"
    -> {"cmd": "reap"}               once the batch has seen it exit and cleaned its group
    <- {"event": "reaped", "rc"}     rc as Popen gives it (-N: killed by signal N)

Before every fork it proves that no device runtime is initialised in this process
(``backends.initialised_runtimes``): a child of a process that initialised CUDA cannot
use CUDA. If one is, it refuses and exits; the batch goes on with fresh processes.

The child runs ``zlbench run``'s own code (``run_from_flags``) with one difference: the
benchmark process is a second fork that calls ``pytest.main`` with the exact argv and
environment the fresh ``python -m pytest`` would get, and ``os._exit``s with its code.
The run dir, exit codes and output are the same as ``zlbench run``'s.

Prestart (``--prestart``): the library under test initialises the device when imported
(flag_gems does), so no worker may import it, and every benchmark process paid for it
before its pytest session began. Instead, as soon as an attempt has started, the worker
forks the children of the next ones (*spares*, SPARES of them): each, in its own
session, forks the benchmark process, which imports what the corpus' conftest imports,
the library included, in the environment the last attempt's benchmark process had, and
then waits. The next attempt goes to the oldest spare; its benchmark process is used
only if the attempt's environment and directory equal the ones it imported in (per-run
keys aside), else it is dropped and a plain fork takes its place. What the import printed goes to the attempt's output first.
A spare holds a device context while the operators before it run (a few hundred MB).

Each process role has its own module: this one (the worker and its loop),
attempt_child.py (the forked ``zlbench run``), spare.py, prestarted.py (the spare's
benchmark process), forked_pytest.py (the benchmark process as a fork), and fork.py
(the plumbing they share).
"""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import sys
import time
from collections import deque
from pathlib import Path
from typing import Deque, Dict, List, Optional, Tuple

from .attempt_child import attempt_child
from .fork import WORKER_PYTHONPATH, Channel, fork_child, preimport, pythonpath_entries
from .spare import Spare

# Spares kept ready (prestart): the one the next attempt takes and the one after it, so
# that an operator shorter than the library's import does not leave the next waiting for
# it. On an H200 host flag_gems imported in 3-5.6 s in a spare, and with one spare every
# operator after one of 2.5-4.7 s waited 0.7-2.6 s for its start (six of a 24-operator
# sample: about 0.12 h of a 2.24 h projection).
SPARES = 2

# Imported by every benchmark process and safe before any device is touched.
PREIMPORT = (
    "numpy",
    "yaml",
    "sqlalchemy",
    "torch",
    # torch imports sympy at a library's first type promotion (elementwise_dtypes): 2.0 s
    # in every operator's first row on an H200 host whose site-packages had no .pyc.
    "sympy",
    # torch.profiler's first session asks hasattr(torch, "_inductor"), which imports
    # torch._inductor and torch._dynamo: 1.5-2.9 s inside the first traced timing of each
    # process on an H200 host (9.5 s of a 24-operator pass's 142 s of pytest), and what
    # it leaves on the heap made every later gc.collect of the process walk it. It reads
    # TORCHINDUCTOR_*, TMPDIR and friends once, here: no run may set them apart.
    "torch._inductor.config",
    "triton",
    # triton imports gluon at a process's first kernel launch (90 ms an operator).
    "triton.experimental.gluon",
    "pytest",
    "_pytest.python",
    "_pytest.terminal",
    "_pytest.fixtures",
    "_pytest.main",
    "_pytest.runner",
    "zlbench.plugins.phases",
    "zlbench.plugins.device_setup",
    "zlbench.plugins.gc_freeze",
    "zlbench.plugins.overheads",
    "zlbench.plugins.direct_timer",
    "zlbench.plugins.graph_timer",
    "zlbench.plugins.autotune",
    "zlbench.plugins.parallel_warmup",
    "zlbench.cli",
    "zlbench.run",
    "zlbench.providers",
    "zlbench.tuner_cache",
)
# Computed once here, inherited by every fork: (module, function) called after the
# imports, where it exists. triton_key hashes triton's own files and libtriton before a
# process's first compile or cache lookup: 0.4 s per operator on an H200 host.
PREWARM = (
    ("triton.runtime.cache", "triton_key"),  # triton >= 3.3
    ("triton.compiler.compiler", "triton_key"),  # earlier triton, flagtree
)
# Vendor triton builds (flagtree and friends) install as "triton"; a vendor's torch
# extension is imported by the backend's probe only. Never imported by a worker:
# importing the library under test initialises the device (flag_gems does at import).
NEVER = ("flag_gems", "flaggems_benchmark", "benchmark")


def conftest_imports(corpus_root: Path, device_free: bool = True) -> List[str]:
    """Top-level absolute imports of the corpus' benchmark/conftest.py (module names),
    leaving out the corpus' own packages and, with ``device_free``, the library under
    test (what a worker may import; a spare's benchmark process imports them all)."""
    from ..corpus.tree import conftest_imports as imported_by_conftest

    names = imported_by_conftest(corpus_root)
    local = {p.name.split(".")[0] for p in corpus_root.iterdir()} if corpus_root.is_dir() else set()
    out = []
    for name in names:
        top = name.split(".")[0]
        if (device_free and top in NEVER) or top in local or name in out:
            continue
        out.append(name)
    return out


def prewarm(calls) -> Tuple[List[str], Dict[str, str]]:
    """Call each (module, function) of ``calls`` that exists, once; the first of a
    function name that works is enough. Returns (``module.function()`` for each called,
    {``module.function()``: why} for each that raised: the child computes it itself)."""
    done: List[str] = []
    failed: Dict[str, str] = {}
    found: set = set()  # function names found in some module, whether or not they worked
    worked: set = set()
    for module, function in calls:
        if function in worked:
            continue
        try:
            fn = getattr(importlib.import_module(module), function)
        except Exception:  # noqa: BLE001 - absent in this triton: the next pair names the other home
            continue
        found.add(function)
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - reported with the failed imports
            failed[f"{module}.{function}()"] = f"{type(e).__name__}: {e}"
            continue
        done.append(f"{module}.{function}()")
        worked.add(function)
    for function in dict.fromkeys(f for _, f in calls):
        if function not in found:
            failed[f"{function}()"] = "in none of " + ", ".join(m for m, f in calls if f == function)
    return done, failed


def list_devices(backend_name: Optional[str]) -> Optional[str]:
    """Ask the batch's backend's vendor tool for its devices, once: every attempt's
    ``zlbench run`` lists them before its benchmark process may start, and the attempts
    forked from here inherit this answer (``Backend.probe_devices``). What was done, for
    the worker's log; None where there is nothing to ask."""
    from .. import backends

    if not backend_name:
        return None
    try:
        backend = backends.get_backend(backend_name)
    except backends.UnknownBackend:
        return None
    if backend.slots_only or not backend.tool_available():
        return None
    return f"{backend.name} devices listed: {len(backend.probe_devices())}"


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m zlbench.run.worker")
    parser.add_argument("--corpus-root", default=None)
    parser.add_argument(
        "--backend", default=None, help="the batch's backend: its devices are listed once, here"
    )
    parser.add_argument(
        "--prestart", action="store_true", help="fork each next attempt's child ahead, its library imported"
    )
    args = parser.parse_args(argv)
    # fd 1 becomes the reply channel; what imports and children print goes to stderr.
    channel = Channel(os.dup(1))
    os.dup2(2, 1)
    WORKER_PYTHONPATH[:] = pythonpath_entries(os.environ.get("PYTHONPATH"))

    from .. import backends

    started = time.monotonic()
    names = list(PREIMPORT)
    corpus_root = Path(args.corpus_root) if args.corpus_root else None
    if corpus_root is not None:
        names += [n for n in conftest_imports(corpus_root) if n not in names]
    imported, failed = preimport(names)
    warmed, warm_failed = prewarm(PREWARM)
    listed = list_devices(args.backend)
    imported += warmed + ([listed] if listed else [])
    failed.update(warm_failed)
    import_s = time.monotonic() - started
    print(
        f"zlbench worker {os.getpid()}: imported {len(imported)} modules in {import_s:.1f} s"
        + (f"; failed: {failed}" if failed else ""),
        file=sys.stderr,
        flush=True,
    )
    touched = backends.initialised_runtimes()
    if touched:
        channel.send(event="refused", reason="device_initialised", detail=",".join(touched))
        return 0
    # What was imported lives as long as the worker: keep it out of every collection.
    # pytest collects several times at exit (unraisable-exception check), which costs
    # 0.5 s per operator once torch's objects are on the heap; frozen, they are skipped,
    # and the children's pages stay shared with the worker.
    gc.collect()
    gc.freeze()
    channel.send(
        event="ready", pid=os.getpid(), imported=imported, failed=failed, import_s=round(import_s, 3)
    )
    library = conftest_imports(corpus_root, device_free=False) if args.prestart and corpus_root else []
    spares: Deque[Spare] = deque()  # the next attempts' children, oldest first
    try:
        while True:
            msg = channel.receive()
            if msg is None or msg.get("cmd") == "exit":
                return 0
            if msg.get("cmd") != "attempt":
                channel.send(event="error", detail=f"unknown request {msg!r}")
                continue
            pid = None
            while pid is None and spares:  # one that cannot take it is discarded: the next may
                pid = spares.popleft().hand(msg)
            if pid is None:
                touched = backends.initialised_runtimes()
                if touched:
                    channel.send(event="refused", reason="device_initialised", detail=",".join(touched))
                    return 0
                pid = fork_child(lambda: attempt_child(msg, channel))
            channel.send(event="started", pid=pid)
            if library and not backends.initialised_runtimes():
                # The next attempts' children, readied while this one runs.
                try:
                    while len(spares) < SPARES:
                        spares.append(Spare.fork(msg, library, channel, spares))
                except OSError as e:  # no pipe or no fork now: a later attempt forks plainly
                    print(f"zlbench worker: no spare: {e}", file=sys.stderr, flush=True)
            # Reap only when told: until then the exited child is a zombie whose pid (its
            # group id) cannot be reused, so the batch can clean up its group safely.
            reply = channel.receive()
            _, status = os.waitpid(pid, 0)
            if reply is None:
                return 0
            channel.send(event="reaped", rc=os.waitstatus_to_exitcode(status))
    finally:
        for spare in spares:
            spare.discard()


if __name__ == "__main__":
    sys.exit(main())

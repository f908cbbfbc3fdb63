"""pytest plugin for MThreads GPUs: measure what FlagGems skips only for want of CUDA.

FlagGems guards some benchmarks with ``skipif(not torch.cuda.is_available())``
although the code under test dispatches through ``flag_gems.device``. torch_musa does
not make ``torch.cuda`` available, so on an MThreads GPU those operators come out
"not measured" (test_fft.py: skipped; unskipped on an S5000 it gives 25 rows).

This plugin removes exactly the skip markers that ``ops/compat/musa_skip_overrides.yaml``
marks ``remove``: each pinned to one file, one test (``*`` for a module pytestmark) and
one exact reason string, so a reworded or new upstream guard is left alone. It acts
only when flag_gems, imported by the benchmark conftest, has dispatched to the
``mthreads`` vendor, and only under ``zlbench run`` (``ZL_RUN_DIR`` set). It prints a
``COMPAT_SKIP_REMOVED`` line per removed guard and records them in
``$ZL_RUN_DIR/plugins/compat_musa.json``.

It rewrites collection-time markers, so it must act before any other plugin reads
the item list: it wraps ``pytest_collection_modifyitems`` with tryfirst, and
``backends.plugin_plan`` lists it first.

Guards that stay (each decided in the table, with why):
- CUDA-only baselines: vLLM / DeepGEMM custom ops (apply_repetition_penalties,
  cp_gather_indexer_k_quant_cache, indexer_k_quant_and_cache), cuDNN attention
  (cudnn_attention_forward, scaled_dot_product_cudnn_attention_backward) and PyTorch's
  CUDA FlashAttention / memory-efficient kernels (flash_attention_forward, the
  flash / efficient attention backward tests). Unskipped they fail instead of measuring.
- Conditions with more than CUDA in them (the deepseek_v4 attention ops need vLLM;
  the fp8 MQA-logits and mega-MoE tests need SM90/SM100 and DeepGEMM;
  embedding_dense_backward also requires ``flag_gems.device == "cuda"``): removing
  the marker would drop the other half of the condition.
- Run-time capability probes (consts.get_fp8_dtype, the scaled_mm fp8 checks, ...):
  ordinary code, not markers; nothing to remove.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest

from zlbench import backends
from zlbench.corpus.layout import BENCH_DIRS
from zlbench.markers import format_marker
from zlbench.plugins import print_line, run_dir, write_plugin_json

PLUGIN = "compat_musa"
BACKEND = "musa"
VENDOR = backends.BACKENDS[BACKEND].gems_vendor
REMOVED_MARKER = "COMPAT_SKIP_REMOVED"


def gems_vendor() -> Optional[str]:
    """flag_gems' vendor, if the benchmark conftest has imported it (never import it here)."""
    module = sys.modules.get("flag_gems")
    return getattr(module, "vendor_name", None) if module is not None else None


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_collection_modifyitems(session, config, items):
    if run_dir() is not None:
        _act(items)
    yield


def _act(items: List[Any]) -> None:
    vendor = gems_vendor()
    if vendor != VENDOR:
        write_plugin_json(PLUGIN, {"vendor": vendor, "active": False, "removed": []})
        return
    from zlbench.corpus.guards import CompatTableError, load_table, removals
    from zlbench.opsdata import OpsDataError

    try:
        table = load_table(BACKEND)
    except (CompatTableError, OpsDataError) as exc:
        raise pytest.UsageError(f"{PLUGIN}: {exc}") from exc
    removed, unmatched = remove_overridden_skips(items, removals(table))
    for r in removed:
        print_line(
            format_marker(
                REMOVED_MARKER, file=r["file"], test=r["test"], reason=r["reason"], items=r["items"]
            )
        )
    for u in unmatched:
        print_line(
            f"{PLUGIN}: no skip with reason {u['reason']!r} on {u['file']}::{u['test']}; "
            "upstream changed it: re-read the guard and update "
            "ops/compat/musa_skip_overrides.yaml"
        )
    write_plugin_json(PLUGIN, {"vendor": vendor, "active": True, "removed": removed, "unmatched": unmatched})


def remove_overridden_skips(items: List[Any], entries: List[Dict[str, Any]]):
    """Remove the skipif marks the entries name; return (removed, unmatched).

    ``removed``: one dict per entry that matched (file, test, reason, items touched).
    ``unmatched``: entries whose file was collected but held no such skip.
    """
    touched: Dict[int, int] = {}
    files_seen = set()
    done_modules: set = set()
    for item in items:
        rel = below_bench_dir(Path(str(getattr(item, "path", None) or item.fspath)))
        if rel is None:
            continue
        files_seen.add(rel)
        for i, entry in enumerate(entries):
            if _entry_rel(entry["file"]) != rel:
                continue
            if entry["kind"] == "module-skipif":
                module = _module_node(item)
                if module is None:
                    continue
                if id(module) in done_modules:
                    touched[i] = touched.get(i, 0) + 1
                elif _drop_skipif(module, entry["reason"]):
                    done_modules.add(id(module))
                    touched[i] = touched.get(i, 0) + 1
            elif _function_name(item) == entry["test"] and _drop_skipif(item, entry["reason"]):
                touched[i] = touched.get(i, 0) + 1
    removed = [
        dict(file=e["file"], test=e["test"], reason=e["reason"], items=touched[i])
        for i, e in enumerate(entries)
        if i in touched
    ]
    unmatched = [
        dict(file=e["file"], test=e["test"], reason=e["reason"])
        for i, e in enumerate(entries)
        if i not in touched and _entry_rel(e["file"]) in files_seen
    ]
    return removed, unmatched


def below_bench_dir(path: Path) -> Optional[str]:
    """``.../benchmark/test_fft.py`` -> ``test_fft.py``; None outside a benchmark tree."""
    parts = path.parts
    for i in range(len(parts) - 1, -1, -1):
        if parts[i] in BENCH_DIRS:
            return "/".join(parts[i + 1 :])
    return None


def _entry_rel(file: str) -> str:
    parts = Path(file).parts
    return "/".join(parts[1:]) if parts and parts[0] in BENCH_DIRS else "/".join(parts)


def _function_name(item: Any) -> str:
    return getattr(item, "originalname", None) or item.name.split("[", 1)[0]


def _module_node(item: Any):
    for node in item.listchain():
        if isinstance(node, pytest.Module):
            return node
    return None


def _reason(mark: Any) -> Optional[str]:
    if "reason" in mark.kwargs:
        return mark.kwargs["reason"]
    return mark.args[1] if len(mark.args) > 1 else None


def _drop_skipif(node: Any, reason: str) -> bool:
    keep = [m for m in node.own_markers if not (m.name == "skipif" and _reason(m) == reason)]
    if len(keep) == len(node.own_markers):
        return False
    node.own_markers[:] = keep
    return True

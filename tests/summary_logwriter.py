"""Write logs and run dirs in the format FlagGems and zlbench leave, for summary tests.

The table layout follows the protocol notes (shared/notes/flaggems-protocol.md): status
left in 10, value cells right in 20, 10 spaces, then the Size Detail text; a row prints
TFLOPS only when its own tflops is non-zero and GBPS only when it has gbps.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence


def _cell(value: Optional[float], digits: int) -> str:
    return f"{'N/A' if value is None else f'{value:.{digits}f}':>20}"


def table_text(op: str, dtype: str, rows: Sequence[Dict], mode: str = "kernel",
               level: str = "core") -> str:
    """What FlagGems' print(result) writes for one (op, dtype): header, rows, blank line.

    Each row dict: shape (text), torch_ms, gems_ms, and optional speedup, tflops,
    torch_gbps, gems_gbps, status.
    """
    first = rows[0]
    cols = [f"{'Status':<10}", f"{'Torch Latency (ms)':>20}", f"{'Gems Latency (ms)':>20}",
            f"{'Gems Speedup':>20}"]
    if first.get("tflops"):
        cols.append(f"{'TFLOPS':>20}")
    if first.get("gems_gbps") is not None:
        cols += [f"{'Torch GBPS ':>20}", f"{'Gems GBPS ':>20}"]
    cols.append(f"{'Size Detail':>20}\n")
    names = " ".join(cols)
    out = [f"\nOperator: {op}  Performance Test (dtype={dtype}, mode={mode},level={level})\n",
           names, "-" * len(names) + "\n"]
    for r in rows:
        speedup = r.get("speedup")
        if speedup is None and r.get("torch_ms") and r.get("gems_ms"):
            speedup = r["torch_ms"] / r["gems_ms"]
        line = (f"{r.get('status', 'SUCCESS'):<10}" + _cell(r.get("torch_ms"), 6)
                + _cell(r.get("gems_ms"), 6) + _cell(speedup, 3))
        if r.get("tflops"):
            line += _cell(r["tflops"], 3)
        if r.get("gems_gbps") is not None:
            line += _cell(r.get("torch_gbps"), 3) + _cell(r["gems_gbps"], 3)
        out.append(line + " " * 10 + f"{r['shape']}\n")
    return "".join(out) + "\n"


SESSION_START = (
    "============================= test session starts ==============================\n"
    "platform linux -- Python 3.11.7, pytest-8.3.3, pluggy-1.5.0\n"
    "collected {n} items\n\n"
)


def session_end(passed: int, failed: int = 0, seconds: float = 12.5) -> str:
    parts = ([f"{failed} failed"] if failed else []) + ([f"{passed} passed"] if passed else [])
    return f"\n=================== {', '.join(parts)} in {seconds:.2f}s ===================\n"


def identity(**over) -> Dict:
    """A run_identity.json as `zlbench run` writes it; keyword arguments replace keys."""
    doc = {
        "backend": "cuda",
        "device": {"index": 0, "model": "NVIDIA H200"},
        "timer": "graph",
        "autotune_mode": "record",
        "tuner_cache": "isolated",
        "level": "core",
        "shape_source": "core_shapes.yaml",
        "test_node": "benchmark/test_abs.py",
        "dtypes": ["float16", "float32"],
        "repeat": 3,
        "versions": {"python": "3.11.7", "torch": "2.11.0", "triton": "3.6.0"},
        "knobs": {"ZL_ENABLE_CUDAGRAPH": "1", "USE_FLAGTUNE": "0"},
        "plugins": {},
    }
    doc.update(over)
    return doc


def write_run(run_dir: Path, log: str, ident: Optional[Dict] = None,
              complete: bool = True) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "run.log").write_text(log)
    if ident is not None:
        (run_dir / "run_identity.json").write_text(json.dumps(ident))
    if complete:
        (run_dir / ".complete").write_text("")
    return run_dir


def op_log(op: str, dtypes: Iterable[str], shapes: List[str], latency,
           prefix: str = "", torch_latency=None) -> str:
    """A whole pytest -s log of one operator; latency(op, dtype, shape) -> gems ms, and
    torch_latency the same for torch's (0.05 ms without one)."""
    text = SESSION_START.format(n=1) + f"benchmark/test_{op}.py " + prefix
    for dtype in dtypes:
        rows = [{"shape": s, "torch_ms": torch_latency(op, dtype, s) if torch_latency else 0.05,
                 "gems_ms": latency(op, dtype, s)} for s in shapes]
        text += table_text(op, dtype, rows)
    return text + "." + session_end(1)


def scale_gems(text: str, factor: float) -> str:
    """A FlagGems log with every row's Gems Latency cell (20 columns after the 10 of the
    status and the 20 of torch) multiplied by ``factor``: a build made slower or faster.
    Its Gems Speedup cell is divided to match: summary does not count a row whose
    speedup its latencies contradict."""
    out = []
    for line in text.split("\n"):
        if line.startswith("SUCCESS "):
            line = (line[:30] + f"{float(line[30:50]) * factor:>20.6f}"
                    + f"{float(line[50:70]) / factor:>20.3f}" + line[70:])
        out.append(line)
    return "\n".join(out)


def night_copy(sample_screen: Path, tmp_path: Path, name: str, started: str, slower=None, level=None,
          corpus_root=None) -> Path:
    """A copy of a screen as if measured at ``started`` (later nights), with ``slower`` =
    (op, factor) applied to its gems latencies, another bench ``level``, or another
    ``corpus_root`` recorded in its run identities."""
    out = tmp_path / name
    shutil.copytree(sample_screen, out)
    for ident in out.glob("*/run_identity.json"):
        doc = json.loads(ident.read_text())
        doc["started"] = started
        if level:
            doc["level"] = level
            doc["knobs"]["BENCH_LEVEL"] = level
        if corpus_root:
            doc["corpus_root"] = str(corpus_root)
        ident.write_text(json.dumps(doc))
    if slower:
        log = out / slower[0] / "run.log"
        log.write_text(scale_gems(log.read_text(), slower[1]))
    return out

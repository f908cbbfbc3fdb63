"""FlagGems' result files: the benchmark's ``--record json`` output and the
``summary.json`` of its runner, tools/run_tests.py.

``--record json --output FILE`` (benchmark/conftest.py) writes, when the session ends,
``{<op id>: {"result": "passed|failed|skipped", "reason", "test_case", "details":
[<one BenchmarkResult per (op, dtype)>]}}``; a detail has op_name, dtype
("torch.float16"), mode, level and ``result``, a list of BenchmarkMetrics (shape_detail,
latency_base, latency, speedup, gbps_base, gbps, tflops, error_msg, ...).

run_tests.py moves it to ``<out>/<op>/performance_result.json`` and writes
``<out>/summary.json``: ``{"timestamp", "total_duration", "env", "result": {<op>:
{"customized", "accuracy": {...}, "performance": {"status", "duration", "exit_code",
"data_file", "data": {<fp16>: {"result", "details": {<shape without spaces>: {"base",
"gems", "speedup"}}, "speedup": <mean>}}, ...}}}}``. FlagGems' psum_text, psum_html
and psum_web read that file; ``perf_entry`` builds the performance part exactly as
run_tests.py's ``parse_perf_data`` does, so they read a zlbench batch unchanged.
"""

from __future__ import annotations

import ast
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple

from zlbench.rundir import fg_summary_path

from .layout import TreeError, bench_dir_name

# tools/consts.py DTYPE_MAP: the dtype keys of summary.json's per-operator data.
DTYPE_MAP = {
    "torch.float16": "fp16",
    "torch.float32": "fp32",
    "torch.bfloat16": "bf16",
    "torch.int16": "int16",
    "torch.int32": "int32",
    "torch.int8": "int8",
    "torch.uint8": "uint8",
    "torch.int64": "int64",
    "torch.bool": "bool",
    "torch.complex64": "cf64",
    "torch.float8_e4m3fn": "float8_e4m3fn",
    "torch.float8_e5m2": "float8_e5m2",
}
TORCH_DTYPE = {short: full for full, short in DTYPE_MAP.items()}
# run_tests.py's performance statuses: the record's result title-cased, or its own.
PASSED, FAILED, SKIPPED, TIMEOUT, NOT_FOUND, ERROR = (
    "Passed",
    "Failed",
    "Skipped",
    "Timeout",
    "NotFound",
    "Error",
)
# run_tests.py's exit_code for an operator it stopped at its timeout.
TIMEOUT_EXIT_CODE = -100
ACCURACY_NOT_RUN = {"status": NOT_FOUND, "exit_code": 0, "total": 0, "passed": 0, "failed": 0, "skipped": 0}

_SIZE_CALL = re.compile(r"torch\.Size\((\[[^\]]*\])\)")


class ResultFileError(Exception):
    """A result file that cannot be read as FlagGems writes it; names the file."""


def records_json(root: Path) -> bool:
    """Whether the corpus' benchmark/conftest.py registers ``--record`` (with ``json``
    among its choices, where it lists any) and ``--output``, as FlagGems HEAD and the
    sample corpus do; an older or other tree would refuse the flags."""
    try:
        conftest = Path(root) / bench_dir_name(Path(root)) / "conftest.py"
        tree = ast.parse(conftest.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError, TreeError):
        return False
    options: Dict[str, ast.Call] = {}
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "addoption"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            options[node.args[0].value] = node
    record = options.get("--record")
    if record is None or "--output" not in options:
        return False
    for kw in record.keywords:
        if kw.arg == "choices" and isinstance(kw.value, (ast.List, ast.Tuple)):
            return any(isinstance(e, ast.Constant) and e.value == "json" for e in kw.value.elts)
    return True


def record_args(output: Path) -> List[str]:
    """The pytest flags that make the benchmark write its own result file."""
    return ["--record", "json", "--output", str(output)]


def canonical_shape(text: str) -> str:
    """A shape text both sides spell alike: zlbench rows carry the printed Size Detail
    (``([torch.Size([64, 64])], {'dim': -1})``), FlagGems' files its JSON, where sizes
    and tuples are lists (``[[[64, 64]], {'dim': -1}]``, in summary.json without spaces)."""
    text = _SIZE_CALL.sub(r"\1", str(text))
    for old, new in ((" ", ""), ("'", ""), ('"', ""), ("(", "["), (")", "]"), (",]", "]")):
        text = text.replace(old, new)
    return text


@dataclass
class RecordRow:
    """One shape of one (op, dtype) of a result file."""

    op: str
    dtype: str  # torch.float16
    shape: str  # as the file spells it (canonical_shape pairs it with a printed row)
    torch_ms: Optional[float]
    gems_ms: Optional[float]
    speedup: Optional[float]
    torch_gbps: Optional[float] = None
    gems_gbps: Optional[float] = None
    tflops: Optional[float] = None
    mode: str = ""
    level: str = ""
    error: str = ""


@dataclass
class OpResult:
    """One operator of a run_tests.py output dir."""

    op: str
    status: str  # run_tests.py's performance status
    reason: str = ""
    duration_s: Optional[float] = None
    exit_code: Optional[int] = None
    rows: List[RecordRow] = field(default_factory=list)
    source: str = ""  # the file the rows came from


def _number(value: Any) -> Optional[float]:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _load_json(path: Path, limit: int = 256 * 1024 * 1024) -> Any:
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except OSError as e:
        raise ResultFileError(f"{path}: cannot read it ({e.strerror or e})") from None
    if len(data) > limit:
        raise ResultFileError(f"{path}: larger than {limit} bytes")
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise ResultFileError(f"{path}: not JSON ({e})") from None


def read_record(path: Path) -> Dict[str, dict]:
    """A ``--record json`` file: op id -> its entry. Raises ResultFileError."""
    data = _load_json(path)
    if not isinstance(data, dict):
        raise ResultFileError(f"{path}: not a --record json file (a JSON object of operators)")
    return {op: entry for op, entry in data.items() if isinstance(entry, dict)}


def record_rows(entry: Mapping[str, Any], op: str) -> List[RecordRow]:
    """The rows of one operator's record entry, in file order."""
    rows = []
    for detail in entry.get("details") or []:
        if not isinstance(detail, dict):
            continue
        for metric in detail.get("result") or []:
            if not isinstance(metric, dict):
                continue
            rows.append(
                RecordRow(
                    str(detail.get("op_name") or op),
                    str(detail.get("dtype", "")),
                    str(metric.get("shape_detail")),
                    _number(metric.get("latency_base")),
                    _number(metric.get("latency")),
                    _number(metric.get("speedup")),
                    _number(metric.get("gbps_base")),
                    _number(metric.get("gbps")),
                    _number(metric.get("tflops")),
                    str(detail.get("mode", "")),
                    str(detail.get("level", "")),
                    str(metric.get("error_msg") or ""),
                )
            )
    return rows


def perf_entry(op: str, record: Optional[Mapping[str, dict]]) -> Dict[str, Any]:
    """summary.json's "performance" fields from an operator's record, as run_tests.py's
    parse_perf_data builds them (status, reason, test_case, data); NotFound without one."""
    entry = (record or {}).get(op)
    if not entry:
        return {"status": NOT_FOUND}
    result = entry.get("result", NOT_FOUND)
    if result in ("failed", "skipped"):
        return {
            "status": result.title(),
            "reason": entry.get("reason") or "Unknown",
            "test_case": entry.get("test_case", "Unknown"),
        }
    data: Dict[str, Any] = {}
    for item in entry.get("details") or []:
        dtype = DTYPE_MAP.get(item.get("dtype"), item.get("dtype"))
        details: Dict[str, Dict[str, Any]] = {}
        total, count = 0.0, 0
        for res in item.get("result") or []:
            shape = str(res.get("shape_detail", "Unknown")).replace(" ", "")
            speedup = res.get("speedup") or 0.0
            details[shape] = {
                "base": res.get("latency_base") or 0.0,
                "gems": res.get("latency") or 0.0,
                "speedup": speedup,
            }
            total += speedup
            count += 1
        data[dtype] = (
            {"result": "OK", "details": details, "speedup": total / count}
            if details
            else {"result": "Unknown", "details": {}, "speedup": 0}
        )
    return {"status": str(result).title(), "data": data, "test_case": entry.get("test_case", "Unknown")}


def summary_document(
    results: Mapping[str, Mapping[str, Any]], env: Mapping[str, Any], timestamp: str, total_duration: str
) -> Dict[str, Any]:
    """run_tests.py's summary.json from per-operator results ({"performance": ...})."""
    return {
        "timestamp": timestamp,
        "total_duration": total_duration,
        "env": dict(env),
        "result": {
            op: {"customized": False, "accuracy": dict(ACCURACY_NOT_RUN), **dict(item)}
            for op, item in sorted(results.items())
        },
    }


def is_summary(data: Any) -> bool:
    return isinstance(data, dict) and isinstance(data.get("result"), dict)


def read_summary(path: Path) -> Dict[str, Any]:
    """A run_tests.py summary.json. Raises ResultFileError."""
    data = _load_json(path)
    if not is_summary(data):
        raise ResultFileError(f"{path}: not FlagGems' summary.json (no 'result' object of operators)")
    return data


def _rows_from_summary_data(op: str, data: Any) -> List[RecordRow]:
    rows = []
    for dtype, item in (data or {}).items() if isinstance(data, dict) else ():
        details = item.get("details") if isinstance(item, dict) else None
        for shape, cell in (details or {}).items():
            if not isinstance(cell, dict):
                continue
            rows.append(
                RecordRow(
                    op,
                    TORCH_DTYPE.get(dtype, dtype),
                    shape,
                    _number(cell.get("base")),
                    _number(cell.get("gems")),
                    _number(cell.get("speedup")),
                )
            )
    return rows


def read_results_dir(root: Path) -> Tuple[Dict[str, Any], List[OpResult], List[str]]:
    """(summary.json, its operators, problems) of a run_tests.py output dir. Each
    operator's rows come from its ``data_file`` (the record, full shape texts) where it
    is there and readable, else from summary.json's own data. Raises ResultFileError."""
    root = Path(root)
    doc = read_summary(fg_summary_path(root))
    problems: List[str] = []
    ops: List[OpResult] = []
    for op, item in sorted(doc["result"].items()):
        perf = item.get("performance") if isinstance(item, dict) else None
        if not isinstance(perf, dict):
            problems.append(f"{op}: no performance entry in summary.json")
            continue
        result = OpResult(
            op,
            str(perf.get("status", NOT_FOUND)),
            str(perf.get("reason") or ""),
            _number(perf.get("duration")),
            perf.get("exit_code") if isinstance(perf.get("exit_code"), int) else None,
            source=str(fg_summary_path(root)),
        )
        data_file = perf.get("data_file")
        path = (root / data_file) if isinstance(data_file, str) and data_file else None
        if path is not None and path.is_file() and ".." not in Path(data_file).parts:
            try:
                record = read_record(path)
                result.rows = record_rows(record.get(op, {}), op)
                result.source = str(path)
            except ResultFileError as e:
                problems.append(f"{op}: {e}; using summary.json's numbers")
        if not result.rows:
            result.rows = _rows_from_summary_data(op, perf.get("data"))
        ops.append(result)
    return doc, ops, problems

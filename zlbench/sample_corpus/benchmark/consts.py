"""Constants of the sample corpus, named as in FlagGems' benchmark/consts.py."""

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, List, Optional

import torch

FLOAT_DTYPES = [torch.float16, torch.float32, torch.bfloat16]
INT_DTYPES = [torch.int16, torch.int32]
BOOL_DTYPES = [torch.bool]

# ms; FlagGems uses 1000/100 on GPUs. The sample keeps runs short.
DEFAULT_WARMUP_TIME = 10
DEFAULT_ITER_TIME = 25

# Used only when neither the op name nor any class in its chain has a shape-file key.
DEFAULT_SHAPES = [(1024,), (64, 64)]


class BenchMode(Enum):
    KERNEL = "kernel"
    OPERATOR = "operator"
    WRAPPER = "wrapper"
    CUDAGRAPH = "cudagraph"


class BenchLevel(Enum):
    COMPREHENSIVE = "comprehensive"
    CORE = "core"


@dataclass
class BenchmarkMetrics:
    shape_detail: Any = None
    latency_base: Optional[float] = None
    latency: Optional[float] = None
    gbps_base: Optional[float] = None
    gbps: Optional[float] = None
    speedup: Optional[float] = None
    tflops: Optional[float] = None
    error_msg: Optional[str] = None


def _fmt(value: Optional[float], spec: str) -> str:
    return format(value, spec) if value is not None else "N/A"


@dataclass
class BenchmarkResult:
    """One (operator, dtype) table, printed exactly as FlagGems prints it."""

    op_name: str
    dtype: str
    mode: str
    level: str
    result: List[BenchmarkMetrics] = field(default_factory=list)

    def __str__(self) -> str:
        title = (
            f"\nOperator: {self.op_name}  Performance Test (dtype={self.dtype}, "
            f"mode={self.mode},level={self.level})\n"
        )
        first = self.result[0]
        cols = [f"{'Status':<10}", f"{'Torch Latency (ms)':>20}",
                f"{'Gems Latency (ms)':>20}", f"{'Gems Speedup':>20}"]
        if first.tflops:
            cols.append(f"{'TFLOPS':>20}")
        if first.gbps is not None:
            cols += [f"{'Torch GBPS ':>20}", f"{'Gems GBPS ':>20}"]
        cols.append(f"{'Size Detail':>20}\n")
        header = " ".join(cols)
        rows = []
        for m in self.result:
            # Data cells are concatenated without separators, unlike the header.
            line = (f"{'SUCCESS' if m.error_msg is None else 'FAILED':<10}"
                    f"{_fmt(m.latency_base, '.6f'):>20}{_fmt(m.latency, '.6f'):>20}"
                    f"{_fmt(m.speedup, '.3f'):>20}")
            if m.tflops:
                line += f"{_fmt(m.tflops, '.3f'):>20}"
            if m.gbps is not None:
                line += f"{_fmt(m.gbps_base, '.3f'):>20}{_fmt(m.gbps, '.3f'):>20}"
            detail = m.shape_detail if m.shape_detail is not None else "N/A"
            rows.append(line + " " * 10 + f"{detail}\n")
        return title + header + "-" * len(header) + "\n" + "".join(rows)

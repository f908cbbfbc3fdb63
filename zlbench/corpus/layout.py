"""Where a FlagGems benchmark tree is and which of its two layouts it has.

Kept free of heavy imports: the compat plugin reads these names in every benchmark
process.
"""

from __future__ import annotations

from pathlib import Path

from ..opsdata import OpsDataError

BENCH_DIR = "benchmark"
# HEAD's wheel ships the same tree as this package.
PACKAGED_BENCH_DIR = "flaggems_benchmark"
BENCH_DIRS = (BENCH_DIR, PACKAGED_BENCH_DIR)
# The shape file every FlagGems tree carries beside its tests.
UPSTREAM_SHAPES = "core_shapes.yaml"
# Modules defining the Benchmark base class, in either layout and the packaged tree.
BENCHMARK_BASE_MODULES = (f"{BENCH_DIR}.base", f"{BENCH_DIR}.performance_utils", f"{PACKAGED_BENCH_DIR}.base")


class TreeError(OpsDataError):
    """A path that is not a FlagGems benchmark tree."""


def bench_dir_name(root: Path) -> str:
    for name in BENCH_DIRS:
        if (Path(root) / name).is_dir():
            return name
    raise TreeError(
        f"{root} has no {BENCH_DIR}/ (or {PACKAGED_BENCH_DIR}/): pass the "
        f"checkout root, the parent of {BENCH_DIR}/"
    )


def upstream_shape_file(root: Path) -> Path:
    """``<root>/<benchmark dir>/core_shapes.yaml`` (benchmark/ when the tree has neither)."""
    try:
        name = bench_dir_name(root)
    except TreeError:
        name = BENCH_DIR
    return Path(root) / name / UPSTREAM_SHAPES


def detect_layout(root: Path) -> str:
    """``head`` (benchmark/base.py) or ``v5.0.2`` (benchmark/performance_utils.py)."""
    bench = Path(root) / bench_dir_name(Path(root))
    if (bench / "base.py").is_file():
        return "head"
    if (bench / "performance_utils.py").is_file():
        return "v5.0.2"
    raise TreeError(
        f"{bench} has neither base.py (HEAD layout) nor performance_utils.py "
        "(v5.0.2 layout); is it a FlagGems benchmark tree?"
    )

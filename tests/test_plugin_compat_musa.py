"""compat_musa's copy of the benchmark dir names stays in step with ops.tree."""

from zlbench.ops import tree
from zlbench.plugins import compat_musa


def test_bench_dirs_match_the_tree_scanner():
    assert compat_musa.BENCH_DIRS == (tree.BENCH_DIR, tree.PACKAGED_BENCH_DIR)

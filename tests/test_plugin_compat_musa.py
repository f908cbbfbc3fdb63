"""compat_musa reads the benchmark dir names from corpus.layout, the tree scanner's own."""

from zlbench.corpus import layout as tree
from zlbench.plugins import compat_musa


def test_bench_dirs_match_the_tree_scanner():
    assert compat_musa.BENCH_DIRS == (tree.BENCH_DIR, tree.PACKAGED_BENCH_DIR)

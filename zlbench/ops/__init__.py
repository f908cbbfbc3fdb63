"""Operator data for batch runs: inventories, curated shape sets, the dismiss list.

The scan reads a FlagGems benchmark tree by AST only: this package never imports torch,
triton or flag_gems. ``pytest --collect-only`` verification runs in a subprocess.
"""

"""A FlagGems checkout (FLAGGEMS_DIR), or the installed ``flaggems_benchmark`` package.

FlagGems' pytest.ini has ``pythonpath = src``, so a checkout runs its own
``src/flag_gems``; we also put src/ on PYTHONPATH so that plugins loaded before the
ini is read import the same flag_gems.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import List, Optional

from ..corpus.inventory import checkout_commit
from ..corpus.layout import TreeError, bench_dir_name
from ..corpus.resolve import CorpusListing, ResolveError, Target, list_ops, read_corpus, resolve_node
from ..safe_read import describe_error, resolve_path


def installed_benchmark_root() -> Optional[Path]:
    """Root of an installed flaggems_benchmark package, found without importing it."""
    spec = importlib.util.find_spec("flaggems_benchmark")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0]).parent


class FlagGemsProvider:
    name = "flaggems"

    def __init__(self, flaggems_dir: Optional[str]):
        if flaggems_dir:
            try:
                self.root = resolve_path(flaggems_dir)
            except OSError as e:
                raise ResolveError(
                    "flaggems_dir", Path(flaggems_dir), f"FLAGGEMS_DIR {flaggems_dir}: {describe_error(e)}"
                ) from None
            if not self.root.is_dir():
                raise ResolveError(
                    "flaggems_dir", self.root, f"FLAGGEMS_DIR {flaggems_dir} is not a directory"
                )
            try:
                bench_dir_name(self.root)
            except TreeError:
                raise ResolveError(
                    "flaggems_dir",
                    self.root / "benchmark",
                    f"{self.root} has no benchmark/: FLAGGEMS_DIR must be the checkout root",
                ) from None
        else:
            root = installed_benchmark_root()
            if root is None:
                raise ResolveError(
                    "flaggems_dir",
                    Path("."),
                    "no FlagGems: give --flaggems-dir (FLAGGEMS_DIR) or install flaggems_benchmark",
                )
            self.root = root

    def resolve(self, op, op_file=None, test_node=None) -> Target:
        target = resolve_node(self.root, op, op_file, test_node)
        src = self.root / "src"
        if src.is_dir():
            old = os.environ.get("PYTHONPATH", "")
            target.env["PYTHONPATH"] = str(src) + (os.pathsep + old if old else "")
        return target

    def operators(self) -> List[str]:
        return list_ops(self.root)

    def listing(self) -> CorpusListing:
        """The operators and the benchmark files that do not parse."""
        return read_corpus(self.root)

    def versions(self) -> dict:
        commit = checkout_commit(self.root)
        return {"flaggems_commit": commit} if commit else {}

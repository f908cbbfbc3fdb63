"""The bundled sample corpus: FlagGems' benchmark format, torch operators, runs on CPU."""

from __future__ import annotations

from pathlib import Path
from typing import List

from ..corpus.resolve import CorpusListing, Target, list_ops, read_corpus, resolve_node

CORPUS_ROOT = Path(__file__).resolve().parent.parent / "sample_corpus"


class SampleProvider:
    name = "sample"

    def __init__(self, root: Path = CORPUS_ROOT):
        self.root = root

    def resolve(self, op, op_file=None, test_node=None) -> Target:
        return resolve_node(self.root, op, op_file, test_node)

    def operators(self) -> List[str]:
        return list_ops(self.root)

    def listing(self) -> CorpusListing:
        """The operators and the benchmark files that do not parse."""
        return read_corpus(self.root)

    def versions(self) -> dict:
        return {"corpus": "zlbench-sample"}

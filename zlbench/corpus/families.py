"""Operator families for summary's and the report's tables and plots.

Where the corpus the batch ran is a FlagGems checkout with conf/operators.yaml, an
operator's family is its ``kind`` there (Math, NeuralNetwork, Tensor, LinearAlg, BLAS,
...: the names FlagGems' own runner and tools use). Otherwise it is the Benchmark class
its test builds on (UnaryPointwise, BinaryPointwise, Blas, Norm, Reduction, Generic,
...), read from the corpus when it is on this machine (an AST scan, no import), else from
the curated inventory in ops/inventory/. The page says which; operators found in none
are drawn as "other".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence

OTHER = "other"
KIND, CLASS_SCAN, INVENTORY = "kind", "class scan", "inventory"
BASE = "Benchmark"
# Inventory file by the corpus layout run_identity.json records.
INVENTORIES = {"head": "flaggems", "v5.0.2": "flaggems-v5.0.2"}


@dataclass
class Families:
    of: Dict[str, str] = field(default_factory=dict)
    source: str = "none found"
    # Where the names came from, in one word the history database records: "kind",
    # "class scan" or "inventory" ("" when none was found).
    origin: str = ""

    def get(self, op: str) -> str:
        return self.of.get(op, OTHER)


def family_of_chain(chain: Sequence[str]) -> str:
    """The class right below the base Benchmark (mixins skipped), without "Benchmark"."""
    chain = list(chain)
    if chain and chain[-1] == BASE:
        chain = chain[:-1]
    chain = [c for c in chain if not c.endswith("Mixin")]
    if not chain:
        return BASE
    name = chain[-1]
    return name[: -len(BASE)] if name.endswith(BASE) and name != BASE else name


def _from_scan(root: Path) -> Dict[str, str]:
    from .scan import scan_tree

    out: Dict[str, str] = {}
    for entry in scan_tree(root):
        for op in entry.op_names + entry.marks:
            out.setdefault(op, family_of_chain(entry.class_chain))
    return out


def _from_inventory(name: str) -> Dict[str, str]:
    from .inventory import load_inventory

    out: Dict[str, str] = {}
    for op, entry in (load_inventory(name).get("ops") or {}).items():
        for test in entry.get("tests") or []:
            family = family_of_chain(test.get("class_chain") or [])
            for printed in (test.get("op_names") or []) + [op]:
                out.setdefault(printed, family)
    return out


def operator_families(
    ops: Iterable[str], corpus_roots: Iterable[Optional[str]], layouts: Iterable[Optional[str]]
) -> Families:
    """Families of ``ops``, from the first corpus root that is on this machine, else the
    inventory of the recorded layout."""
    from .operators import OperatorListError, kinds, operators_yaml

    wanted = set(ops)
    notes: List[str] = []
    roots = list(dict.fromkeys(r for r in corpus_roots if r))
    for root in roots:
        try:
            found = kinds(Path(root))
        except OperatorListError as e:  # said in the source, and the class scan decides
            notes.append(str(e))
            continue
        if wanted & set(found):
            return Families(found, f"kind in {operators_yaml(Path(root))}", KIND)
    for root in roots:
        if (Path(root) / "benchmark").is_dir():
            try:
                found = _from_scan(Path(root))
            except Exception as e:  # a corpus the scanner cannot read: say so, go on
                notes.append(f"scan of {root} failed ({type(e).__name__}: {e})")
                continue
            if wanted & set(found):
                where = f"Benchmark classes scanned in {root}"
                return Families(found, "; ".join([where, *notes]), CLASS_SCAN)
    for layout in dict.fromkeys(name for name in layouts if name):
        name = INVENTORIES.get(layout)
        if name is None:
            continue
        try:
            found = _from_inventory(name)
        except Exception as e:
            notes.append(f"inventory {name} unreadable ({type(e).__name__}: {e})")
            continue
        if wanted & set(found):
            where = f"ops/inventory/{name}.yaml (the corpus is not on this machine)"
            return Families(found, "; ".join([where, *notes]), INVENTORY)
    return Families(
        source="; ".join(notes)
        or "neither the corpus nor an inventory is available: every operator is drawn as 'other'"
    )

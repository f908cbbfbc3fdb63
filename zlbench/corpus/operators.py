"""FlagGems' operator list, ``conf/operators.yaml``: each operator's stage and kind.

The file lists every operator FlagGems ships (``id``: the benchmark's pytest mark), its
``kind`` (a list: Math, NeuralNetwork, Tensor, LinearAlg, BLAS, ...) and its ``stages``
(a list of one-key maps, ``{alpha: '5.4'}``; the last one is the current stage).
FlagGems' own runner, tools/run_tests.py, selects operators by that stage (default:
stable); zlbench selects by it only when ``--stages`` is given.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Tuple

import yaml

OPERATORS_YAML = Path("conf") / "operators.yaml"
# The stages run_tests.py accepts; "all" stands for the first three.
STAGES = ("stable", "beta", "alpha", "removed")
ALL_STAGES = ("stable", "beta", "alpha")


class OperatorListError(Exception):
    """conf/operators.yaml is missing or unreadable; the message names the file."""


@dataclass(frozen=True)
class OperatorEntry:
    id: str
    kinds: Tuple[str, ...]
    # The current stage (the last of ``stages``); None where the entry lists none.
    stage: Optional[str]
    labels: Tuple[str, ...] = ()  # aten, pointwise, KernelGen, ...

    @property
    def kind(self) -> Optional[str]:
        """The first kind, the family zlbench shows (6 of 1,052 operators list two)."""
        return self.kinds[0] if self.kinds else None


def operators_yaml(root: Path) -> Path:
    """Where a FlagGems checkout keeps its operator list (root: the parent of benchmark/)."""
    return Path(root) / OPERATORS_YAML


def has_operator_list(root: Optional[Path]) -> bool:
    return root is not None and operators_yaml(Path(root)).is_file()


def _stage(stages) -> Optional[str]:
    if not isinstance(stages, list) or not stages:
        return None
    last = stages[-1]
    if isinstance(last, dict) and last:
        return str(next(iter(last)))
    if isinstance(last, str):
        return last
    return None


def load_operators(root: Path) -> Dict[str, OperatorEntry]:
    """Every entry of ``<root>/conf/operators.yaml`` by id. Raises OperatorListError."""
    path = operators_yaml(root)
    try:
        # libyaml where the install has it: the 1,052-entry file takes 1.6 s in pure Python.
        data = yaml.load(
            path.read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        )
    except FileNotFoundError:
        raise OperatorListError(
            f"{path}: no such file; --stages needs a FlagGems checkout that has conf/operators.yaml "
            "(give --flaggems-dir, or select operators with --ops / --op-list)"
        ) from None
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise OperatorListError(f"{path}: cannot read it ({e})") from None
    ops = data.get("ops") if isinstance(data, dict) else None
    if not isinstance(ops, list):
        raise OperatorListError(f"{path}: no 'ops:' list (is it FlagGems' operator list?)")
    out: Dict[str, OperatorEntry] = {}
    for item in ops:
        if not isinstance(item, dict) or not isinstance(item.get("id"), str):
            continue
        kinds = item.get("kind") or []
        kinds = [kinds] if isinstance(kinds, str) else kinds
        labels = item.get("labels") or []
        out[item["id"]] = OperatorEntry(
            item["id"],
            tuple(str(k) for k in kinds if k),
            _stage(item.get("stages")),
            tuple(str(x) for x in labels) if isinstance(labels, list) else (),
        )
    return out


def parse_stages(text: str) -> Tuple[str, ...]:
    """``stable,beta`` -> (stable, beta); ``all`` -> stable, beta, alpha. ValueError
    names an unknown stage (run_tests.py only warns and drops it)."""
    chosen: List[str] = []
    for name in (s.strip().lower() for s in text.split(",")):
        if not name:
            continue
        if name == "all":
            chosen.extend(ALL_STAGES)
        elif name in STAGES:
            chosen.append(name)
        else:
            raise ValueError(f"unknown stage {name!r}; choose from {', '.join(STAGES)}, or all")
    if not chosen:
        raise ValueError(f"no stage given; choose from {', '.join(STAGES)}, or all")
    return tuple(dict.fromkeys(chosen))


def ops_in_stages(entries: Dict[str, OperatorEntry], stages: Iterable[str]) -> List[str]:
    """The ids whose current stage is one of ``stages``, sorted."""
    wanted = set(stages)
    return sorted(op for op, e in entries.items() if e.stage in wanted)


def kinds(root: Optional[Path]) -> Dict[str, str]:
    """Each operator's first kind, or {} where the checkout has no operator list; raises
    OperatorListError for one that cannot be read (the caller says so)."""
    if not has_operator_list(root):
        return {}
    return {op: e.kind for op, e in load_operators(Path(root)).items() if e.kind}

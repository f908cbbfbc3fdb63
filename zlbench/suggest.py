"""Did-you-mean for names a user typed: operators, stages, commands."""

from __future__ import annotations

import difflib
from typing import Iterable, List


def close_names(name: str, known: Iterable[str], n: int = 3) -> List[str]:
    """Up to ``n`` known names close to ``name``, closest first (difflib's ratio >= 0.6)."""
    return difflib.get_close_matches(name, list(dict.fromkeys(known)), n=n, cutoff=0.6)


def unknown_operator_hint(name: str, known: Iterable[str]) -> str:
    """``softmx (did you mean softmax?)``, or the bare name when nothing is close."""
    near = close_names(name, known)
    return f"{name} (did you mean {' or '.join(near)}?)" if near else name

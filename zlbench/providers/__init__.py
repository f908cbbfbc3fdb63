"""Providers: the sample corpus bundled with zlbench, or FlagGems."""

from __future__ import annotations

from ..corpus.resolve import ResolveError, Target, list_ops, resolve_node
from .flaggems import FlagGemsProvider
from .sample import SampleProvider


def make_provider(settings):
    """The provider the settings ask for (a FlagGems dir implies flaggems)."""
    if settings.provider == "flaggems":
        return FlagGemsProvider(settings.flaggems_dir)
    return SampleProvider()


__all__ = [
    "ResolveError",
    "Target",
    "make_provider",
    "list_ops",
    "resolve_node",
    "FlagGemsProvider",
    "SampleProvider",
]

"""Providers: the sample corpus bundled with zlbench, or FlagGems."""

from __future__ import annotations

from .base import ResolveError, Target, detect_layout, list_ops, resolve_node
from .flaggems import FlagGemsProvider
from .sample import SampleProvider


def make_provider(settings):
    """The provider the settings ask for (a FlagGems dir implies flaggems)."""
    if settings.provider == "flaggems":
        return FlagGemsProvider(settings.flaggems_dir)
    return SampleProvider()


__all__ = ["ResolveError", "Target", "make_provider", "detect_layout", "list_ops",
           "resolve_node", "FlagGemsProvider", "SampleProvider"]

"""Upstream's module path for the simple context."""

from mellea.stdlib.context import SimpleContext

__all__ = ["SimpleContext"]

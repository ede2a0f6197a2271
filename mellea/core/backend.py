"""Upstream's module path for the backend interface."""

from mellea.backends.base import Backend

__all__ = ["Backend"]

"""Upstream's module path of :class:`~mellea.formatters.ChatFormatter`."""

from mellea.formatters import ChatFormatter

__all__ = ["ChatFormatter"]

"""Upstream's module path of :class:`~mellea.formatters.TemplateFormatter`."""

from mellea.formatters import TemplateFormatter

__all__ = ["TemplateFormatter"]

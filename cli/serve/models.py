"""Upstream mellea programs import ``ChatMessage`` from here; it lives in ``mellea.serve``."""

from mellea.serve.messages import ChatMessage

__all__ = ["ChatMessage"]

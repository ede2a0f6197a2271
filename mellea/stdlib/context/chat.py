"""Upstream's module path for the chat context, and its rebuild helper."""

from __future__ import annotations

from typing import Any

from mellea.core.base import Span
from mellea.stdlib.context import ChatContext


def _rebuild_chat_context(
    components: list[Span],
    *,
    compactor: Any = None,
    token_context_length_limit: int | None = None,
    model_id: Any = None,
) -> ChatContext:
    """A chat context holding exactly ``components``, with these settings, built
    without running the compactor (so a compactor can call it)."""
    root = ChatContext()
    root._compactor = compactor
    root._token_context_length_limit = token_context_length_limit
    root._model_id = model_id
    return root.rebuilt(components)


__all__ = ["ChatContext", "_rebuild_chat_context"]

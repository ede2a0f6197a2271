"""Contexts: what a session keeps of earlier turns, and what it shows the model.

Both contexts are immutable linked lists (see :class:`mellea.core.base.Context`).

- :class:`SimpleContext`: each call stands alone; the model sees no history. It
  keeps only the newest few spans (enough for ``last_turn()`` and
  ``last_output()``), so a long-lived session does not grow with every request.
- :class:`ChatContext`: a conversation; the model sees the history, or its newest
  ``window_size`` spans (older ones are dropped when they fall out of the window).
"""

from __future__ import annotations

from typing import Any

from mellea.core.base import CBlock, Component, Context, ContextTurn, Span, span_text
from mellea.stdlib.components.chat import Message

SIMPLE_CONTEXT_KEEP = 3  # last_output() looks at the newest 3 spans by default


def _chain(root: Context, items: list[Span]) -> Context:
    """``root`` followed by ``items``, built as new nodes of ``root``'s class."""
    node = root
    for item in items:
        node = type(root).from_previous(node, item)
    return node


class SimpleContext(Context):
    """Each call stands alone: the model sees no earlier turns.

    Upstream keeps every turn anyway; here only the newest
    :data:`SIMPLE_CONTEXT_KEEP` spans are kept, since nothing else reads them.
    """

    def add(self, c: Span) -> SimpleContext:
        """A context holding the newest spans up to and including ``c``."""
        kept = self.as_list(SIMPLE_CONTEXT_KEEP - 1) + [c]
        return _chain(SimpleContext(), kept)  # type: ignore[return-value]

    def view_for_generation(self) -> list[Span]:
        """No history."""
        return []


class ChatContext(Context):
    """A conversation: the model sees the earlier turns.

    ``window_size`` keeps only the newest that many spans (a leading system message
    is kept as well). ``token_context_length_limit``, or the ``context_length`` of
    ``model_id`` when it is a :class:`~mellea.backends.model_ids.ModelIdentifier`,
    caps what the model is shown at about four characters a token, dropping the
    oldest spans first.
    """

    def __init__(
        self,
        *,
        window_size: int | None = None,
        token_context_length_limit: int | None = None,
        model_id: Any = None,
        compactor: Any = None,
    ) -> None:
        if compactor is not None:
            raise ValueError("ChatContext compactors are not provided here; use window_size")
        if window_size is not None and window_size < 1:
            raise ValueError("window_size must be at least 1")
        super().__init__()
        self.window_size = window_size
        self._token_context_length_limit = token_context_length_limit
        self._model_id = model_id

    @property
    def model_id(self) -> Any:
        """The model this context sizes its view for, if any."""
        return self._model_id

    def _settings(self) -> dict[str, Any]:
        return {
            "window_size": self.window_size,
            "token_context_length_limit": self._token_context_length_limit,
            "model_id": self._model_id,
        }

    def new_instance(self) -> ChatContext:
        """An empty chat context with the same settings."""
        return ChatContext(**self._settings())

    @classmethod
    def from_previous(cls, previous: Context, data: Span) -> ChatContext:
        """A node after ``previous``, keeping its window and budget settings."""
        node = super().from_previous(previous, data)
        if isinstance(previous, ChatContext):
            node.window_size = previous.window_size
            node._token_context_length_limit = previous._token_context_length_limit
            node._model_id = previous._model_id
        return node

    def add(self, c: Span) -> ChatContext:
        """A new chat context with ``c`` appended (and the window applied)."""
        node = ChatContext.from_previous(self, c)
        if self.window_size is None:
            return node
        items = node.as_list(self.window_size + 1)
        if len(items) <= self.window_size:
            return node
        history = node.as_list()
        pinned = [history[0]] if _is_system(history[0]) else []
        body = history[len(pinned) :][-self.window_size :]
        return _chain(self.new_instance(), pinned + body)  # type: ignore[return-value]

    def view_for_generation(self) -> list[Span]:
        """The history, trimmed to the token budget when there is one."""
        history = self.as_list()
        budget = self._token_context_length_limit
        if budget is None:
            budget = getattr(self._model_id, "context_length", None)
        if budget is None:
            return history
        allowed, kept = int(budget * 0.75), []
        for item in reversed(history):
            cost = max(1, len(span_text(item)) // 4)
            if cost > allowed:
                break
            kept.append(item)
            allowed -= cost
        kept.reverse()
        return kept


def _is_system(item: Any) -> bool:
    return isinstance(item, Message) and item.role == "system"


__all__ = [
    "CBlock",
    "ChatContext",
    "Component",
    "Context",
    "ContextTurn",
    "Message",
    "SimpleContext",
]

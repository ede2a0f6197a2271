"""Contexts: what a session keeps of earlier turns, and what it shows the model.

Both contexts are immutable linked lists (see :class:`mellea.core.base.Context`).

- :class:`SimpleContext`: each call stands alone; the model sees no history. It
  keeps only the newest few spans (enough for ``last_turn()`` and
  ``last_output()``), so a long-lived session does not grow with every request.
- :class:`ChatContext`: a conversation; the model sees the history, or its newest
  ``window_size`` spans (older ones are dropped when they fall out of the window;
  see :mod:`.compactor`).
"""

from __future__ import annotations

from typing import Any

from mellea.core.base import CBlock, Component, Context, ContextTurn, Span, span_text
from mellea.stdlib.components.chat import Message
from mellea.stdlib.context.compactor import (
    Compactor,
    InlineCompactor,
    LLMSummarizeCompactor,
    PinPredicate,
    ThresholdCompactor,
    WindowCompactor,
    pin_nothing,
    pin_system,
    pin_system_and_initial_user,
)

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

    ``window_size=N`` keeps the leading system messages and the newest ``N`` spans
    after them (upstream's ``WindowCompactor(size=N)``); ``compactor=`` takes such a
    compactor directly. ``token_context_length_limit``, or the ``context_length`` of
    ``model_id`` when it is a :class:`~mellea.backends.model_ids.ModelIdentifier`,
    caps what the model is shown at about four characters a token, dropping the
    oldest spans first.
    """

    def __init__(
        self,
        *,
        compactor: Any = None,
        window_size: int | None = None,
        token_context_length_limit: int | None = None,
        model_id: Any = None,
    ) -> None:
        if compactor is not None and window_size is not None:
            raise ValueError("pass either compactor or window_size, not both")
        if compactor is not None and not isinstance(compactor, InlineCompactor):
            raise TypeError(
                "ChatContext takes an InlineCompactor, such as WindowCompactor or "
                "ThresholdCompactor (wrap a model-calling compactor in a ThresholdCompactor)"
            )
        super().__init__()
        if window_size is not None:
            compactor = WindowCompactor(size=window_size)
        self._compactor = compactor
        self._token_context_length_limit = token_context_length_limit
        self._model_id = model_id

    @property
    def model_id(self) -> Any:
        """The model this context sizes its view for, if any."""
        return self._model_id

    @property
    def window_size(self) -> int | None:
        """The window a ``window_size`` (or ``WindowCompactor``) keeps, if any."""
        return getattr(self._compactor, "size", None)

    def _copy_settings(self, other: ChatContext) -> None:
        self._compactor = other._compactor
        self._token_context_length_limit = other._token_context_length_limit
        self._model_id = other._model_id

    def new_instance(self) -> ChatContext:
        """An empty chat context with the same settings."""
        root = ChatContext()
        root._copy_settings(self)
        return root

    @classmethod
    def from_previous(cls, previous: Context, data: Span) -> ChatContext:
        """A node after ``previous``, keeping its compactor and budget settings."""
        node = super().from_previous(previous, data)
        if isinstance(previous, ChatContext):
            node._copy_settings(previous)
        return node

    def rebuilt(self, items: list[Span]) -> ChatContext:
        """A context with these settings holding exactly ``items`` (no compaction)."""
        return _chain(self.new_instance(), items)  # type: ignore[return-value]

    def add(self, c: Span) -> ChatContext:
        """A new chat context with ``c`` appended, then compacted."""
        node = ChatContext.from_previous(self, c)
        return self._compactor.compact(node) if self._compactor is not None else node

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


__all__ = [
    "CBlock",
    "ChatContext",
    "Compactor",
    "Component",
    "Context",
    "ContextTurn",
    "InlineCompactor",
    "LLMSummarizeCompactor",
    "Message",
    "PinPredicate",
    "SimpleContext",
    "ThresholdCompactor",
    "WindowCompactor",
    "pin_nothing",
    "pin_system",
    "pin_system_and_initial_user",
]

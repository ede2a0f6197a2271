"""Formatters: how context spans become the chat messages a backend sends.

Upstream renders components through Jinja templates chosen per model. Here every
backend speaks chat messages and the model's own chat template (applied by the
local engine or the remote server) does the rest, so one formatter serves all:
:class:`TemplateFormatter` and :class:`ChatFormatter` are the same renderer under
upstream's two names.
"""

from __future__ import annotations

from typing import Any

from mellea.core.base import Component, Span, span_text
from mellea.core.thunk import ModelOutputThunk


class ChatFormatter:
    """Renders spans as text (:meth:`print`) and as chat messages (:meth:`to_chat_messages`)."""

    def __init__(self, model_id: Any = None, **kwargs: Any) -> None:
        """``model_id`` and the template options are accepted for upstream compatibility."""
        del kwargs
        self.model_id = model_id

    def print(self, c: Span) -> str:
        """The text a span shows the model."""
        return span_text(c)

    def to_chat_messages(self, cs: list[Span]) -> list[Any]:
        """The spans as :class:`~mellea.stdlib.components.chat.Message` objects."""
        from mellea.stdlib.components.chat import Message

        messages = []
        for item in cs:
            if isinstance(item, Message):
                messages.append(item)
            elif isinstance(item, ModelOutputThunk) and item.tool_calls:
                # the calls go with the reply, so the tool messages after it answer them
                calls = [
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.name, "arguments": c.arguments_json},
                    }
                    for c in item.tool_calls
                ]
                messages.append(Message("assistant", item.value or "", tool_calls=calls))
            else:
                messages.append(Message(span_role(item), self.print(item)))
        return messages


class TemplateFormatter(ChatFormatter):
    """Upstream's template formatter; renders like :class:`ChatFormatter` (see module doc)."""

    def __init__(
        self, model_id: Any = None, *, template_path: str = "", use_template_cache: bool = True
    ) -> None:
        """``template_path`` and ``use_template_cache`` are accepted and have no effect."""
        super().__init__(model_id)
        self._template_path = template_path
        self._use_template_cache = use_template_cache


Formatter = ChatFormatter


def span_role(item: Any) -> str:
    """The chat role a span takes: its own, ``assistant`` for model output, else ``user``."""
    role = getattr(item, "role", None)
    if isinstance(role, str) and isinstance(item, Component):
        return role
    return "assistant" if isinstance(item, ModelOutputThunk) else "user"


def chat_dicts(cs: list[Span]) -> list[dict[str, Any]]:
    """The spans as OpenAI-style chat message dicts (what backends take)."""
    result = []
    for message in ChatFormatter().to_chat_messages(cs):
        result.append(message.as_dict())
    return result


__all__ = ["ChatFormatter", "Formatter", "TemplateFormatter", "chat_dicts", "span_role"]

"""Between the two ways a backend is called: chat messages, and upstream's ``(action, ctx)``.

Our sessions render a call into OpenAI-style chat messages and hand them to
``Backend.generate``. Upstream's backends are handed the action and the context
instead (``_generate_from_context``). These two functions translate each way, so a
backend written either way serves either kind of caller.
"""

from __future__ import annotations

from typing import Any

from mellea.core.base import CBlock, Component, Context, span_text
from mellea.formatters import chat_dicts
from mellea.stdlib.components.chat import Message
from mellea.stdlib.context import ChatContext


def messages_for(action: Component[Any] | CBlock, ctx: Context | None) -> list[dict[str, Any]]:
    """The chat messages for ``action`` after what ``ctx`` shows the model (``None``: alone)."""
    messages = chat_dicts(ctx.view_for_generation() or []) if ctx is not None else []
    messages.append({"role": getattr(action, "role", "user"), "content": span_text(action)})
    return messages


def context_call(messages: list[dict[str, Any]]) -> tuple[Message, ChatContext]:
    """``messages`` as upstream's call: the last one as the action, the rest as a chat context.

    The context holds :class:`Message` s, oldest first, as a ``ChatContext`` does after
    ``session.chat``; tool calls and tool-call ids ride along on their messages.
    """
    if not messages:
        raise ValueError("a generation needs at least one message")
    turns = [_message(m) for m in messages]
    ctx: Context = ChatContext()
    for turn in turns[:-1]:
        ctx = ctx.add(turn)
    return turns[-1], ctx  # type: ignore[return-value]


def _message(message: dict[str, Any]) -> Message:
    content = message.get("content")
    if isinstance(content, list):  # content parts: the text parts, in order
        content = "".join(p.get("text") or "" for p in content if isinstance(p, dict))
    return Message(
        message.get("role", "user"),
        content or "",
        tool_calls=message.get("tool_calls"),
        tool_call_id=message.get("tool_call_id"),
    )

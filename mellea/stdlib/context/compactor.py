"""Compactors: what a ``ChatContext`` drops as it grows (upstream's window compactor)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from mellea.core.base import CBlock, Context, Span
from mellea.core.thunk import ModelOutputThunk

if TYPE_CHECKING:
    from mellea.stdlib.context import ChatContext

T = TypeVar("T", bound=Context)
log = logging.getLogger("mellea")

PinPredicate = Callable[[list[Span]], int]
"""Given the history, the length of its leading part that is never dropped."""


def pin_nothing(components: list[Span]) -> int:
    """Pin nothing: every span may be dropped."""
    del components
    return 0


def pin_system(components: list[Span]) -> int:
    """Pin the system messages at the start of the history."""
    for i, item in enumerate(components):
        if getattr(item, "role", None) != "system":
            return i
    return len(components)


def pin_system_and_initial_user(components: list[Span]) -> int:
    """Pin the leading system messages and the first user message after them."""
    end = pin_system(components)
    if end < len(components) and getattr(components[end], "role", None) == "user":
        return end + 1
    return end


class Compactor(Protocol):
    """Anything with ``compact(ctx, *, backend=None)`` returning a smaller copy of ``ctx``
    (the input is left unchanged)."""

    def compact(self, ctx: T, *, backend: Any = None) -> T:
        """A compacted copy of ``ctx``."""
        ...


class InlineCompactor:
    """A compactor cheap enough for ``ChatContext`` to run on every ``add`` (no model calls)."""

    def compact(self, ctx: ChatContext, *, backend: Any = None) -> ChatContext:
        """The context, compacted."""
        raise NotImplementedError


class WindowCompactor(InlineCompactor):
    """Keep the pinned prefix and the newest ``size`` spans after it."""

    def __init__(self, *, size: int, pin_predicate: PinPredicate = pin_system) -> None:
        if size < 0:
            raise ValueError("WindowCompactor size must not be negative")
        self.size = size
        self.pin_predicate = pin_predicate

    def compact(self, ctx: ChatContext, *, backend: Any = None) -> ChatContext:
        """``ctx`` unchanged if it fits, else rebuilt from the prefix and the newest spans."""
        del backend
        history = ctx.as_list()
        pinned = self.pin_predicate(history)
        body = history[pinned:]
        if len(body) <= self.size:
            return ctx
        kept = history[:pinned] + (body[-self.size :] if self.size else [])
        return ctx.rebuilt(kept)


def last_usage_tokens(ctx: Context) -> int | None:
    """The conversation's size in tokens after its newest model reply with usage:
    ``total_tokens`` (else prompt + completion), ``None`` before any such reply."""
    for item in reversed(ctx.as_list()):
        usage = item.usage if isinstance(item, ModelOutputThunk) else None
        if usage:
            total = usage.get("total_tokens")
            if total is None:
                total = (usage.get("prompt_tokens") or 0) + (usage.get("completion_tokens") or 0)
            return total if total and total > 0 else None
    return None


class ThresholdCompactor(InlineCompactor):
    """Runs ``inner`` only once the conversation has grown past ``threshold`` tokens
    (read from the newest reply's usage; a threshold of 0 or less never fires)."""

    def __init__(self, inner: Compactor, *, threshold: int) -> None:
        self.inner = inner
        self.threshold = threshold

    def compact(self, ctx: ChatContext, *, backend: Any = None) -> ChatContext:
        """``inner.compact(ctx)`` past the threshold, else ``ctx``."""
        if self.threshold <= 0:
            return ctx
        tokens = last_usage_tokens(ctx)
        if tokens is None or tokens <= self.threshold:
            return ctx
        return self.inner.compact(ctx, backend=backend)


DEFAULT_SUMMARY_PROMPT = (
    "Summarize the conversation below so that it can continue from the summary alone. "
    "Keep every specific fact, number, name, URL and data value; say which tools were "
    "called and what they returned; note decisions, findings and open questions.\n\n"
    "Conversation:\n{conversation}"
)


def _line(item: Span) -> str | None:
    """One span as a line of the text a summarizer reads."""
    from mellea.stdlib.components.chat import Message, ToolMessage

    if isinstance(item, ToolMessage):
        return f"tool ({item.name}): {item.content}"
    if isinstance(item, Message):
        extras = []
        if item.images:
            extras.append(f"[{len(item.images)} image(s) attached]")
        if item._docs:
            extras.append(f"[{len(item._docs)} document(s) attached]")
        return " ".join([f"{item.role}: {item.content}", *extras])
    if isinstance(item, ModelOutputThunk):
        if item.value:
            return f"assistant: {item.value}"
        if item.tool_calls:
            calls = ", ".join(f"{c.name}({dict(c.args)})" for c in item.tool_calls)
            return f"assistant called tools: {calls}"
        return None
    if isinstance(item, CBlock):
        return str(item.value)
    content = getattr(item, "content", None)
    return (
        f"<{type(item).__name__}: {content}>" if content is not None else f"<{type(item).__name__}>"
    )


def _run_blocking(coro: Any) -> Any:
    """Run ``coro`` to completion from sync code, even from inside an event loop."""
    import asyncio
    import concurrent.futures

    from mellea.core import _sync

    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        return _sync.run_sync(coro)
    if running is not _sync._loop:
        return _sync.run_sync(coro)  # blocks this loop until the summary is back
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


class LLMSummarizeCompactor:
    """Replaces all but the newest ``keep_n`` spans after the pinned prefix with one
    summary message written by the model.

    Not an :class:`InlineCompactor` (it calls the model): use it through ``react``'s
    ``compactor=``, inside a :class:`ThresholdCompactor`, or call ``compact`` between
    turns. If the model call fails, the context is returned unchanged (and a warning
    logged). ``prompt_template`` must hold ``{conversation}``.
    """

    def __init__(
        self,
        *,
        default_backend: Any,
        keep_n: int = 5,
        pin_predicate: PinPredicate = pin_nothing,
        prompt_template: str | None = None,
        model_options: dict[str, Any] | None = None,
    ) -> None:
        if keep_n < 0:
            raise ValueError("LLMSummarizeCompactor keep_n must not be negative")
        template = prompt_template if prompt_template is not None else DEFAULT_SUMMARY_PROMPT
        if "{conversation}" not in template:
            raise ValueError("LLMSummarizeCompactor prompt_template must contain '{conversation}'")
        self.default_backend = default_backend
        self.keep_n = keep_n
        self.pin_predicate = pin_predicate
        self.prompt_template = template
        self.model_options = model_options

    def compact(self, ctx: ChatContext, *, backend: Any = None) -> ChatContext:
        """The prefix, a ``[CONTEXT SUMMARY]`` user message, then the newest ``keep_n`` spans."""
        history = ctx.as_list()
        pinned = self.pin_predicate(history)
        if len(history) - pinned <= self.keep_n:
            return ctx
        try:
            return _run_blocking(
                self._compact(ctx, backend or self.default_backend, history, pinned)
            )
        except (TypeError, AttributeError, AssertionError, LookupError):
            raise
        except Exception as exc:
            log.warning("LLMSummarizeCompactor: the summary call failed (%s); context kept", exc)
            return ctx

    async def _compact(
        self, ctx: ChatContext, backend: Any, history: list[Span], pinned: int
    ) -> ChatContext:
        from mellea.stdlib.components.chat import Message

        body = history[pinned:]
        old = body[: len(body) - self.keep_n]
        recent = body[len(body) - self.keep_n :]
        text = "\n".join(line for item in old if (line := _line(item)) is not None)
        prompt = self.prompt_template.format(conversation=text)
        thunk = await backend.generate(
            [{"role": "user", "content": prompt}], model_options=dict(self.model_options or {})
        )
        summary = await thunk.avalue()
        message = Message("user", f"[CONTEXT SUMMARY]\n{summary}")
        return ctx.rebuilt([*history[:pinned], message, *recent])


__all__ = [
    "Compactor",
    "InlineCompactor",
    "LLMSummarizeCompactor",
    "PinPredicate",
    "ThresholdCompactor",
    "WindowCompactor",
    "pin_nothing",
    "pin_system",
    "pin_system_and_initial_user",
]

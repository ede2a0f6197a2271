"""Compactors: what a ``ChatContext`` drops as it grows (upstream's window compactor)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mellea.core.base import Span

if TYPE_CHECKING:
    from mellea.stdlib.context import ChatContext

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


class InlineCompactor:
    """A compactor ``ChatContext`` runs on every ``add``."""

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


__all__ = [
    "InlineCompactor",
    "PinPredicate",
    "WindowCompactor",
    "pin_nothing",
    "pin_system",
    "pin_system_and_initial_user",
]

"""``truncation: "auto"``: drop the oldest input items until the conversation fits.

Only the backend knows the model's context and the prompt's length, so the fit is
learned by trying: a program call that fails with ``context_length_exceeded`` before
anything was generated is made again with the oldest turns left out (twice as many
each time, so a long history costs a few tries, not one per item). Instructions
(leading system messages) and the newest message always stay.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

from mellea.core.errors import RequestError
from mellea.serve.errors import OpenAIError
from mellea.serve.options import ServeArguments

CONTEXT_LENGTH_EXCEEDED = "context_length_exceeded"


async def call_fitting(
    call: Callable[[ServeArguments], Awaitable[Any]], args: ServeArguments
) -> Any:
    """``call(args)``, again with fewer of the oldest messages while the prompt is too long.

    Raises the last context-length error when even the newest message alone does not fit.
    """
    dropped = 0
    while True:
        try:
            return await call(args)
        except (RequestError, OpenAIError) as exc:
            if getattr(exc, "code", None) != CONTEXT_LENGTH_EXCEEDED:
                raise
            dropped = max(1, 2 * dropped)
            shorter = without_oldest(args.messages, dropped)
            if shorter is None:
                raise
            args = dataclasses.replace(args, messages=shorter)


def without_oldest(messages: list[Any], count: int) -> list[Any] | None:
    """``messages`` without the ``count`` oldest turns after the leading system messages
    (and without tool results left first, whose call went with them); None when
    nothing but the newest message would be left to drop."""
    head = 0
    while head < len(messages) and messages[head].role in ("system", "developer"):
        head += 1
    turns = messages[head:]
    if len(turns) <= 1:
        return None
    kept = turns[min(count, len(turns) - 1) :]
    while len(kept) > 1 and kept[0].role == "tool":
        kept = kept[1:]
    return [*messages[:head], *kept]


def call_truncating(
    call: Callable[[ServeArguments], Awaitable[Any]],
    args: ServeArguments,
    truncation: str | None,
) -> Awaitable[Any]:
    """``call(args)`` as the request's ``truncation`` asks: ``"auto"`` drops the oldest
    messages until the prompt fits (:func:`call_fitting`); anything else calls once."""
    return call_fitting(call, args) if truncation == "auto" else call(args)

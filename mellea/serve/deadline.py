"""A request's deadline: every wait of a reply ends when it passes."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from typing import TypeVar

from mellea.serve.errors import StreamTimeoutError

T = TypeVar("T")


async def before(deadline: float | None, awaitable: Awaitable[T]) -> T:
    """Await ``awaitable``, cancelling it if the ``time.monotonic()`` deadline passes
    (then :class:`mellea.serve.errors.StreamTimeoutError`)."""
    if deadline is None:
        return await awaitable
    remaining = deadline - time.monotonic()
    try:
        return await asyncio.wait_for(awaitable, timeout=max(remaining, 0.0))
    except TimeoutError:
        raise StreamTimeoutError from None

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
    (then :class:`mellea.serve.errors.StreamTimeoutError`).

    The wait runs in the caller's task (``asyncio.timeout``), not in a task of its own as
    ``asyncio.wait_for`` runs it on Python 3.11: there, a cancel that arrived as the
    awaited result did (a client leaving while tokens stream in) was dropped and the
    reply read on to its end, keeping the engine generating for nobody.
    """
    if deadline is None:
        return await awaitable
    try:
        async with asyncio.timeout(max(deadline - time.monotonic(), 0.0)):
            return await awaitable
    except TimeoutError:
        raise StreamTimeoutError from None

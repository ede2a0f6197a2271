"""Closing what a reply left running: the one place a stream, a program call or a thunk
is stopped.

Every close is shielded from cancellation: a client that leaves cancels the task
sending its reply, and the cleanup (aborting a generation, freeing its cache) must
still run to its end.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any

from mellea.core.thunk import ModelOutputThunk


async def close_stream(stream: AsyncIterator[Any]) -> None:
    """Close ``stream`` (an async generator, or anything with ``aclose``). A generator
    that has already ended needs nothing, and so costs no task."""
    closer = getattr(stream, "aclose", None)
    if closer is None or getattr(stream, "ag_frame", True) is None:
        return
    await asyncio.shield(closer())


async def close_source(source: Any, pending: asyncio.Future[Any] | None = None) -> None:
    """Stop one choice: a program call still running is cancelled, a thunk still
    generating is closed (which aborts its generation).

    ``source`` is the thunk or the program call (a future). ``pending`` is a read of the
    thunk that was cancelled and may still be unwinding: the thunk is closed after it.
    """
    thunk = _thunk_of(source)
    if thunk is not None and not thunk.is_computed():
        await asyncio.shield(_close_thunk(thunk, pending))


async def stop_sources(sources: Sequence[Any]) -> None:
    """:func:`close_source` for every choice of a request."""
    for source in sources:
        if isinstance(source, asyncio.Future):
            source.cancel()
    for source in sources:
        await close_source(source)


def _thunk_of(source: Any) -> ModelOutputThunk | None:
    if isinstance(source, ModelOutputThunk):
        return source
    if isinstance(source, asyncio.Future):
        if not source.done():
            source.cancel()  # the reply is no longer wanted
        elif not source.cancelled() and source.exception() is None:
            result = source.result()
            return result if isinstance(result, ModelOutputThunk) else None
    return None


async def _close_thunk(thunk: ModelOutputThunk, pending: asyncio.Future[Any] | None) -> None:
    # Closing the thunk while a cancelled read of it unwinds would find its generator
    # still running.
    if pending is not None:
        await asyncio.wait({pending})
    await thunk.aclose()

"""Cancel a non-streamed reply's work when its client leaves."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import TypeVar

from starlette.requests import Request

log = logging.getLogger("mellea.serve")
T = TypeVar("T")

DISCONNECT_POLL_SECONDS = 0.25


async def unless_disconnected(request: Request, work: Awaitable[T]) -> T | None:
    """Await ``work`` for a non-streamed reply; ``None`` if the client left first.

    Leaving cancels ``work``, which closes the generation, so nobody's reply keeps
    the engine busy.
    """
    task = asyncio.ensure_future(work)

    async def gone() -> None:
        while not await request.is_disconnected():
            await asyncio.sleep(DISCONNECT_POLL_SECONDS)

    watcher = asyncio.ensure_future(gone())
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
    if task.done():
        return task.result()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    log.info("client left before its reply was ready; generation cancelled")
    return None

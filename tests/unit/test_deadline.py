"""``before``: a wait bounded by the request's deadline that never drops a cancel."""

from __future__ import annotations

import asyncio
import time

import pytest

from mellea.serve.deadline import before
from mellea.serve.errors import StreamTimeoutError


@pytest.mark.parametrize("turns", range(6))
async def test_a_cancel_that_meets_the_result_is_kept(turns: int):
    """The cancel lands ``turns`` loop turns after the awaited value arrived (a token
    streaming in as the client leaves): the reply must end cancelled, not read on."""
    arrived = asyncio.get_running_loop().create_future()
    more_tokens = asyncio.Event()  # never set: a reply that read on waits here

    async def token() -> int:
        return await arrived

    async def reply() -> None:
        await before(time.monotonic() + 60, token())
        await more_tokens.wait()

    task = asyncio.ensure_future(reply())
    for _ in range(2):
        await asyncio.sleep(0)
    arrived.set_result(1)
    for _ in range(turns):
        await asyncio.sleep(0)
    task.cancel()
    await asyncio.wait({task}, timeout=5)
    assert task.cancelled(), "the cancel was dropped: the reply read on"


async def test_past_the_deadline_is_a_stream_timeout():
    never = asyncio.get_running_loop().create_future()
    with pytest.raises(StreamTimeoutError):
        await before(time.monotonic() + 0.01, never)
    assert never.cancelled()


async def test_no_deadline_awaits_plainly():
    assert await before(None, asyncio.sleep(0, result=5)) == 5

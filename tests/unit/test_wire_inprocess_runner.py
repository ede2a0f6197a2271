"""The request runner on its own: a client leaving, the deadline, a fast failure among
choices, with no server around it (``mellea.serve.request_runner``)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from mellea.core import GenerationChunk, ModelOutputThunk
from mellea.serve.errors import OpenAIError
from mellea.serve.request_runner import (
    CLIENT_LEFT,
    Choices,
    Frames,
    Reply,
    RequestRunner,
    RunLimits,
    ThunkSource,
)


class Texts(Reply[list[str]]):
    """A reply that is every choice's whole text."""

    def __init__(self, stream: bool = False) -> None:
        self.stream = stream

    async def whole(self, choices: Choices) -> list[str]:
        async def texts(thunks: list[ModelOutputThunk]) -> list[str]:
            return [await thunk.avalue() for thunk in thunks]

        return await choices.build(texts)

    def events(self, choices: Choices, sources: list[ThunkSource]) -> Frames:
        raise AssertionError("not streamed here")


def endless(closed: asyncio.Event) -> ModelOutputThunk:
    async def chunks() -> AsyncIterator[GenerationChunk]:
        try:
            while True:
                await asyncio.sleep(0.01)
                yield GenerationChunk(text="tick ")
        finally:
            closed.set()

    return ModelOutputThunk.from_stream(chunks())


async def returns(thunk: ModelOutputThunk) -> ModelOutputThunk:
    return thunk


async def never_left() -> bool:
    return False


async def test_whole_reply_of_every_choice():
    runner = RequestRunner(RunLimits())
    calls = [returns(ModelOutputThunk(value=text)) for text in ("a", "b")]
    assert await runner.run(calls, Texts(), never_left) == ["a", "b"]


async def test_a_client_leaving_cancels_the_generation(monkeypatch):
    monkeypatch.setattr("mellea.serve.request_runner.DISCONNECT_POLL_SECONDS", 0.01)
    closed = asyncio.Event()
    checks = 0

    async def leaves_soon() -> bool:
        nonlocal checks
        checks += 1
        return checks > 5

    runner = RequestRunner(RunLimits())
    reply = await runner.run([returns(endless(closed))], Texts(), leaves_soon)
    assert reply.status_code == CLIENT_LEFT
    await asyncio.wait_for(closed.wait(), 2)


async def test_the_deadline_is_a_504_and_stops_the_generation():
    closed = asyncio.Event()
    runner = RequestRunner(RunLimits(request_timeout=0.1))
    with pytest.raises(OpenAIError) as info:
        await runner.run([returns(endless(closed))], Texts(), never_left)
    assert info.value.status_code == 504
    await asyncio.wait_for(closed.wait(), 2)


async def test_a_fast_failure_before_a_stream_is_raised_and_stops_the_other_choices():
    other = endless(asyncio.Event())

    async def fails() -> ModelOutputThunk:
        raise ValueError("SECRET")

    runner = RequestRunner(RunLimits(first_result_wait=0.5))
    with pytest.raises(OpenAIError) as info:
        await runner.run([returns(other), fails()], Texts(stream=True), never_left)
    assert info.value.status_code == 500 and "SECRET" not in info.value.message
    assert other.is_computed() and other.finish_reason == "abort"  # closed, not left running


@pytest.mark.parametrize("stream", [False, True])
async def test_a_cancelled_request_stops_its_programs(stream):
    started, stopped = asyncio.Event(), asyncio.Event()

    async def slow() -> ModelOutputThunk:
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            stopped.set()
            raise
        raise AssertionError("not cancelled")

    runner = RequestRunner(RunLimits(first_result_wait=10))
    request = asyncio.ensure_future(runner.run([slow()], Texts(stream=stream), never_left))
    await asyncio.wait_for(started.wait(), 2)
    request.cancel()  # as when the server stops mid-request
    with pytest.raises(asyncio.CancelledError):
        await request
    await asyncio.wait_for(stopped.wait(), 2)

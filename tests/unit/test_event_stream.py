"""The stream response (cli/serve/event_stream.py) driven by hand over raw ASGI messages."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from cli.serve.event_stream import EventStreamResponse
from mellea.serve.frames import Closing
from tests.waiting import until

SCOPE = {"type": "http", "method": "GET", "path": "/", "headers": []}


class Client:
    """An ASGI peer: records what is sent; ``leave()`` makes ``receive`` say disconnect."""

    def __init__(self) -> None:
        self.messages: list[dict] = []
        self.gone = asyncio.Event()

    async def receive(self) -> dict:
        await self.gone.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: dict) -> None:
        self.messages.append(message)

    def leave(self) -> None:
        self.gone.set()

    @property
    def body(self) -> bytes:
        return b"".join(m.get("body", b"") for m in self.messages[1:])


async def test_frames_are_sent_in_order_and_the_stream_ends():
    async def events() -> AsyncIterator[dict[str, str] | list[dict[str, str]]]:
        yield {"data": "one"}
        yield {"event": "named", "data": "two\nlines"}
        yield [{"data": "three"}, {"data": "[DONE]"}]  # a list: one write

    client = Client()
    await EventStreamResponse(events())(SCOPE, client.receive, client.send)
    start = client.messages[0]
    assert start["type"] == "http.response.start" and start["status"] == 200
    headers = dict(start["headers"])
    assert headers[b"content-type"].startswith(b"text/event-stream")
    assert b"content-length" not in headers and headers[b"cache-control"] == b"no-store"
    assert client.body == (
        b"data: one\r\n\r\nevent: named\r\ndata: two\r\ndata: lines\r\n\r\n"
        b"data: three\r\n\r\ndata: [DONE]\r\n\r\n"
    )
    assert client.messages[3]["body"] == b"data: three\r\n\r\ndata: [DONE]\r\n\r\n"
    assert client.messages[-1] == {"type": "http.response.body", "body": b"", "more_body": False}


async def test_closing_frames_end_the_body_in_their_write_and_nothing_follows():
    async def events() -> AsyncIterator[dict[str, str] | list[dict[str, str]]]:
        yield {"data": "one"}
        yield Closing([{"data": "two"}, {"data": "[DONE]"}])
        yield {"data": "after the end"}

    client = Client()
    await EventStreamResponse(events())(SCOPE, client.receive, client.send)
    assert [m.get("more_body") for m in client.messages] == [None, True, False]
    assert client.messages[-1]["body"] == b"data: two\r\n\r\ndata: [DONE]\r\n\r\n"


async def test_an_idle_stream_sends_keepalive_comments():
    async def events() -> AsyncIterator[dict[str, str]]:
        await asyncio.sleep(0.35)
        yield {"data": "late"}

    client = Client()
    await EventStreamResponse(events(), keepalive_seconds=0.1)(SCOPE, client.receive, client.send)
    assert client.body.count(b": ping") >= 2
    assert client.body.endswith(b"data: late\r\n\r\n")
    quiet = Client()

    async def slow() -> AsyncIterator[dict[str, str]]:
        await asyncio.sleep(0.2)
        yield {"data": "x"}

    await EventStreamResponse(slow(), keepalive_seconds=0)(SCOPE, quiet.receive, quiet.send)
    assert b"ping" not in quiet.body  # 0: no keep-alives


async def test_a_client_that_leaves_closes_the_events_and_the_call_returns():
    closed = asyncio.Event()

    async def events() -> AsyncIterator[dict[str, str]]:
        try:
            yield {"data": "first"}
            await asyncio.sleep(30)  # a generation that would go on
            yield {"data": "never"}
        finally:
            closed.set()

    client = Client()
    streaming = asyncio.create_task(
        EventStreamResponse(events())(SCOPE, client.receive, client.send)
    )
    await until(lambda: b"first" in client.body, "the first event sent")
    client.leave()
    await asyncio.wait_for(streaming, 2)  # returns, without raising CancelledError
    assert closed.is_set() and b"never" not in client.body
    assert not streaming.cancelled() and streaming.cancelling() == 0


async def test_a_cancel_from_outside_still_cancels():
    started = asyncio.Event()

    async def events() -> AsyncIterator[dict[str, str]]:
        started.set()
        await asyncio.sleep(30)
        yield {"data": "never"}

    client = Client()
    streaming = asyncio.create_task(
        EventStreamResponse(events())(SCOPE, client.receive, client.send)
    )
    await asyncio.wait_for(started.wait(), 2)
    streaming.cancel()  # e.g. the server shutting down
    await asyncio.wait([streaming], timeout=2)
    assert streaming.cancelled()


async def _items(events: AsyncIterator[object]) -> list[object]:
    return [item async for item in events]


async def test_one_choice_sends_its_finish_usage_and_done_with_the_end_of_the_body():
    from mellea.core.thunk import ModelOutputThunk
    from mellea.serve.chat.reply import ChatReply, ChatReplyContext
    from mellea.serve.request_runner import Choices

    def events(n: int) -> AsyncIterator[object]:
        context = ChatReplyContext(id="chatcmpl-1", created=0, model="m", include_usage=True)
        return ChatReply(context, [None] * n).events(
            Choices([], [], None, None), [ModelOutputThunk("hello") for _ in range(n)]
        )

    role, content, last = await _items(events(1))
    assert '"role":"assistant"' in role["data"] and '"content":"hello"' in content["data"]
    assert isinstance(last, Closing)
    assert ['"finish_reason":"stop"' in f["data"] for f in last] == [True, False, False]
    assert '"usage":{' in last[1]["data"] and last[2] == {"data": "[DONE]"}

    # Two choices: a finish is not the end, so each goes out as it comes.
    *chunks, last = await _items(events(2))
    assert sum('"finish_reason":"stop"' in c["data"] for c in chunks) == 2
    assert isinstance(last, Closing) and len(last) == 2

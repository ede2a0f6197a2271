"""The HTTP side of a reply: Server-Sent Events written to the client as they come, and
the request runner's results as responses.

Frames are encoded by ``sse_starlette`` (:class:`ServerSentEvent`); this response
sends them with one helper task per stream, which waits for the client to leave and
writes ``: ping`` comments while the stream is idle. ``sse_starlette``'s own response
runs four tasks in an anyio task group per stream, which cost as much server CPU as
all the rest of a short request (measured with a program that returns a fixed text:
0.68-0.76 ms per request against 0.42 with a plain stream).

When the client leaves, the stream's events are closed (which stops the program's
generation); a server that shuts down lets streams run until uvicorn's graceful
shutdown ends (``--shutdown-grace``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from pydantic import BaseModel
from sse_starlette.event import ServerSentEvent
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from mellea.serve.closing import close_stream
from mellea.serve.frames import Closing, EventStream
from mellea.serve.request_runner import ClientLeft

KEEPALIVE_COMMENT = ServerSentEvent(comment="ping").encode()
STREAM_HEADERS = {
    "Cache-Control": "no-store",
    "Connection": "keep-alive",
    "X-Accel-Buffering": "no",
}


class EventStreamResponse(Response):
    """``text/event-stream`` of ``events`` (dicts of ``ServerSentEvent`` fields, e.g.
    ``{"data": ...}`` or ``{"event": ..., "data": ...}``, or lists of them to send in
    one write; a :class:`Closing` list ends the body), with keep-alive comments after
    ``keepalive_seconds`` without a frame (``0``: none)."""

    media_type = "text/event-stream"

    def __init__(
        self,
        events: AsyncIterator[Mapping[str, str] | Sequence[Mapping[str, str]]],
        *,
        keepalive_seconds: float = 5.0,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        # Response's own header building costs a short stream ~1% of its server CPU: the
        # usual headers are built once (_plain_headers), and only extra ones per response.
        self.status_code = 200
        self.background = None
        self.body = b""
        self.raw_headers = _stream_headers(headers) if headers else list(_plain_headers())
        self.events = events
        self.keepalive_seconds = keepalive_seconds
        self._send_lock = asyncio.Lock()
        self._last_write = time.monotonic()
        self._left = False  # the client disconnected
        self._ended = False  # the body's end was sent

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Send the headers, then each event as it comes, until the events end or the
        client leaves."""
        streaming = asyncio.current_task()
        assert streaming is not None
        watcher = asyncio.ensure_future(self._watch(receive, send, streaming))
        try:
            await self._write(
                send, {"type": "http.response.start", "status": 200, "headers": self.raw_headers}
            )
            async for item in self.events:
                if self._ended:
                    continue  # nothing goes after the body's end
                if isinstance(item, dict):  # one frame; else a list of them, for one write
                    data = ServerSentEvent(**item).encode()
                else:
                    data = b"".join(ServerSentEvent(**event).encode() for event in item)
                await self._write(send, _body(data, more=not isinstance(item, Closing)))
            await self._write(send, _body(b"", more=False))
        except asyncio.CancelledError:
            if not self._left:
                raise
            streaming.uncancel()  # cancelled by the watcher: the client is gone
        except OSError:  # the socket failed under a write: the client is gone as well
            self._left = True
        finally:
            watcher.cancel()
            await close_stream(self.events)
            with contextlib.suppress(asyncio.CancelledError):
                await watcher

    async def _write(self, send: Send, message: dict) -> None:
        async with self._send_lock:
            if self._ended:
                return
            self._ended = message.get("more_body") is False
            await send(message)
            self._last_write = time.monotonic()

    async def _watch(self, receive: Receive, send: Send, streaming: asyncio.Task) -> None:
        """Until cancelled: end the stream when the client leaves, and ping while idle."""
        every = self.keepalive_seconds
        while True:
            wait = every - (time.monotonic() - self._last_write) if every > 0 else None
            try:
                async with asyncio.timeout(wait if wait is None else max(wait, 0.0)):
                    message = await receive()
            except TimeoutError:
                if time.monotonic() - self._last_write >= every:
                    await self._write(send, _body(KEEPALIVE_COMMENT))
                continue
            if message["type"] == "http.disconnect":
                self._left = True
                streaming.cancel()
                return


def _stream_headers(headers: Mapping[str, str] | None) -> list[tuple[bytes, bytes]]:
    """A stream's raw headers, with ``headers`` added: Response's, less its content-length
    (a stream has no length: chunked encoding)."""
    plain = Response(headers={**STREAM_HEADERS, **(headers or {})}, media_type="text/event-stream")
    return [(k, v) for k, v in plain.raw_headers if k != b"content-length"]


@functools.cache
def _plain_headers() -> tuple[tuple[bytes, bytes], ...]:
    return tuple(_stream_headers(None))


def _body(data: bytes, more: bool = True) -> dict:
    return {"type": "http.response.body", "body": data, "more_body": more}


def as_response(result: Any) -> Any:
    """The response for what the request runner returned: a stream, a bare 499 for a
    client that left, else the whole reply as JSON.

    A whole reply (a pydantic model) is written with its own serializer, in one pass:
    handed back as a model, FastAPI would walk it with ``jsonable_encoder`` first, which
    costs a short request about a sixth of its server CPU."""
    if isinstance(result, BaseModel):
        return Response(result.model_dump_json(by_alias=True), media_type="application/json")
    if isinstance(result, EventStream):
        return EventStreamResponse(result.frames, keepalive_seconds=result.keepalive_seconds)
    if isinstance(result, ClientLeft):
        return Response(status_code=result.status_code)
    return result

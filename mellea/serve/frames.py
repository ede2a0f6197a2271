"""Server-Sent Event frames, framework-free: a reply's rendered chunks become
``{"data": ...}`` (or ``{"event": ..., "data": ...}``) dicts, which the server writes.

Every stream ends the same way: its last frames and ``[DONE]`` go in one :class:`Closing`
list, sent in one write with the end of the body. A failure after the stream started
becomes one error frame before ``[DONE]``.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from mellea.serve.closing import close_stream
from mellea.serve.errors import as_openai_error

log = logging.getLogger("mellea.serve")

DONE = "[DONE]"
T = TypeVar("T")
Frame = dict[str, str]


class Closing(list):
    """The last frames of a stream: sent in one write with the end of the body."""


# A stream's frames as they come (a list: frames sent in one write).
Frames = AsyncIterator[Frame | list[Frame]]


@dataclass(frozen=True)
class EventStream:
    """A streamed reply: its ``frames``, with ``: ping`` comments after ``keepalive_seconds``
    without one (``0``: none). The server turns it into a ``text/event-stream`` response."""

    frames: Frames
    keepalive_seconds: float = 5.0


async def framed(
    streams: list[AsyncIterator[T]],
    to_frame: Callable[[T], Frame],
    ending: Callable[[], list[Frame]],
    stream_id: str,
) -> Frames:
    """The frames of every choice's chunks as they come, then the ``ending`` frames and
    ``[DONE]`` together with the end of the body (one write). A failure on the way
    becomes one error frame before ``[DONE]``; stopping early closes every choice (and
    so its generation).

    With one choice its finish chunk joins that write too: nothing can come between
    it and the choice's end, and every chunk a client parses costs it time."""
    single = len(streams) == 1
    chunks = streams[0] if single else merged(streams)
    held: list[Frame] = []  # the single choice's finish chunk
    last: list[Frame] = []
    try:
        async for item in chunks:
            if held:  # not the end after all
                yield held.pop()
            if single and getattr(item, "finish_reason", None) is not None:
                held.append(to_frame(item))
            else:
                yield to_frame(item)
        last = ending()
    except (asyncio.CancelledError, GeneratorExit):
        raise
    except Exception as exc:
        last = [error_frame(exc, stream_id)]
    finally:
        await close_stream(chunks)
    yield Closing([*held, *last, {"data": DONE}])


async def merged(streams: list[AsyncIterator[T]]) -> AsyncIterator[T]:
    """The items of all ``streams`` as they arrive.

    The first failure is raised here and the other streams are stopped; closing this
    iterator stops them all.
    """
    queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()

    async def pump(stream: AsyncIterator[T]) -> None:
        try:
            async for item in stream:
                await queue.put(("item", item))
            await queue.put(("end", None))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            await queue.put(("error", exc))
        finally:
            await close_stream(stream)

    tasks = [asyncio.ensure_future(pump(stream)) for stream in streams]
    try:
        running = len(tasks)
        while running:
            kind, value = await queue.get()
            if kind == "error":
                raise value
            if kind == "end":
                running -= 1
            else:
                yield value
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def named_events(events: AsyncGenerator[dict[str, Any], None]) -> Frames:
    """Each event (a dict with a ``type``) as a frame with an ``event:`` line naming it
    and the JSON ``data:``, as the Responses API streams."""
    try:
        async for event in events:
            yield {"event": event["type"], "data": _json(event)}
    finally:
        await close_stream(events)


def error_frame(exc: Exception, stream_id: str) -> Frame:
    """The error frame for a failure after the stream started (no internals in it)."""
    error = as_openai_error(exc)
    if error.status_code >= 500:
        log.info("stream %s ended with an error frame (%s)", stream_id, error.code)
    return {"data": _json(error.body())}


def _json(body: dict[str, Any]) -> str:
    return json.dumps(body, ensure_ascii=False)

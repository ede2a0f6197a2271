"""The SSE helper: the only writer of chat completion stream frames.

A thunk becomes: a role chunk, content chunks as the thunk streams, tool-call
chunks, one finish chunk, a usage chunk when asked for, then ``[DONE]``. An error
after the stream started becomes one error frame, then ``[DONE]``.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Iterator
from typing import Any, Protocol, TypeVar

from sse_starlette.sse import EventSourceResponse

from mellea.core.thunk import ModelOutputThunk
from mellea.serve.completion import finish_reason_of, tool_calls_of, usage_of
from mellea.serve.errors import StreamTimeoutError, as_openai_error
from mellea.serve.parsers import ReplyDelta, ReplyParser
from mellea.serve.protocol import (
    ChatCompletionChunk,
    ChunkChoice,
    ChunkToolCall,
    ChunkToolCallFunction,
    Delta,
    Usage,
)

log = logging.getLogger("mellea.serve")

DONE = "[DONE]"
T = TypeVar("T")


class StreamObserver(Protocol):
    """Watches a stream go out (the server uses it for latency and token metrics)."""

    def on_content(self) -> None:
        """A content delta was sent."""

    def on_finish(self, usage: Usage | None) -> None:
        """The reply finished; ``usage`` is what the backend reported, if anything."""


async def before(deadline: float | None, awaitable: Awaitable[T]) -> T:
    """Await ``awaitable``, cancelling it if the ``time.monotonic()`` deadline passes."""
    if deadline is None:
        return await awaitable
    remaining = deadline - time.monotonic()
    try:
        return await asyncio.wait_for(awaitable, timeout=max(remaining, 0.0))
    except TimeoutError:
        raise StreamTimeoutError from None


async def chat_completion_events(
    source: ModelOutputThunk | Awaitable[ModelOutputThunk],
    *,
    completion_id: str,
    created: int,
    model: str,
    include_usage: bool = False,
    deadline: float | None = None,
    observer: StreamObserver | None = None,
    parser: ReplyParser | None = None,
) -> AsyncIterator[dict[str, str]]:
    """SSE events (``{"data": ...}`` dicts) for one streamed chat completion.

    With a ``parser``, reasoning goes out as ``reasoning_content`` deltas and tool
    calls in the text as ``tool_calls`` deltas, never as content.

    ``source`` may still be an awaitable (the program is still running); its
    failure then becomes an error frame. If the consumer stops early (the client
    disconnected) or ``deadline`` (a ``time.monotonic()`` value) passes, the thunk is
    closed, which cancels its generation.
    """

    def chunk(delta: Delta, finish: Any = None, usage: Usage | None = None) -> dict[str, str]:
        choices = [] if usage is not None else [ChunkChoice(delta=delta, finish_reason=finish)]
        frame = ChatCompletionChunk(
            id=completion_id, created=created, model=model, choices=choices, usage=usage
        )
        return {"data": frame.model_dump_json()}

    thunk: ModelOutputThunk | None = None
    try:
        thunk = await before(deadline, source) if inspect.isawaitable(source) else source
        yield chunk(Delta(role="assistant", content=""))
        calls_sent = 0
        reasoning: list[str] = []

        def reply_frames(delta: ReplyDelta) -> Iterator[dict[str, str]]:
            nonlocal calls_sent
            if delta.reasoning:
                reasoning.append(delta.reasoning)
                yield chunk(Delta(reasoning_content=delta.reasoning))
            if delta.content:
                yield chunk(Delta(content=delta.content))
            for call in delta.tool_calls:
                yield from call_frames(calls_sent, call.id, call.name or "", call.arguments or "")
                calls_sent += 1

        def call_frames(
            index: int, call_id: str | None, name: str, arguments: str
        ) -> Iterator[dict[str, str]]:
            opening = ChunkToolCall(
                index=index,
                id=call_id,
                type="function",
                function=ChunkToolCallFunction(name=name, arguments=""),
            )
            yield chunk(Delta(tool_calls=[opening]))
            fragment = ChunkToolCallFunction(arguments=arguments)
            yield chunk(Delta(tool_calls=[ChunkToolCall(index=index, function=fragment)]))

        while True:
            text = await before(deadline, thunk.astream())
            if text:
                if observer is not None:
                    observer.on_content()
                if parser is None:
                    yield chunk(Delta(content=text))
                else:
                    for frame in reply_frames(parser.feed(text)):
                        yield frame
            elif thunk.is_computed():
                break
        if parser is not None:
            for frame in reply_frames(parser.finish()):
                yield frame
        for call in tool_calls_of(thunk) or []:
            for frame in call_frames(
                calls_sent, call.id, call.function.name, call.function.arguments
            ):
                yield frame
            calls_sent += 1
        yield chunk(Delta(), finish="tool_calls" if calls_sent else finish_reason_of(thunk))
        usage = usage_of(thunk, "".join(reasoning))
        if observer is not None:
            observer.on_finish(usage)
        if include_usage:
            yield chunk(Delta(), usage=usage or Usage())
    except (asyncio.CancelledError, GeneratorExit):
        raise
    except Exception as exc:
        yield error_event(exc, completion_id)
    finally:
        if thunk is not None and not thunk.is_computed():
            await asyncio.shield(thunk.aclose())
    yield {"data": DONE}


def stream_response(
    events: AsyncIterator[dict[str, str]],
    *,
    keepalive_seconds: float = 5.0,
    shutdown_grace: float = 30.0,
    headers: dict[str, str] | None = None,
) -> EventSourceResponse:
    """An SSE response for ``events`` with ``: ping`` keep-alive comments while idle.

    On server shutdown the stream may run ``shutdown_grace`` seconds more to finish.
    """
    return EventSourceResponse(
        events, ping=keepalive_seconds, headers=headers, shutdown_grace_period=shutdown_grace
    )


def error_event(exc: Exception, completion_id: str) -> dict[str, str]:
    """The error frame for a failure after the stream started (no internals in it)."""
    error = as_openai_error(exc)
    if error.status_code >= 500:
        log.info("stream %s ended with an error frame (%s)", completion_id, error.code)
    return {"data": _json(error.body())}


def _json(body: dict[str, Any]) -> str:
    import json

    return json.dumps(body, ensure_ascii=False)


async def text_completion_events(
    sources: list[ModelOutputThunk | Awaitable[ModelOutputThunk]],
    prompts: list[str],
    *,
    completion_id: str,
    created: int,
    model: str,
    include_usage: bool = False,
    echo: bool = False,
    deadline: float | None = None,
) -> AsyncIterator[dict[str, str]]:
    """SSE events for a streamed ``/v1/completions`` reply, one choice per prompt.

    The prompts run concurrently; their chunks interleave, each with its ``index``.
    """
    from mellea.serve.text_completion import Completion, CompletionChoice, add_usage

    # (index, text or failure, finish reason): pumps never raise, they hand failures over.
    queue: asyncio.Queue[tuple[int, str | BaseException | None, Any]] = asyncio.Queue()
    total = Usage()

    def frame(choices: list[CompletionChoice], usage: Usage | None = None) -> dict[str, str]:
        body = Completion(id=completion_id, created=created, model=model, choices=choices)
        body.usage = usage
        return {"data": body.model_dump_json()}

    async def pump(index: int, source: Any) -> None:
        thunk: ModelOutputThunk | None = None
        try:
            thunk = await before(deadline, source) if inspect.isawaitable(source) else source
            if echo:
                await queue.put((index, prompts[index], None))
            while True:
                text = await before(deadline, thunk.astream())
                if text:
                    await queue.put((index, text, None))
                elif thunk.is_computed():
                    break
            add_usage(total, usage_of(thunk))
            reason = finish_reason_of(thunk)
            await queue.put((index, None, "stop" if reason == "tool_calls" else reason))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            await queue.put((index, exc, None))
        finally:
            if thunk is not None and not thunk.is_computed():
                await asyncio.shield(thunk.aclose())

    tasks = [asyncio.ensure_future(pump(i, source)) for i, source in enumerate(sources)]
    try:
        finished = 0
        while finished < len(tasks):
            index, item, reason = await queue.get()
            if isinstance(item, BaseException):
                raise item
            finished += reason is not None
            yield frame([CompletionChoice(index=index, text=item or "", finish_reason=reason)])
        if include_usage:
            yield frame([], usage=total)
    except (asyncio.CancelledError, GeneratorExit):
        raise
    except Exception as exc:
        yield error_event(exc, completion_id)
    finally:
        for task in tasks:
            task.cancel()
    yield {"data": DONE}

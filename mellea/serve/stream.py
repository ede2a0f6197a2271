"""The SSE helper: the only writer of stream frames (chat, text completions, responses).

A thunk becomes: a role chunk, content chunks as the thunk streams, tool-call
chunks, one finish chunk, a usage chunk when asked for, then ``[DONE]``. An error
after the stream started becomes one error frame, then ``[DONE]``.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, Protocol, TypeVar

from mellea.core.parsers import ReplyDelta, ReplyParser
from mellea.core.thunk import ModelOutputThunk
from mellea.core.trace import ProgramTrace
from mellea.serve.completion import (
    finish_reason_of,
    legacy_finish,
    tool_calls_of,
    total_usage,
    usage_of,
)
from mellea.serve.errors import StreamTimeoutError, as_openai_error
from mellea.serve.logprobs import chat_logprobs, completion_logprobs
from mellea.serve.program_report import event_object, other_calls, program_report, with_calls
from mellea.serve.protocol import (
    ChatCompletionChunk,
    ChatCompletionChunkWithUsage,
    ChunkChoice,
    ChunkToolCall,
    ChunkToolCallFunction,
    Delta,
    Usage,
)
from mellea.serve.reading import ThunkReader
from mellea.serve.sse import Closing, EventStreamResponse, close_events

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


ThunkSource = ModelOutputThunk | Awaitable[ModelOutputThunk]
ProgramEvent = dict[str, Any]  # a live program event, sent as an extension chunk


class ChoiceReader:
    """Reads one choice of a stream: its program's live events while the program runs,
    then its thunk's text as it arrives. :meth:`close` closes a thunk still generating
    (which stops its generation) when the stream ends early."""

    def __init__(
        self,
        source: ThunkSource,
        index: int,
        deadline: float | None,
        trace: ProgramTrace | None = None,
    ) -> None:
        """A reader of ``source`` (the thunk, or the program call still running)."""
        self.source = source
        self.index = index
        self.deadline = deadline
        self.trace = trace
        self.thunk: ModelOutputThunk | None = None

    @property
    def live(self) -> bool:
        """Whether the client follows this choice's program events."""
        return self.trace is not None and self.trace.live

    async def program_events(self) -> AsyncIterator[ProgramEvent]:
        """The live program events (as ``mellea`` objects) until the program returns."""
        if self.trace is None or not self.live:
            return
        source = self.source
        work = asyncio.ensure_future(source) if inspect.isawaitable(source) else None
        self.source = work if work is not None else source
        events = self.trace.events_while(work)
        try:
            while True:
                try:
                    event = await before(self.deadline, anext(events))
                except StopAsyncIteration:
                    return
                yield event_object(event, self.index)
        finally:
            await events.aclose()
            if work is not None and not work.done():
                work.cancel()  # the client left or the deadline passed: the reply is not wanted

    async def start(self) -> ModelOutputThunk:
        """The choice's thunk, once its program has returned."""
        source = self.source
        self.thunk = await before(self.deadline, source) if inspect.isawaitable(source) else source
        return self.thunk

    async def texts(self) -> AsyncIterator[str]:
        """The thunk's text as it is generated (after :meth:`start`)."""
        assert self.thunk is not None
        reader = ThunkReader(self.thunk)
        while True:
            text = await before(self.deadline, reader.next())
            if text:
                yield text
            elif self.thunk.is_computed():
                return

    def program_done(self) -> ProgramEvent:
        """The last program event of a live choice: its whole report, as a whole reply has it."""
        assert self.thunk is not None
        report = program_report(self.trace, self.thunk) or {}
        return event_object({"type": "program.done", **report}, self.index)

    async def close(self) -> None:
        """Close the thunk if it is still generating."""
        if self.thunk is not None and not self.thunk.is_computed():
            await asyncio.shield(self.thunk.aclose())


class Tally:
    """Each choice's usage and its program's other model calls, summed for the last chunk.

    Choices come ``n`` per prompt: a prompt's tokens count once.
    """

    def __init__(self, count: int, n: int, observer: StreamObserver | None = None) -> None:
        """A tally of ``count`` choices; ``observer`` hears the total."""
        self.usages: list[Usage | None] = [None] * count
        self.calls: list[list[dict[str, Any]]] = [[] for _ in range(count)]
        self.n = n
        self.observer = observer

    def add(self, reader: ChoiceReader, usage: Usage | None) -> None:
        """A choice finished with ``usage``."""
        assert reader.thunk is not None
        self.usages[reader.index] = usage
        self.calls[reader.index] = other_calls(reader.trace, reader.thunk)

    def total(self) -> Usage | None:
        """The whole reply's usage (told to the observer)."""
        usage = total_usage(self.usages, self.n)
        usage = with_calls(usage, [call for run in self.calls for call in run])
        if self.observer is not None:
            self.observer.on_finish(usage)
        return usage


def chat_completion_events(
    sources: list[ThunkSource],
    parsers: list[ReplyParser | None],
    *,
    completion_id: str,
    created: int,
    model: str,
    include_usage: bool = False,
    logprobs: bool = False,
    deadline: float | None = None,
    observer: StreamObserver | None = None,
    traces: list[ProgramTrace] | None = None,
    functions: bool = False,
) -> AsyncIterator[dict[str, str] | list[dict[str, str]]]:
    """SSE events (``{"data": ...}`` dicts, the last ones in a :class:`Closing` list
    that ends the body) for one streamed chat completion.

    Each source is one choice (``n`` > 1 gives several); their chunks interleave, each
    with its ``index``. With a parser, that choice's reasoning goes out as
    ``reasoning_content`` deltas and tool calls in the text as ``tool_calls`` deltas,
    never as content. With ``logprobs``, each chunk carries the log-probabilities of
    the tokens that arrived with it.

    A source may still be an awaitable (the program is still running); its failure
    then becomes an error frame. If the consumer stops early (the client
    disconnected) or ``deadline`` (a ``time.monotonic()`` value) passes, the thunks
    are closed, which cancels their generation.

    With program ``traces`` (one per choice), usage counts every model call of the
    programs; a live trace's events go out as extension chunks (``choices: []`` and a
    ``mellea`` object) while its program runs, and its report as a last one.
    """
    tally = Tally(len(sources), n=len(sources), observer=observer)  # one prompt, n choices

    def frame(
        choice: ChunkChoice | ProgramEvent | None, usage: Usage | None = None
    ) -> dict[str, str]:
        event = choice if isinstance(choice, dict) else None
        chunk = ChatCompletionChunkWithUsage if include_usage else ChatCompletionChunk
        body = chunk(
            id=completion_id,
            created=created,
            model=model,
            choices=[] if choice is None or event is not None else [choice],  # type: ignore[list-item]
            usage=usage,
            mellea=event,
        )
        return {"data": body.model_dump_json()}

    streams = [
        _chat_choice_chunks(
            ChoiceReader(source, index, deadline, traces[index] if traces else None),
            parser,
            tally,
            logprobs=logprobs,
            observer=observer,
            functions=functions,
        )
        for index, (source, parser) in enumerate(zip(sources, parsers, strict=True))
    ]

    def ending() -> list[dict[str, str]]:
        usage = tally.total()
        return [frame(None, usage=usage or Usage())] if include_usage else []

    return _framed(streams, frame, ending, completion_id)


async def _chat_choice_chunks(
    reader: ChoiceReader,
    parser: ReplyParser | None,
    tally: Tally,
    *,
    logprobs: bool,
    observer: StreamObserver | None,
    functions: bool = False,
) -> AsyncIterator[ChunkChoice | ProgramEvent]:
    """One choice's stream chunks: role, deltas, tool calls, finish; its usage into ``tally``.

    A live program's events come first, as the program runs. With ``functions`` (the
    deprecated form) the first call goes out as ``function_call`` deltas, and no other.
    """
    index = reader.index
    calls_sent = 0
    reasoning: list[str] = []
    logprobs_sent = 0

    def choice(delta: Delta, finish: Any = None) -> ChunkChoice:
        nonlocal logprobs_sent
        entries = None
        thunk = reader.thunk
        if logprobs and thunk is not None:
            entries = chat_logprobs((thunk.logprobs or [])[logprobs_sent:])
            logprobs_sent = len(thunk.logprobs or [])
            if not entries.content:
                entries = None
        return ChunkChoice(index=index, delta=delta, logprobs=entries, finish_reason=finish)

    def call_chunks(call_id: str | None, name: str, arguments: str) -> Iterator[ChunkChoice]:
        nonlocal calls_sent
        if functions:
            if not calls_sent:
                yield choice(Delta(function_call=ChunkToolCallFunction(name=name, arguments="")))
                yield choice(Delta(function_call=ChunkToolCallFunction(arguments=arguments)))
            calls_sent += 1
            return
        opening = ChunkToolCall(
            index=calls_sent,
            id=call_id,
            type="function",
            function=ChunkToolCallFunction(name=name, arguments=""),
        )
        yield choice(Delta(tool_calls=[opening]))
        fragment = ChunkToolCallFunction(arguments=arguments)
        yield choice(Delta(tool_calls=[ChunkToolCall(index=calls_sent, function=fragment)]))
        calls_sent += 1

    def reply_chunks(delta: ReplyDelta) -> Iterator[ChunkChoice]:
        if delta.reasoning:
            reasoning.append(delta.reasoning)
            yield choice(Delta(reasoning_content=delta.reasoning))
        if delta.content:
            yield choice(Delta(content=delta.content))
        for call in delta.tool_calls:
            yield from call_chunks(call.id, call.name or "", call.arguments or "")

    try:
        async for event in reader.program_events():
            yield event
        thunk = await reader.start()
        yield ChunkChoice(index=index, delta=Delta(role="assistant", content=""))
        async for text in reader.texts():
            if observer is not None:
                observer.on_content()
            if parser is None:
                yield choice(Delta(content=text))
            else:
                for item in reply_chunks(parser.feed(text)):
                    yield item
        if parser is not None:
            for item in reply_chunks(parser.finish()):
                yield item
        for call in tool_calls_of(thunk) or []:
            for item in call_chunks(call.id, call.function.name, call.function.arguments):
                yield item
        if reader.live:
            yield reader.program_done()
        finish = finish_reason_of(thunk, calls_sent > 0)
        yield choice(Delta(), finish=legacy_finish(finish) if functions else finish)
        tally.add(reader, usage_of(thunk, "".join(reasoning)))
    finally:
        await reader.close()


async def _framed(
    streams: list[AsyncIterator[T]],
    to_frame: Callable[[T], dict[str, str]],
    ending: Callable[[], list[dict[str, str]]],
    completion_id: str,
) -> AsyncIterator[dict[str, str] | list[dict[str, str]]]:
    """The frames of every choice's chunks as they come, then the ``ending`` frames and
    ``[DONE]`` together with the end of the body (one write). A failure on the way
    becomes one error frame before ``[DONE]``; stopping early closes every choice (and
    so its generation).

    With one choice its finish chunk joins that write too: nothing can come between
    it and the choice's end, and every chunk a client parses costs it time."""
    single = len(streams) == 1
    chunks = streams[0] if single else merged(streams)
    held: list[dict[str, str]] = []  # the single choice's finish chunk
    last: list[dict[str, str]] = []
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
        last = [error_event(exc, completion_id)]
    finally:
        await close_events(chunks)
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
            await _close(stream)

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


async def _close(stream: AsyncIterator[Any]) -> None:
    closer = getattr(stream, "aclose", None)
    if closer is not None:
        await closer()


def stream_response(
    events: AsyncIterator[dict[str, str] | list[dict[str, str]]],
    *,
    keepalive_seconds: float = 5.0,
    headers: dict[str, str] | None = None,
) -> EventStreamResponse:
    """An SSE response for ``events`` with ``: ping`` keep-alive comments while idle
    (:mod:`mellea.serve.sse`)."""
    return EventStreamResponse(events, keepalive_seconds=keepalive_seconds, headers=headers)


async def named_events(
    events: AsyncGenerator[dict[str, Any], None],
) -> AsyncIterator[dict[str, str]]:
    """Each event (a dict with a ``type``) as an SSE frame with an ``event:`` line naming it
    and the JSON ``data:``, as the Responses API streams."""
    try:
        async for event in events:
            yield {"event": event["type"], "data": _json(event)}
    finally:
        await events.aclose()


def error_event(exc: Exception, completion_id: str) -> dict[str, str]:
    """The error frame for a failure after the stream started (no internals in it)."""
    error = as_openai_error(exc)
    if error.status_code >= 500:
        log.info("stream %s ended with an error frame (%s)", completion_id, error.code)
    return {"data": _json(error.body())}


def _json(body: dict[str, Any]) -> str:
    return json.dumps(body, ensure_ascii=False)


def text_completion_events(
    sources: list[ThunkSource],
    prompts: list[str],
    *,
    completion_id: str,
    created: int,
    model: str,
    include_usage: bool = False,
    echo: bool = False,
    logprobs: bool = False,
    n: int = 1,
    deadline: float | None = None,
    observer: StreamObserver | None = None,
    traces: list[ProgramTrace] | None = None,
) -> AsyncIterator[dict[str, str] | list[dict[str, str]]]:
    """SSE events for a streamed ``/v1/completions`` reply.

    ``sources[i]`` completes ``prompts[i]`` and is choice ``i`` (each prompt appears
    ``n`` times in a row); the choices run concurrently and their chunks interleave,
    each with its ``index``. Program ``traces`` work as for chat completions.
    """
    from mellea.serve.text_completion import Completion, CompletionChoice, CompletionWithUsage

    tally = Tally(len(sources), n, observer)
    chunk = CompletionWithUsage if include_usage else Completion

    def frame(choices: list[CompletionChoice], usage: Usage | None = None) -> dict[str, str]:
        body = chunk(id=completion_id, created=created, model=model, choices=choices)
        body.usage = usage
        return {"data": body.model_dump_json()}

    def item_frame(item: CompletionChoice | ProgramEvent) -> dict[str, str]:
        if isinstance(item, dict):
            body = chunk(id=completion_id, created=created, model=model, choices=[])
            body.mellea = item
            return {"data": body.model_dump_json()}
        return frame([item])

    async def choice_chunks(reader: ChoiceReader) -> AsyncIterator[CompletionChoice | ProgramEvent]:
        index = reader.index
        offset = 0  # where the next token's text starts in this choice's text
        sent = 0  # log-probability entries already sent

        def choice(text: str, finish: Any = None) -> CompletionChoice:
            nonlocal offset, sent
            entries = None
            thunk = reader.thunk
            if logprobs and thunk is not None and thunk.logprobs:
                entries = completion_logprobs(thunk.logprobs[sent:], offset)
                sent = len(thunk.logprobs)
                offset += sum(len(token) for token in entries.tokens)
            return CompletionChoice(index=index, text=text, logprobs=entries, finish_reason=finish)

        try:
            async for event in reader.program_events():
                yield event
            thunk = await reader.start()
            if echo:
                yield CompletionChoice(index=index, text=prompts[index])
            async for text in reader.texts():
                if observer is not None:
                    observer.on_content()
                yield choice(text)
            tally.add(reader, usage_of(thunk))
            if reader.live:
                yield reader.program_done()
            reason = finish_reason_of(thunk)
            yield choice("", "stop" if reason == "tool_calls" else reason)
        finally:
            await reader.close()

    streams = [
        choice_chunks(ChoiceReader(source, i, deadline, traces[i] if traces else None))
        for i, source in enumerate(sources)
    ]

    def ending() -> list[dict[str, str]]:
        usage = tally.total()
        return [frame([], usage=usage or Usage())] if include_usage else []

    return _framed(streams, item_frame, ending, completion_id)

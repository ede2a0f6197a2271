"""One response being generated: the program's reply becomes output items and stream events.

:class:`ResponseRun` reads the thunk once, through the reply parser, and yields every
stream event from ``response.created`` to the terminal one. A non-streamed request reads
the same events and answers with the final response, so both paths agree.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol, TypeVar

from mellea.core.errors import RequestError
from mellea.core.parsers import ReplyDelta, ReplyParser, new_call_id
from mellea.core.thunk import ModelOutputThunk
from mellea.core.trace import ProgramTrace
from mellea.serve.completion import tool_calls_of, usage_of
from mellea.serve.errors import (
    GENERIC_SERVER_MESSAGE,
    TIMEOUT_MESSAGE,
    OpenAIError,
    StreamTimeoutError,
)
from mellea.serve.program_report import program_report, program_usage
from mellea.serve.reading import ThunkReader
from mellea.serve.responses.objects import ResponseObject, ResponseUsage
from mellea.serve.responses.output import Event, OutputBuilder
from mellea.serve.stream import StreamObserver, before

log = logging.getLogger("mellea.serve")
T = TypeVar("T")

CANCELLED_MESSAGE = "the response was cancelled"
_INCOMPLETE_REASONS = {"length": "max_output_tokens", "content_filter": "content_filter"}


class ResponseCancelled(Exception):
    """The response was cancelled through ``POST /v1/responses/{id}/cancel``."""


class CancelSignal:
    """Set when a response is cancelled.

    In this process :meth:`set` takes effect at once; ``check`` (when given) is polled
    every ``interval`` seconds, for a cancel that reached another worker process or
    replica (it may return an awaitable, for a store that waits on a database).
    """

    def __init__(
        self, check: Callable[[], bool | Awaitable[bool]] | None = None, interval: float = 0.5
    ) -> None:
        """A signal that is not set yet."""
        self._event = asyncio.Event()
        self._check = check
        self._interval = interval

    def set(self) -> None:
        """Cancel the response."""
        self._event.set()

    async def wait(self) -> None:
        """Return once the response is cancelled."""
        while not self._event.is_set():
            if self._check is None:
                await self._event.wait()
                return
            try:
                await asyncio.wait_for(self._event.wait(), self._interval)
            except TimeoutError:
                if await _settled(self._check()):
                    self._event.set()


class ResponseSink(Protocol):
    """Where a run reports its response (the server stores it).

    Either method may return an awaitable instead (a store that waits on a database);
    the run awaits it before going on.
    """

    def started(self, response: dict[str, Any]) -> Awaitable[None] | None:
        """The response exists, ``in_progress``."""

    def finished(self, response: dict[str, Any]) -> dict[str, Any] | Awaitable[dict[str, Any]]:
        """The response ended; returns its final form (a cancel may have changed the status)."""


class ResponseRun:
    """Generates one response; :meth:`events` drives it, :attr:`failure` tells why it failed."""

    def __init__(
        self,
        source: ModelOutputThunk | Awaitable[ModelOutputThunk],
        response: ResponseObject,
        sink: ResponseSink,
        *,
        parser: ReplyParser | None = None,
        deadline: float | None = None,
        cancel: CancelSignal | None = None,
        observer: StreamObserver | None = None,
        logprobs: bool = False,
        trace: ProgramTrace | None = None,
    ) -> None:
        """Prepare a run; nothing happens until :meth:`events` is iterated.

        With ``logprobs``, message text carries the thunk's token log-probabilities.
        With the program's ``trace``, the response carries its report (``mellea``) and
        usage counts every model call; a live trace's events are sent as they happen,
        as ``mellea.*`` events.
        """
        self.source = source
        self.response = response
        self.sink = sink
        self.parser = parser
        self.deadline = deadline
        self.cancel = cancel
        self.observer = observer
        self.logprobs = logprobs
        self.trace = trace
        self.failure: Exception | None = None
        self.final: dict[str, Any] | None = None
        self._sequence = 0
        self._cancelled: asyncio.Future[None] | None = None
        self._pending: asyncio.Future[Any] | None = None

    async def events(self) -> AsyncIterator[dict[str, Any]]:
        """Every stream event of the response, numbered from 0; the last one is terminal.

        If the consumer stops early (the client went away), the generation is closed
        and the response ends ``cancelled``.
        """
        builder = OutputBuilder(self.response.output, self.logprobs)
        thunk: ModelOutputThunk | None = None
        settled = False
        finishing: asyncio.Future[dict[str, Any]] | None = None
        try:
            await _settled(self.sink.started(self.response.wire()))
            yield self._stamp({"type": "response.created", "response": self.response.wire()})
            yield self._stamp({"type": "response.in_progress", "response": self.response.wire()})
            source = self.source
            if self.trace is not None and self.trace.live:
                async for event in self._program_events():
                    yield self._stamp(event)
            thunk = await self._next(source) if inspect.isawaitable(source) else source
            reader = ThunkReader(thunk)
            while True:
                text = await self._next(reader.next())
                if text:
                    if self.observer is not None:
                        self.observer.on_content()
                    builder.reply_logprobs(thunk.logprobs)
                    delta = self.parser.feed(text) if self.parser else ReplyDelta(content=text)
                    for event in _reply_events(builder, delta):
                        yield self._stamp(event)
                elif thunk.is_computed():
                    break
            for event in self._ending_events(builder, thunk):
                yield self._stamp(event)
            settled = True
        except ResponseCancelled:
            builder.abandon()
            self.response.status = "cancelled"
            settled = True
        except Exception as exc:
            builder.abandon()
            self.response.status = "failed"
            self.response.error = response_error(exc)
            self.failure = exc
            settled = True
        finally:
            # When the consumer went away, every await here may be cancelled again at once:
            # the bookkeeping is synchronous and comes first, the close is shielded.
            if self._cancelled is not None:
                self._cancelled.cancel()
            if not settled:
                builder.abandon()
                self.response.status = "cancelled"
                final = self.sink.finished(self.response.wire())
                if inspect.isawaitable(final):  # the store's write goes on if we are cancelled
                    finishing = asyncio.ensure_future(final)
                else:
                    self.final = final
            if thunk is None:
                thunk = _unread_thunk(self.source)
            if thunk is not None and not thunk.is_computed():
                await asyncio.shield(_close(thunk, self._pending))
            if finishing is not None:
                self.final = await asyncio.shield(finishing)
        self.final = await _settled(self.sink.finished(self.response.wire()))
        yield self._stamp(terminal_event(self.final))

    def _ending_events(self, builder: OutputBuilder, thunk: ModelOutputThunk) -> list[Event]:
        """Flush the parser, add calls the program returned, close the output, settle the status."""
        builder.reply_logprobs(thunk.logprobs)
        events = _reply_events(builder, self.parser.finish()) if self.parser else []
        reason = _INCOMPLETE_REASONS.get(thunk.finish_reason or "")
        cut = _cut_call_ids(thunk) if reason else set()
        for call in tool_calls_of(thunk) or []:
            status = "incomplete" if call.id in cut else "completed"
            events += builder.function_call(
                call.id, call.function.name, call.function.arguments, status
            )
        events += builder.finish("incomplete" if reason else "completed")
        usage = program_usage(self.trace, thunk, usage_of(thunk))
        response = self.response
        response.usage = ResponseUsage.from_usage(usage) if usage else None
        response.mellea = program_report(self.trace, thunk)
        if reason:
            response.status = "incomplete"
            response.incomplete_details = {"reason": reason}
        else:
            response.status = "completed"
            response.completed_at = int(time.time())
        if self.observer is not None:
            self.observer.on_finish(usage)
        return events

    async def _program_events(self) -> AsyncIterator[Event]:
        """The program's live events until it returns: ``mellea.<type>`` events."""
        assert self.trace is not None
        source = self.source
        work = source if isinstance(source, asyncio.Future) else None
        events = self.trace.events_while(work)
        try:
            while True:
                try:
                    event = await self._next(anext(events))
                except StopAsyncIteration:
                    return
                yield {**event, "type": f"mellea.{event['type']}"}
        finally:
            await events.aclose()

    async def _next(self, awaitable: Awaitable[T]) -> T:
        """Await ``awaitable`` unless the deadline passes or the response is cancelled first."""
        if self.cancel is None:
            return await before(self.deadline, awaitable)
        if self._cancelled is None:
            self._cancelled = asyncio.ensure_future(self.cancel.wait())
        task = asyncio.ensure_future(awaitable)
        timeout = None if self.deadline is None else max(self.deadline - time.monotonic(), 0.0)
        try:
            done, _ = await asyncio.wait(
                {task, self._cancelled}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
        except BaseException:
            task.cancel()
            self._pending = task  # the thunk is closed once this has unwound
            raise
        if task in done:
            return task.result()
        await _stop(task)
        if self._cancelled in done:
            raise ResponseCancelled
        raise StreamTimeoutError

    def _stamp(self, event: Event) -> dict[str, Any]:
        stamped = {"type": event["type"], "sequence_number": self._sequence, **event}
        self._sequence += 1
        return stamped


async def _settled(value: T | Awaitable[T]) -> T:
    """``value``, awaited if it is awaitable."""
    return await value if inspect.isawaitable(value) else value


async def _stop(task: asyncio.Future[Any]) -> None:
    """Cancel ``task`` and let it unwind, so its thunk can be closed after it."""
    task.cancel()
    await asyncio.wait({task})


def _unread_thunk(source: Any) -> ModelOutputThunk | None:
    """The program's thunk if the run ended before reading it; a program still running is
    cancelled (its reply is no longer wanted)."""
    if isinstance(source, ModelOutputThunk):
        return source
    if isinstance(source, asyncio.Future):
        if not source.done():
            source.cancel()
        elif not source.cancelled() and source.exception() is None:
            return source.result()
    return None


async def _close(thunk: ModelOutputThunk, pending: asyncio.Future[Any] | None) -> None:
    """Close the thunk once a cancelled read of it has unwound (closing it sooner would
    find its generator still running)."""
    if pending is not None:
        await asyncio.wait({pending})
    await thunk.aclose()


def _cut_call_ids(thunk: ModelOutputThunk) -> set[str]:
    """The ids of the thunk's tool calls that generation stopped in the middle of."""
    return {
        c.id for c in thunk.tool_calls or [] if getattr(c, "partial_arguments", None) is not None
    }


def _reply_events(builder: OutputBuilder, delta: ReplyDelta) -> list[Event]:
    events = builder.reasoning(delta.reasoning) if delta.reasoning else []
    if delta.content:
        events += builder.text(delta.content)
    for call in delta.tool_calls:
        call_id = call.id or new_call_id()
        events += builder.function_call(call_id, call.name or "", call.arguments or "")
    return events


def terminal_event(response: dict[str, Any]) -> Event:
    """The last event of a stream: completed, incomplete, failed, or the cancel error."""
    status = response["status"]
    if status == "cancelled":
        return {
            "type": "error",
            "code": "response_cancelled",
            "message": CANCELLED_MESSAGE,
            "param": None,
        }
    kind = {"completed": "response.completed", "incomplete": "response.incomplete"}
    return {"type": kind.get(status, "response.failed"), "response": response}


def response_error(exc: Exception) -> dict[str, Any]:
    """The response's ``error`` for a failure: client mistakes keep their message, the
    program's own exceptions are logged and replaced by a generic one."""
    if isinstance(exc, StreamTimeoutError):
        return {
            "code": "server_error",
            "message": TIMEOUT_MESSAGE,
            "type": "timeout_error",
            "param": None,
        }
    if isinstance(exc, RequestError):
        exc = OpenAIError(exc.status_code, exc.message, param=exc.param, error_type=exc.error_type)
    if isinstance(exc, OpenAIError):
        code = "server_error" if exc.status_code >= 500 else "invalid_prompt"
        return {"code": code, "message": exc.message, "type": exc.error_type, "param": exc.param}
    log.error("the program failed while generating a response", exc_info=exc)
    return {
        "code": "server_error",
        "message": GENERIC_SERVER_MESSAGE,
        "type": "server_error",
        "param": None,
    }

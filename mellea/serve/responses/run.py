"""One response being generated: the program's reply becomes output items and stream events.

:class:`ResponseRun` renders its choice's events (:mod:`mellea.serve.choice_reader`) as
every stream event from ``response.created`` to the terminal one. A non-streamed request
reads the same events and answers with the final response, so both paths agree.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol, TypeVar

from mellea.core.errors import RequestError
from mellea.core.parsers import new_call_id
from mellea.serve.choice_events import (
    ChoiceEvent,
    Finish,
    ProgramEvent,
    ReasoningDelta,
    Role,
    TextDelta,
    ToolCallEvent,
)
from mellea.serve.choice_reader import ChoiceReader, ReplyCancelled
from mellea.serve.closing import close_stream
from mellea.serve.errors import (
    GENERIC_SERVER_MESSAGE,
    TIMEOUT_MESSAGE,
    OpenAIError,
    StreamTimeoutError,
)
from mellea.serve.program_report import with_calls
from mellea.serve.protocol import Usage
from mellea.serve.rendering import render_events
from mellea.serve.responses.objects import ResponseObject, ResponseUsage
from mellea.serve.responses.output import Event, OutputBuilder, wants_summary

log = logging.getLogger("mellea.serve")
T = TypeVar("T")

CANCELLED_MESSAGE = "the response was cancelled"
_INCOMPLETE_REASONS = {"length": "max_output_tokens", "content_filter": "content_filter"}


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
                async with asyncio.timeout(self._interval):  # wait_for could drop a cancel
                    await self._event.wait()
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
    """Generates one response from its choice's events; :meth:`events` drives it,
    :attr:`failure` tells why it failed."""

    def __init__(
        self,
        reader: ChoiceReader,
        response: ResponseObject,
        sink: ResponseSink,
        logprobs: bool = False,
    ) -> None:
        """Prepare a run of ``reader``'s choice; nothing happens until :meth:`events` is
        iterated.

        With ``logprobs``, message text carries the thunk's token log-probabilities.
        With the program's trace (the reader's), the response carries its report
        (``mellea``) and usage counts every model call; a live trace's events are sent
        as they happen, as ``mellea.*`` events.
        """
        self.reader = reader
        self.response = response
        self.sink = sink
        self.logprobs = logprobs
        self.failure: Exception | None = None
        self.final: dict[str, Any] | None = None
        self._sequence = 0

    async def events(self) -> AsyncIterator[dict[str, Any]]:
        """Every stream event of the response, numbered from 0; the last one is terminal.

        If the consumer stops early (the client went away), the generation is closed
        and the response ends ``cancelled``.
        """
        summary = wants_summary(self.response.reasoning)
        builder = OutputBuilder(self.response.output, self.logprobs, summary=summary)
        entries: list[Any] = []  # the reply's log-probability entries so far

        def render(event: ChoiceEvent) -> list[Event]:
            """The Responses events one choice event becomes."""
            if isinstance(event, ProgramEvent):
                return [{**event.event, "type": f"mellea.{event.event['type']}"}]
            if isinstance(event, Role):
                return []
            if event.logprobs:  # type: ignore[union-attr]
                entries.extend(event.logprobs)  # type: ignore[union-attr]
                builder.reply_logprobs(entries)
            return self._output_events(builder, event)  # type: ignore[arg-type]

        rendered = render_events(self.reader.events(), render)
        settled = False
        finishing: asyncio.Future[dict[str, Any]] | None = None
        try:
            await _settled(self.sink.started(self.response.wire()))
            yield self._stamp({"type": "response.created", "response": self.response.wire()})
            yield self._stamp({"type": "response.in_progress", "response": self.response.wire()})
            async for item in rendered:
                yield self._stamp(item)
            settled = True
        except ReplyCancelled:
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
            if not settled:
                builder.abandon()
                self.response.status = "cancelled"
                final = self.sink.finished(self.response.wire())
                if inspect.isawaitable(final):  # the store's write goes on if we are cancelled
                    finishing = asyncio.ensure_future(final)
                else:
                    self.final = final
            await close_stream(rendered)
            if finishing is not None:
                self.final = await asyncio.shield(finishing)
        self.final = await _settled(self.sink.finished(self.response.wire()))
        yield self._stamp(terminal_event(self.final))

    def _output_events(
        self, builder: OutputBuilder, event: TextDelta | ReasoningDelta | ToolCallEvent | Finish
    ) -> list[Event]:
        """What one event of the choice adds to the output, and the events announcing it."""
        if isinstance(event, ReasoningDelta):
            return builder.reasoning(event.text)
        if isinstance(event, TextDelta):
            return builder.text(event.text)
        if isinstance(event, ToolCallEvent):
            status = "completed" if event.complete else "incomplete"
            call_id = event.call_id or new_call_id()
            return builder.function_call(call_id, event.name, event.arguments, status)
        return self._finish(builder, event)

    def _finish(self, builder: OutputBuilder, finish: Finish) -> list[Event]:
        """Close the output and settle the status, usage and report."""
        reason = _INCOMPLETE_REASONS.get(finish.reason)
        events = builder.finish("incomplete" if reason else "completed")
        # Zeros when the program answered without a model call: OpenAI always sends usage.
        usage = with_calls(finish.usage, list(finish.other_calls)) or Usage()
        response = self.response
        response.usage = ResponseUsage.from_usage(usage)
        response.mellea = finish.report
        if reason:
            response.status = "incomplete"
            response.incomplete_details = {"reason": reason}
        else:
            response.status = "completed"
            response.completed_at = int(time.time())
        observer = self.reader.observer
        if observer is not None:
            observer.on_finish(usage)
        return events

    def _stamp(self, event: Event) -> dict[str, Any]:
        stamped = {"type": event["type"], "sequence_number": self._sequence, **event}
        self._sequence += 1
        return stamped


async def _settled(value: T | Awaitable[T]) -> T:
    """``value``, awaited if it is awaitable."""
    return await value if inspect.isawaitable(value) else value


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

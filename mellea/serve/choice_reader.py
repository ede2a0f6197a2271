"""Reading one choice of a reply: the program's live events, then its thunk's text, as
:mod:`mellea.serve.choice_events`.

This is the only place a thunk is read for the wire. Chat completions, text completions
and Responses render its events, streamed or folded into a whole reply.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import AsyncIterator, Awaitable, Iterator
from typing import Any, Protocol, TypeVar

from mellea.core.parsers import ReplyDelta, ReplyParser
from mellea.core.thunk import ModelOutputThunk
from mellea.core.trace import ProgramTrace
from mellea.serve.choice_events import (
    ChoiceEvent,
    Failed,
    Finish,
    Logprobs,
    ProgramEvent,
    PromptScores,
    ReasoningDelta,
    Role,
    TextDelta,
    ToolCallEvent,
)
from mellea.serve.closing import close_source
from mellea.serve.deadline import before
from mellea.serve.errors import StreamTimeoutError
from mellea.serve.program_report import other_calls, program_report
from mellea.serve.protocol import FinishReason
from mellea.serve.usage import usage_of

T = TypeVar("T")
ThunkSource = ModelOutputThunk | Awaitable[ModelOutputThunk]


class ReplyCancelled(Exception):
    """The reply was cancelled by its client (``POST /v1/responses/{id}/cancel``)."""


class Cancellation(Protocol):
    """What a cancellable reply waits on (:class:`mellea.serve.responses.CancelSignal`)."""

    async def wait(self) -> None:
        """Return once the reply is cancelled."""


class StreamObserver(Protocol):
    """Watches a reply go out (the server uses it for latency and token metrics)."""

    def on_content(self) -> None:
        """More of the reply's text arrived."""

    def on_finish(self, usage: Any) -> None:
        """The reply finished; ``usage`` is what the backend reported, if anything."""


class ThunkReader:
    """Hands out a thunk's text with a cursor of its own.

    ``astream()`` keeps one cursor per thunk, shared with the program: a program that
    validated, awaited or streamed its thunk before returning it has moved that cursor
    to the end. The server reads with this reader instead, so the client receives the
    whole text exactly once, from its first character.
    """

    def __init__(self, thunk: ModelOutputThunk) -> None:
        """A reader positioned at the start of ``thunk``'s text."""
        self.thunk = thunk
        self._sent = 0

    async def next(self) -> str:
        """Wait for more text and return what this reader has not handed out yet.

        Returns ``""`` once the thunk is computed and all of its text was handed out.
        """
        if not self.thunk.is_computed():
            await self.thunk.astream()  # pulls at least one more chunk from the backend
        text = self.thunk.text_so_far()
        new = text[self._sent :]
        self._sent = len(text)
        return new

    def done(self) -> bool:
        """Whether every character of the finished thunk has been handed out."""
        return self.thunk.is_computed() and self._sent >= len(self.thunk.text_so_far())


class ChoiceReader:
    """Reads one choice: :meth:`events` yields its :mod:`choice events
    <mellea.serve.choice_events>` from the program's live events to the finish.

    ``source`` is the thunk, or the program call while it still runs. With a ``parser``
    the text is split into reasoning, content and tool calls. Every wait ends at the
    ``deadline`` (a ``time.monotonic()`` value) or when ``cancel`` fires. With the
    program's ``trace``, a live trace's events come first and the finish carries the
    program's report. With ``prompt_scores``, the thunk's prompt log-probabilities come
    as one :class:`PromptScores` before the first text (or the finish).
    """

    def __init__(
        self,
        source: ThunkSource,
        *,
        parser: ReplyParser | None = None,
        deadline: float | None = None,
        trace: ProgramTrace | None = None,
        cancel: Cancellation | None = None,
        observer: StreamObserver | None = None,
        prompt_scores: bool = False,
    ) -> None:
        """A reader of ``source``; nothing happens until :meth:`events` is iterated."""
        self.source = source
        self.parser = parser
        self.deadline = deadline
        self.trace = trace
        self.cancel = cancel
        self.observer = observer
        self.prompt_scores = prompt_scores  # still to be sent, when true
        self.thunk: ModelOutputThunk | None = None
        self._logprobs_sent = 0
        self._calls = 0
        self._reasoning: list[str] = []
        self._cancelled: asyncio.Future[None] | None = None
        self._pending: asyncio.Future[Any] | None = None

    @property
    def live(self) -> bool:
        """Whether the client follows this choice's program events."""
        return self.trace is not None and self.trace.live

    async def events(self) -> AsyncIterator[ChoiceEvent]:
        """The choice's events; a failure is the last one (:class:`Failed`).

        If the consumer stops early (the client left), the program call is cancelled and
        the thunk closed, which stops its generation.
        """
        failure: Exception | None = None
        try:
            if self.live:
                async for event in self._program_events():
                    yield ProgramEvent(event)
            source = self.source
            thunk = await self._wait(source) if inspect.isawaitable(source) else source
            self.thunk = thunk
            yield Role()
            reader = ThunkReader(thunk)
            while True:
                text = await self._wait(reader.next())
                if self.live:  # events of a program's validated stream, read with its text
                    for event in self.trace.queued_events():  # type: ignore[union-attr]
                        yield ProgramEvent(event)
                if self.prompt_scores and (text or thunk.is_computed()):
                    self.prompt_scores = False
                    yield PromptScores(tuple(thunk.prompt_logprobs or ()))
                if text:
                    if self.observer is not None:
                        self.observer.on_content()
                    if self.parser is None:  # inline: no generator per chunk
                        yield TextDelta(text, self._new_logprobs())
                    else:
                        for event in self._parsed(self.parser.feed(text)):
                            yield event
                elif thunk.is_computed():
                    break
            if self.parser is not None:
                for event in self._parsed(self.parser.finish()):
                    yield event
            for event in self._returned_calls(thunk):
                yield event
            yield self._finish(thunk)
        except (asyncio.CancelledError, GeneratorExit):
            raise
        except Exception as exc:
            failure = exc
        finally:
            if self._cancelled is not None:
                self._cancelled.cancel()
            await close_source(self.thunk or self.source, self._pending)
        if failure is not None:
            yield Failed(failure)  # after the close: a consumer that stops here leaves nothing

    def _parsed(self, delta: ReplyDelta) -> Iterator[ChoiceEvent]:
        if delta.reasoning:
            self._reasoning.append(delta.reasoning)
            yield ReasoningDelta(delta.reasoning, self._new_logprobs())
        if delta.content:
            yield TextDelta(delta.content, self._new_logprobs())
        for call in delta.tool_calls:
            self._calls += 1
            yield ToolCallEvent(
                call.id, call.name or "", call.arguments or "", logprobs=self._new_logprobs()
            )

    def _returned_calls(self, thunk: ModelOutputThunk) -> Iterator[ToolCallEvent]:
        """The calls the backend returned beside the text (cut ones when it stopped short)."""
        cut = thunk.finish_reason in ("length", "content_filter")
        for call in thunk.tool_calls or []:
            self._calls += 1
            partial = call.partial_arguments is not None
            yield ToolCallEvent(
                call.id,
                call.name,
                call.arguments_json,
                complete=not (cut and partial),
                logprobs=self._new_logprobs(),
            )

    def _finish(self, thunk: ModelOutputThunk) -> Finish:
        return Finish(
            reason=finish_reason_of(thunk, self._calls > 0),
            usage=usage_of(thunk, "".join(self._reasoning)),
            report=program_report(self.trace, thunk),
            other_calls=tuple(other_calls(self.trace, thunk)),
            logprobs=self._new_logprobs(),
        )

    def _new_logprobs(self) -> Logprobs:
        """The thunk's log-probability entries not yet given to an event."""
        entries = (self.thunk.logprobs if self.thunk is not None else None) or []
        if len(entries) <= self._logprobs_sent:
            return ()
        new = tuple(entries[self._logprobs_sent :])
        self._logprobs_sent = len(entries)
        return new

    async def _program_events(self) -> AsyncIterator[dict[str, Any]]:
        """The live program events until the program returns."""
        assert self.trace is not None
        source = self.source
        work = asyncio.ensure_future(source) if inspect.isawaitable(source) else None
        self.source = work if work is not None else source
        events = self.trace.events_while(work)
        try:
            while True:
                try:
                    event = await self._wait(anext(events))
                except StopAsyncIteration:
                    return
                yield event
        finally:
            await events.aclose()

    async def _wait(self, awaitable: Awaitable[T]) -> T:
        """Await ``awaitable`` unless the deadline passes or the reply is cancelled first."""
        if self.cancel is None:
            if self.deadline is None:
                return await awaitable
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
        task.cancel()
        await asyncio.wait({task})  # let it unwind, so its thunk can be closed after it
        if self._cancelled in done:
            raise ReplyCancelled
        raise StreamTimeoutError


def finish_reason_of(thunk: ModelOutputThunk, calls: bool = False) -> FinishReason:
    """``length`` when cut short (also in the middle of a tool call, as OpenAI has it),
    ``tool_calls`` when the reply calls tools (``calls``: it held some), else ``stop``."""
    if thunk.finish_reason in ("length", "content_filter"):
        return thunk.finish_reason  # type: ignore[return-value]
    if calls or thunk.tool_calls:
        return "tool_calls"
    return "stop"

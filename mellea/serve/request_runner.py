"""The request runner: every generating route's orchestration, written once.

A route parses its body, builds one program call per choice and a :class:`Reply` (how its
endpoint turns the choices' thunks into a whole reply or a stream), and hands both to
:meth:`RequestRunner.run`, which owns the rest: the deadline, one program trace per choice,
the program calls as tasks, the wait for a first result before committing a stream to a 200,
the whole or streamed reply, cancelling the work when the client leaves, and turning
failures into OpenAI errors.

Framework-free: the client's presence comes in as an ``is_disconnected`` callable, and a
run ends in a whole reply, a :class:`ClientLeft`, or an :class:`~mellea.serve.frames.EventStream`
of frames that the server writes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from mellea.core.parsers import ReplyParser
from mellea.core.thunk import ModelOutputThunk
from mellea.core.trace import ProgramTrace
from mellea.serve.choice_reader import Cancellation, ChoiceReader, StreamObserver, ThunkSource
from mellea.serve.closing import stop_sources
from mellea.serve.deadline import before
from mellea.serve.errors import as_openai_error
from mellea.serve.frames import EventStream, Frames
from mellea.serve.program_call import run_program

log = logging.getLogger("mellea.serve")
T = TypeVar("T")

DISCONNECT_POLL_SECONDS = 0.25
CLIENT_LEFT = 499  # the status of a reply whose client left first; only the access log sees it

IsDisconnected = Callable[[], Awaitable[bool]]

__all__ = ["ClientLeft", "EventStream", "Frames", "Reply", "RequestRunner", "ThunkSource"]


@dataclass(frozen=True)
class ClientLeft:
    """The end of a whole reply whose client left first (the access log shows 499)."""

    status_code: int = CLIENT_LEFT


@dataclass(frozen=True)
class RunLimits:
    """The server's settings a request runs under."""

    request_timeout: float | None = None  # seconds from arrival to the end of the reply
    first_result_wait: float = 1.0  # how long a stream waits for a fast failure
    keepalive_seconds: float = 5.0


class RunHooks(Protocol):
    """What the server adds around a run: traces with its spans, and its metrics."""

    def new_trace(self, live: bool) -> ProgramTrace:
        """The trace one program call reports into (``live``: its events are streamed)."""

    def program_started(self, task: asyncio.Future[Any], trace: ProgramTrace) -> None:
        """A program call is running as ``task``."""

    def observer(self, started: float, streamed: bool) -> StreamObserver | None:
        """What watches the reply go out (``started``: the request's ``time.monotonic()``)."""


class NoHooks:
    """Plain traces and no metrics."""

    def new_trace(self, live: bool) -> ProgramTrace:
        """A fresh trace."""
        return ProgramTrace(live=live)

    def program_started(self, task: asyncio.Future[Any], trace: ProgramTrace) -> None:
        """Nothing to count."""

    def observer(self, started: float, streamed: bool) -> StreamObserver | None:
        """Nothing watches."""
        return None


@dataclass
class Choices:
    """One request's program calls, one per choice, and what their reply runs under."""

    tasks: list[asyncio.Future[ModelOutputThunk]]
    traces: list[ProgramTrace]
    deadline: float | None  # a ``time.monotonic()`` value
    observer: StreamObserver | None

    async def build(self, make: Callable[[list[ModelOutputThunk]], Awaitable[T]]) -> T:
        """Await every choice's thunk, then ``make`` the reply from them, within the deadline
        (past it, :class:`mellea.serve.errors.StreamTimeoutError`)."""
        thunks = [await before(self.deadline, task) for task in self.tasks]
        return await before(self.deadline, make(thunks))

    def readers(
        self,
        sources: Sequence[ThunkSource] | None = None,
        parsers: Sequence[ReplyParser | None] | None = None,
        cancel: Cancellation | None = None,
        prompt_scores: bool = False,
    ) -> list[ChoiceReader]:
        """One reader per choice, of ``sources`` (by default the program calls), each with
        its parser, its trace, the deadline and the observer (and ``prompt_scores``: see
        :class:`ChoiceReader`)."""
        sources = self.tasks if sources is None else sources
        return [
            ChoiceReader(
                source,
                parser=parsers[index] if parsers else None,
                deadline=self.deadline,
                trace=self.traces[index] if self.traces else None,
                cancel=cancel,
                observer=self.observer,
                prompt_scores=prompt_scores,
            )
            for index, source in enumerate(sources)
        ]


class Reply(ABC, Generic[T]):
    """How one endpoint turns its choices into a reply (set ``stream`` and ``live``)."""

    stream: bool = False  # the client asked for a stream
    live: bool = False  # the client follows the programs' events

    def guard(self, call: Awaitable[ModelOutputThunk]) -> Awaitable[ModelOutputThunk]:
        """A program call as this endpoint awaits it (e.g. to rename an error's ``param``)."""
        return call

    @abstractmethod
    async def whole(self, choices: Choices) -> T:
        """The non-streamed reply, within ``choices.deadline`` (tell ``choices.observer``
        its usage)."""

    @abstractmethod
    def events(self, choices: Choices, sources: list[ThunkSource]) -> Frames:
        """The streamed reply's SSE events; ``sources[i]`` is choice ``i``'s thunk, or its
        program call when that is still running."""


class RequestRunner:
    """Runs requests under one app's :class:`RunLimits` and :class:`RunHooks`."""

    def __init__(self, limits: RunLimits, hooks: RunHooks | None = None) -> None:
        """A runner; it holds no per-request state."""
        self.limits = limits
        self.hooks: RunHooks = hooks or NoHooks()

    async def run(
        self,
        calls: Sequence[Awaitable[Any]],
        reply: Reply[T],
        is_disconnected: IsDisconnected,
        started: float | None = None,
    ) -> T | ClientLeft | EventStream:
        """Run the program ``calls`` (one per choice) and answer with ``reply``.

        A whole reply is ``reply.whole``'s result, or :class:`ClientLeft` when the client
        left first (which cancels the work); past the deadline it is a 504. A stream starts
        once every call has returned or ``first_result_wait`` passed (a live client's
        first program event ends the wait sooner), so a call that fails fast still gets
        its real status. The deadline counts from ``started`` (a ``time.monotonic()``
        value; by default now), when the request arrived.
        """
        started = time.monotonic() if started is None else started
        timeout = self.limits.request_timeout
        deadline = started + timeout if timeout else None
        choices = self._start(calls, reply, deadline, started)
        if not reply.stream:
            result = await unless_disconnected(is_disconnected, _whole(reply, choices))
            return ClientLeft() if result is None else result
        await self._first_results(choices)
        sources: list[ThunkSource] = [
            task.result() if task.done() else task for task in choices.tasks
        ]
        return EventStream(reply.events(choices, sources), self.limits.keepalive_seconds)

    def _start(
        self,
        calls: Sequence[Awaitable[Any]],
        reply: Reply[Any],
        deadline: float | None,
        started: float,
    ) -> Choices:
        traces = [self.hooks.new_trace(reply.live and reply.stream) for _ in calls]
        tasks = [
            asyncio.ensure_future(reply.guard(run_program(call, trace)))
            for call, trace in zip(calls, traces, strict=True)
        ]
        for task, trace in zip(tasks, traces, strict=True):
            self.hooks.program_started(task, trace)
        return Choices(tasks, traces, deadline, self.hooks.observer(started, reply.stream))

    async def _first_results(self, choices: Choices) -> None:
        """Give the programs a moment; a call that failed raises here (the rest are stopped)."""
        events = [
            asyncio.ensure_future(trace.first_event.wait())
            for trace in choices.traces
            if trace.first_event
        ]
        try:
            until = asyncio.FIRST_COMPLETED if events else asyncio.ALL_COMPLETED
            wait = self.limits.first_result_wait
            await asyncio.wait([*choices.tasks, *events], timeout=wait, return_when=until)
            for task in choices.tasks:
                if task.done():
                    task.result()
        except BaseException:
            await stop_sources(choices.tasks)
            raise
        finally:
            for waiter in events:
                waiter.cancel()


async def _whole(reply: Reply[T], choices: Choices) -> T:
    """``reply.whole``, its failures as OpenAI errors (504 past the deadline); the work is
    stopped on the way out."""
    try:
        return await reply.whole(choices)
    except Exception as exc:
        raise as_openai_error(exc) from None
    finally:
        await stop_sources(choices.tasks)


async def unless_disconnected(is_disconnected: IsDisconnected, work: Awaitable[T]) -> T | None:
    """Await ``work`` for a non-streamed reply; ``None`` if the client left first.

    Leaving cancels ``work``, which closes the generation, so nobody's reply keeps
    the engine busy.
    """
    task = asyncio.ensure_future(work)

    async def gone() -> None:
        while not await is_disconnected():
            await asyncio.sleep(DISCONNECT_POLL_SECONDS)

    watcher = asyncio.ensure_future(gone())
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        task.cancel()  # the request itself was cancelled (e.g. the server is stopping)
        raise
    finally:
        watcher.cancel()
    if task.done():
        return task.result()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    log.info("client left before its reply was ready; generation cancelled")
    return None

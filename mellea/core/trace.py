"""The program trace: what a generative program did while it served one request.

A server (or any caller) that wants to know how a program reached its answer creates a
:class:`ProgramTrace` and runs the program inside :func:`recording`. The session reports
into whatever trace is current: every model call (why it was made, its token usage once
done), every attempt of a sampling strategy, every requirement verdict, and which attempt
was chosen. Nothing is recorded when no trace is current; the session's only cost then is
one context-variable read per call.

The trace lives in a context variable, so it follows the program into the tasks it
starts, into the worker thread a sync ``serve()`` runs in, and onto the background loop
of the sync session methods (:func:`mellea.core._sync.run_sync` runs there in a copy
of the caller's context). A *live* trace also queues events for a streaming reply; they
may be reported from any thread and arrive on the loop that created the trace.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mellea.core.requirement import Requirement, ValidationResult
    from mellea.core.sampling import SamplingResult
    from mellea.core.thunk import GenerationChunk, ModelOutputThunk

_current: ContextVar[ProgramTrace | None] = ContextVar("mellea_program_trace", default=None)

Event = dict[str, Any]
# The key of a thunk's ``meta`` under which a backend notes the LoRA/aLoRA adapter it
# generated with (None: the base model), for the report of the calls.
ADAPTER_META = "adapter"


def current_trace() -> ProgramTrace | None:
    """The trace the running program reports into, or ``None`` when nobody records."""
    return _current.get()


@contextmanager
def recording(trace: ProgramTrace | None) -> Iterator[ProgramTrace | None]:
    """Make ``trace`` current for the code inside the block (``None`` records nothing)."""
    token = _current.set(trace)
    try:
        yield trace
    finally:
        _current.reset(token)


@dataclass
class ModelCall:
    """One generation the program asked for, and why.

    ``purpose`` is ``attempt`` (an attempt of a sampling strategy), ``requirement`` (a
    model judging a requirement), ``chat`` or ``generate`` (a single instruction).
    """

    purpose: str
    thunk: ModelOutputThunk
    attempt: int | None = None
    requirement: str | None = None
    model: str | None = None
    started_ns: int = field(default_factory=time.time_ns)
    first_token_ns: int | None = None  # only on a ``timed`` trace
    ended_ns: int | None = None  # only on a ``timed`` trace

    @property
    def usage(self) -> dict[str, Any] | None:
        """The token counts the backend reported (``None`` until the call is done)."""
        return self.thunk.usage

    @property
    def adapter(self) -> str | None:
        """The adapter the backend generated with, as it noted (None: the base model,
        or a backend that does not say)."""
        return self.thunk.meta.get(ADAPTER_META)


@dataclass
class Verdict:
    """A requirement's verdict on one attempt."""

    description: str | None
    passed: bool
    reason: str | None = None
    score: float | None = None
    started_ns: int | None = None
    ended_ns: int | None = None

    def wire(self) -> dict[str, Any]:
        """The verdict as JSON-ready data."""
        return {
            "description": self.description,
            "passed": self.passed,
            "reason": self.reason,
            "score": self.score,
        }


@dataclass
class Attempt:
    """One attempt of a sampling strategy: its generation and the verdicts on it."""

    index: int
    thunk: ModelOutputThunk
    verdicts: list[Verdict] = field(default_factory=list)
    sent: int = 0  # characters of its text already sent as live events
    run: int = 0  # the sampling run it belongs to


@dataclass
class Sampling:
    """One run of a sampling strategy (an ``instruct`` with requirements)."""

    run: int = 0  # its place among the program's sampling runs
    attempts: list[Attempt] = field(default_factory=list)
    chosen: int | None = None
    success: bool | None = None

    def chosen_attempt(self) -> Attempt | None:
        """The attempt the strategy kept, once it has decided."""
        for attempt in self.attempts:
            if attempt.index == self.chosen:
                return attempt
        return None


class ProgramTrace:
    """What one program run did: its model calls and its sampling runs.

    With ``live=True`` (create it inside the event loop that will read the events) the
    trace also queues an event for each attempt start, each piece of an attempt's text
    as it is generated, each requirement verdict and each choice of an attempt; read
    them with :meth:`events_while`.
    """

    def __init__(self, live: bool = False, timed: bool = False) -> None:
        """An empty trace; a live one belongs to the running event loop.

        A ``timed`` trace also notes when each model call's first text arrived and
        when it finished (for spans); otherwise only its start is noted.
        """
        self.calls: list[ModelCall] = []
        self.samplings: list[Sampling] = []
        self.chunk_checks: list[Event] = []  # validated streaming's verdicts, per chunk
        self.timed = timed
        self.started_ns = time.time_ns()
        self.returned_ns: int | None = None  # when the program returned
        self._loop = asyncio.get_running_loop() if live else None
        self._queue: asyncio.Queue[Event] | None = asyncio.Queue() if live else None
        self.first_event = asyncio.Event() if live else None

    @property
    def live(self) -> bool:
        """Whether events are queued for a streaming reply."""
        return self._loop is not None

    # -- reporting (the session calls these) -----------------------------------

    def model_call(
        self,
        thunk: ModelOutputThunk,
        purpose: str,
        *,
        attempt: int | None = None,
        requirement: str | None = None,
        model: str | None = None,
    ) -> None:
        """Record a generation the program started (``model``: the backend's model id)."""
        call = ModelCall(purpose, thunk, attempt, requirement, model)
        self.calls.append(call)
        if self.timed:
            if thunk.is_computed():
                call.first_token_ns = call.ended_ns = call.started_ns
            else:
                _tap(thunk, lambda text: _first_token(call), lambda: _ended(call))

    def program_returned(self) -> None:
        """The program call has returned (its reply may still be generating)."""
        self.returned_ns = time.time_ns()

    def sampling_started(self) -> Sampling:
        """A sampling strategy begins; pass the returned run to the calls about it."""
        run = Sampling(run=len(self.samplings))
        self.samplings.append(run)
        return run

    def attempt_started(
        self,
        index: int,
        thunk: ModelOutputThunk,
        model: str | None = None,
        run: Sampling | None = None,
    ) -> None:
        """Attempt ``index`` of sampling ``run`` (default: the latest) is generating ``thunk``."""
        if run is None:
            run = self.samplings[-1] if self.samplings else self.sampling_started()
        self.model_call(thunk, "attempt", attempt=index, model=model)
        record = Attempt(index, thunk, run=run.run)
        run.attempts.append(record)
        if self.live:
            self._emit({"type": "attempt.started", "run": run.run, "attempt": index})
            _tap(thunk, lambda text: self._attempt_text(record, text), None)

    def judged(
        self,
        thunk: ModelOutputThunk,
        requirement: Requirement,
        model: str | None = None,
        output: ModelOutputThunk | None = None,
    ) -> None:
        """A model call judging ``requirement`` on ``output`` (an attempt, if sampling)."""
        attempt = self._attempt_of(output) if output is not None else None
        self.model_call(
            thunk,
            "requirement",
            attempt=attempt.index if attempt is not None else None,
            requirement=requirement.description,
            model=model,
        )

    def requirement_checked(
        self,
        thunk: ModelOutputThunk,
        requirement: Requirement,
        result: ValidationResult,
        started_ns: int | None = None,
    ) -> None:
        """``requirement``'s verdict on the attempt that generated ``thunk`` (a check
        that began at ``started_ns`` and ends now)."""
        verdict = Verdict(
            None if requirement.description is None else str(requirement.description),
            bool(result),
            None if result.reason is None else str(result.reason),
            _number(result.score),
            started_ns,
            time.time_ns(),
        )
        attempt = self._attempt_of(thunk)
        if attempt is None:
            return
        attempt.verdicts.append(verdict)
        if self.live:
            self._flush(attempt)
            self._emit(
                {
                    "type": "requirement.checked",
                    "run": attempt.run,
                    "attempt": attempt.index,
                    **verdict.wire(),
                }
            )

    def chunk_checked(self, check: Event) -> None:
        """Validated streaming's verdicts on one chunk (``chunk``, ``text``, ``passed``,
        ``requirements``): kept for the report and, live, sent as a ``chunk.checked`` event."""
        for verdict in check.get("requirements", []):
            verdict["score"] = _number(verdict.get("score"))
        self.chunk_checks.append(check)
        if self.live:
            self._emit({"type": "chunk.checked", **check})

    def sampled(self, result: SamplingResult, run: Sampling | None = None) -> None:
        """Sampling ``run`` (default: the latest) kept attempt ``result.result_index``."""
        if run is None and not self.samplings:
            return
        sampling = run if run is not None else self.samplings[-1]
        sampling.chosen = result.result_index
        sampling.success = result.success
        if self.live:
            for attempt in sampling.attempts:
                self._flush(attempt)
            self._emit(
                {
                    "type": "attempt.chosen",
                    "run": sampling.run,
                    "attempt": result.result_index,
                    "requirements_met": result.success,
                    "attempt_count": len(sampling.attempts),
                }
            )

    # -- reading (the server calls these) ---------------------------------------

    def sampling_for(self, thunk: ModelOutputThunk) -> Sampling | None:
        """The sampling run that chose ``thunk`` (else the latest one), if any."""
        for sampling in reversed(self.samplings):
            chosen = sampling.chosen_attempt()
            if chosen is not None and chosen.thunk is thunk:
                return sampling
        return self.samplings[-1] if self.samplings else None

    async def events_while(self, work: asyncio.Future[Any] | None) -> AsyncIterator[Event]:
        """The queued events as they come, until ``work`` is done; then those left over.

        With no ``work`` (the program already returned) only the queued events.
        """
        queue = self._queue
        if queue is None:
            return
        while work is not None and not work.done():
            getter = asyncio.ensure_future(queue.get())
            try:
                await asyncio.wait({getter, work}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                if not getter.done():
                    getter.cancel()
            if getter.done() and not getter.cancelled():
                yield getter.result()
        while not queue.empty():
            yield queue.get_nowait()

    def queued_events(self) -> list[Event]:
        """The live events queued so far and not yet read (without waiting for more)."""
        queue = self._queue
        events: list[Event] = []
        while queue is not None and not queue.empty():
            events.append(queue.get_nowait())
        return events

    # -- internals -------------------------------------------------------------

    def _attempt_of(self, thunk: ModelOutputThunk) -> Attempt | None:
        for sampling in reversed(self.samplings):
            for attempt in sampling.attempts:
                if attempt.thunk is thunk:
                    return attempt
        return None

    def _attempt_text(self, attempt: Attempt, text: str) -> None:
        attempt.sent += len(text)
        self._emit(
            {"type": "attempt.delta", "run": attempt.run, "attempt": attempt.index, "text": text}
        )

    def _flush(self, attempt: Attempt) -> None:
        """Send what an attempt generated without passing through the tap (computed thunks)."""
        rest = attempt.thunk.text_so_far()[attempt.sent :]
        if rest:
            self._attempt_text(attempt, rest)

    def _emit(self, event: Event) -> None:
        loop = self._loop
        if loop is None:
            return
        try:
            here = asyncio.get_running_loop()
        except RuntimeError:
            here = None
        if here is loop:
            self._put(event)
        else:
            try:
                loop.call_soon_threadsafe(self._put, event)
            except RuntimeError:  # the server's loop is gone: nobody reads the events
                pass

    def _put(self, event: Event) -> None:
        assert self._queue is not None and self.first_event is not None
        self._queue.put_nowait(event)
        self.first_event.set()


def _number(score: Any) -> float | None:
    """A validator's score as a JSON number (``None`` if it is not one)."""
    try:
        value = float(score)
    except (TypeError, ValueError):
        return None
    return value if value == value and abs(value) != float("inf") else None


TextHook = Callable[[str], None]


def _tap(thunk: ModelOutputThunk, on_text: TextHook, on_end: Callable[[], None] | None) -> None:
    """Have ``on_text(text)`` called with each piece of ``thunk``'s text as it arrives,
    and ``on_end()`` once its stream has ended."""
    # The thunk is in this package; the trace watches the stream it was given.
    source = thunk._source
    if source is None:
        return
    thunk._source = _watched(source, on_text, on_end)


def _first_token(call: ModelCall) -> None:
    if call.first_token_ns is None:
        call.first_token_ns = time.time_ns()


def _ended(call: ModelCall) -> None:
    call.ended_ns = time.time_ns()


async def _watched(
    source: AsyncIterator[GenerationChunk], on_text: TextHook, on_end: Callable[[], None] | None
) -> AsyncIterator[GenerationChunk]:
    try:
        async for chunk in source:
            if chunk.text:
                on_text(chunk.text)
            yield chunk
    finally:
        if on_end is not None:
            on_end()
        closer = getattr(source, "aclose", None)
        if closer is not None:
            await closer()

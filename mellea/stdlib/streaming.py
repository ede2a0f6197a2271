"""Validated streaming: ``stream()`` yields a generation chunk by chunk, each chunk
checked by the requirements' ``stream_validate`` before the caller sees it.

A chunk that any requirement fails stops the stream (the generation is closed, so
the engine stops spending on it). A stream that reaches its end runs every
requirement's full ``validate``. The typed events (:class:`ChunkEvent` ...) go to
``streaming_event`` plugin hooks when :mod:`mellea.plugins` has any registered.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from copy import copy
from dataclasses import dataclass, field
from typing import Any

from mellea.core.backend import Backend
from mellea.core.base import CBlock, Component, Context
from mellea.core.model_options import ModelOption
from mellea.core.requirement import PartialValidationResult, Requirement, ValidationResult
from mellea.core.thunk import GenerationChunk, ModelOutputThunk
from mellea.core.trace import current_trace
from mellea.stdlib.backend_bridge import messages_for
from mellea.stdlib.chunking import Chunker, ChunkingStrategy, resolve_chunking_strategy


@dataclass
class StreamEvent:
    """What happened in a stream, and when (``timestamp``, set on creation)."""

    timestamp: float = field(default_factory=time.time, init=False)


@dataclass
class ChunkEvent(StreamEvent):
    """A chunk passed its checks and was handed to the caller."""

    text: str
    chunk_index: int
    attempt: int


@dataclass
class QuickCheckEvent(StreamEvent):
    """The requirements' verdicts on one chunk (only when there are requirements)."""

    chunk_index: int
    attempt: int
    passed: bool
    results: list[PartialValidationResult]


@dataclass
class StreamingDoneEvent(StreamEvent):
    """Every chunk was checked and handed out; the generation ended on its own."""

    attempt: int
    full_text: str


@dataclass
class FullValidationEvent(StreamEvent):
    """The requirements' verdicts on the whole output, after a stream that ran to its end."""

    attempt: int
    passed: bool
    results: list[ValidationResult]


@dataclass
class RetryEvent(StreamEvent):
    """Reserved, as upstream: a stream is not retried (call ``stream`` again)."""

    attempt: int
    reason: str


@dataclass
class CompletedEvent(StreamEvent):
    """The last event of every stream; ``full_text`` is what was handed out."""

    success: bool
    full_text: str
    attempts_used: int


@dataclass
class ErrorEvent(StreamEvent):
    """An exception stopped the stream."""

    exception_type: str
    detail: str


async def _hook(kind: str, payload_name: str, **fields: Any) -> None:
    """Call the plugins registered for ``kind``, when the plugin system has any."""
    try:  # the plugin system is optional here: without it there is nobody to tell
        from mellea.plugins.hooks import streaming as payloads
        from mellea.plugins.manager import has_plugins, invoke_hook
        from mellea.plugins.types import HookType
    except ImportError:
        return
    hook_type = getattr(HookType, kind, None)
    payload_cls = getattr(payloads, payload_name, None)
    if hook_type is None or payload_cls is None or not has_plugins(hook_type):
        return
    await invoke_hook(hook_type, payload_cls(**fields))


async def _emit(streaming_id: str, event: StreamEvent, requirements: list[Requirement]) -> None:
    await _hook(
        "STREAMING_EVENT",
        "StreamingEventPayload",
        streaming_id=streaming_id,
        event=event,
        requirements=requirements if isinstance(event, QuickCheckEvent) else [],
    )


class Streamer:
    """The handle ``stream()`` returns: iterate it (``async for``) for the checked chunks.

    Use it as ``async with await stream(...) as s:`` so that leaving the block, by
    any path, closes the generation. After the stream: ``full_text`` (what was handed
    out), ``completed_normally``, ``failed_early`` / ``failure_reason`` /
    ``streaming_failures`` (the chunk verdicts that stopped it), ``final_validations``
    (the whole-output verdicts), ``mot`` (the computed thunk after a natural end),
    ``events`` (every event, ours: upstream only sends them to plugins).
    """

    def __init__(
        self,
        mot: ModelOutputThunk,
        ctx: Context,
        chunking: ChunkingStrategy | None,
        requirements: list[Requirement],
        validation_backend: Backend,
        streaming_id: str,
    ) -> None:
        self.failed_early = False
        self.completed_normally = False
        self.failure_reason: str | None = None
        self.streaming_failures: list[tuple[Requirement, PartialValidationResult]] = []
        self.full_text = ""
        self.mot: ModelOutputThunk | None = None
        self.final_validations: list[ValidationResult] = []
        self.streaming_id = streaming_id
        self.events: list[StreamEvent] = []
        self._thunk = mot
        self._ctx = ctx
        self._requirements = requirements
        self._backend = validation_backend
        self._chunker = Chunker(chunking) if chunking is not None else None
        self._closed = False
        self._trace = current_trace()  # the serving program's, if any: chunks are checked later
        self._gen = self._drive()

    def __aiter__(self) -> AsyncIterator[str]:
        return self._gen

    async def __aenter__(self) -> Streamer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop the stream (closing the generation if it still runs); safe to call twice."""
        await self._gen.aclose()
        await self._finish(False, None)

    def as_thunk(self) -> ModelOutputThunk:
        """A thunk whose text is what this stream hands out, as it is handed out (ours).

        Reading the thunk drives the stream: a chunk reaches the thunk only once it has
        passed its checks, so a failed chunk and everything after it never do; its
        ``finish_reason`` is then ``content_filter``. ``m serve`` serves a returned
        ``Streamer`` this way. Closing the thunk closes the stream.
        """
        return ModelOutputThunk.from_stream(self._handed_out())

    async def _handed_out(self) -> AsyncIterator[GenerationChunk]:
        sent = 0
        try:
            async for _ in self._gen:
                new = self.full_text[sent:]  # the chunk with the space before it
                sent += len(new)
                if new:
                    yield GenerationChunk(text=new)
        finally:
            await self.aclose()
        reason = "content_filter" if self.failed_early else self._thunk.finish_reason
        yield GenerationChunk(
            text=self.full_text[sent:], finish_reason=reason, usage=self._thunk.usage
        )

    async def _event(self, event: StreamEvent) -> None:
        self.events.append(event)
        await _emit(self.streaming_id, event, self._requirements)

    async def _passes(self, chunk: str, index: int, on_flush: bool) -> bool:
        """Run every requirement's ``stream_validate`` on ``chunk``, concurrently."""
        if not self._requirements:
            return True
        results = list(
            await asyncio.gather(
                *(
                    r.stream_validate(chunk, backend=self._backend, ctx=self._ctx)
                    for r in self._requirements
                )
            )
        )
        failed = [
            (r, v) for r, v in zip(self._requirements, results, strict=True) if v.success == "fail"
        ]
        await self._event(QuickCheckEvent(index, 1, not failed, results))
        if self._trace is not None:
            self._trace.chunk_checked(
                {
                    "stream": self.streaming_id,
                    "chunk": index,
                    "text": chunk,
                    "passed": not failed,
                    "requirements": [
                        {
                            "description": None if r.description is None else str(r.description),
                            "success": v.success,
                            "reason": None if v.reason is None else str(v.reason),
                            "score": v.score,
                        }
                        for r, v in zip(self._requirements, results, strict=True)
                    ],
                }
            )
        if failed:
            self.failed_early = True
            self.streaming_failures.extend(failed)
            where = " on the last chunk" if on_flush else ""
            self.failure_reason = (
                f"streaming validation failed{where}: {failed[-1][1].reason or ''}"
            )
        return not failed

    async def _drive(self) -> AsyncGenerator[str, None]:
        text = ""
        index = 0
        handed_to = 0  # end of the handed-out text within ``text``
        success = False
        error: Exception | None = None
        try:
            async for delta in self._thunk:
                text += delta
                if self._chunker is not None:
                    chunks = self._chunker.feed(delta)
                else:
                    chunks = [delta] if delta else []
                for chunk in chunks:
                    if not await self._passes(chunk, index, False):
                        return
                    handed_to = text.find(chunk, handed_to) + len(chunk)
                    self.full_text = text[:handed_to]
                    await self._event(ChunkEvent(chunk, index, 1))
                    yield chunk
                    index += 1
            for chunk in self._chunker.flush() if self._chunker is not None else []:
                if not await self._passes(chunk, index, True):
                    return
                await self._event(ChunkEvent(chunk, index, 1))
                yield chunk
                index += 1
            self.full_text = text
            self.mot = self._thunk
            self.completed_normally = True
            await self._event(StreamingDoneEvent(1, text))
            if self._requirements:
                ctx = self._ctx.add(self._thunk)
                self.final_validations = list(
                    await asyncio.gather(
                        *(r.validate(self._backend, ctx) for r in self._requirements)
                    )
                )
                passed = all(v.as_bool() for v in self.final_validations)
                await self._event(FullValidationEvent(1, passed, self.final_validations))
            success = True
        except Exception as exc:
            error = exc
            await self._event(ErrorEvent(type(exc).__name__, str(exc)))
            raise
        finally:
            await self._finish(success, error)

    async def _finish(self, success: bool, error: Exception | None) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            await self._thunk.aclose()
        finally:
            await self._event(CompletedEvent(success, self.full_text, 1))
            await _hook(
                "STREAMING_END",
                "StreamingEndPayload",
                streaming_id=self.streaming_id,
                success=success,
                failure_reason=self.failure_reason,
                exception=error,
                full_text_length=len(self.full_text),
            )


async def stream(
    action: Component[Any] | CBlock,
    backend: Backend,
    ctx: Context,
    *,
    chunking: str | ChunkingStrategy | None = None,
    requirements: Sequence[Requirement] | None = None,
    validation_backend: Backend | None = None,
    model_options: dict[str, Any] | None = None,
) -> Streamer:
    """Start generating ``action`` after ``ctx`` and return a :class:`Streamer` over it.

    ``chunking`` is a strategy, an alias (``"sentence"``, ``"word"``,
    ``"paragraph"``) or ``None`` (the backend's deltas as they come). Each
    requirement is copied first, so state its ``stream_validate`` keeps does not
    outlive the stream. ``validation_backend`` (default: ``backend``) runs the
    checks. ``model_options`` (ours) go to the generation.
    """
    strategy = resolve_chunking_strategy(chunking)
    reqs = [copy(r) for r in requirements or []]
    streaming_id = str(uuid.uuid4())
    await _hook(
        "STREAMING_START",
        "StreamingStartPayload",
        streaming_id=streaming_id,
        has_requirements=bool(reqs),
        requirement_count=len(reqs),
        chunking_strategy=type(strategy).__name__ if strategy else "none",
    )
    options = {**(model_options or {}), ModelOption.STREAM: True}
    try:
        mot = await backend.generate(messages_for(action, ctx), model_options=options)
    except Exception as exc:
        await _hook(
            "STREAMING_END",
            "StreamingEndPayload",
            streaming_id=streaming_id,
            success=False,
            exception=exc,
        )
        raise
    gen_ctx = ctx.add(action)
    return Streamer(mot, gen_ctx, strategy, reqs, validation_backend or backend, streaming_id)


__all__ = [
    "ChunkEvent",
    "CompletedEvent",
    "ErrorEvent",
    "FullValidationEvent",
    "QuickCheckEvent",
    "RetryEvent",
    "StreamEvent",
    "Streamer",
    "StreamingDoneEvent",
    "stream",
]

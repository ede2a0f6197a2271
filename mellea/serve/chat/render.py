"""One chat choice's events rendered: as stream chunks, or folded into the whole choice.

Both renderers read the same :mod:`choice events <mellea.serve.choice_events>`, so a
streamed reply and a whole one cannot differ: the whole choice's content is its text
deltas joined, its tool calls the tool-call deltas, and so on.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

from mellea.serve import choice_events as events_of
from mellea.serve.logprobs import chat_logprobs
from mellea.serve.program_report import event_object
from mellea.serve.protocol import (
    AssistantMessage,
    Choice,
    ChoiceLogprobs,
    ChunkChoice,
    ChunkToolCall,
    ChunkToolCallFunction,
    Delta,
    FinishReason,
    ResponseFunctionCall,
    ResponseToolCall,
)
from mellea.serve.rendering import fold_choice
from mellea.serve.reply_context import ReplyContext
from mellea.serve.usage import Tally

ChatChunk = ChunkChoice | dict[str, Any]  # a choice's chunk, or a live program event


class ChatChunks:
    """Renders choice ``index``'s events as stream chunks (:meth:`render`, one event at a
    time); its usage goes into ``tally``.

    Reasoning goes out as ``reasoning_content`` deltas and tool calls as ``tool_calls``
    deltas; with ``functions`` (the deprecated form) the first call goes out as
    ``function_call`` deltas, and no other. Log-probabilities ride on the next chunk
    after their tokens.
    """

    def __init__(
        self, index: int, context: ReplyContext, tally: Tally, functions: bool = False
    ) -> None:
        """A renderer of one choice of the reply ``context`` describes."""
        self.index = index
        self.context = context
        self.tally = tally
        self.functions = functions
        self.calls = 0
        self.pending: list[Any] = []  # log-probability entries not sent yet

    def render(self, event: events_of.ChoiceEvent) -> tuple[ChatChunk, ...]:
        """The chunks ``event`` becomes (a tuple: no generator per event)."""
        kind = type(event)  # each event is exactly one of these types: no isinstance chain
        if kind is events_of.TextDelta:
            self.pending += event.logprobs  # type: ignore[union-attr]
            return (self._chunk(Delta(content=event.text)),)  # type: ignore[union-attr]
        if kind is events_of.Role:
            return (ChunkChoice(index=self.index, delta=Delta(role="assistant", content="")),)
        if kind is events_of.ProgramEvent:
            return (event_object(event.event, self.index),)  # type: ignore[union-attr]
        if kind is events_of.ReasoningDelta:
            self.pending += event.logprobs  # type: ignore[union-attr]
            return (self._chunk(Delta(reasoning_content=event.text)),)  # type: ignore[union-attr]
        if kind is events_of.ToolCallEvent:
            self.pending += event.logprobs  # type: ignore[union-attr]
            return tuple(self._call_chunks(event))  # type: ignore[arg-type]
        if kind is events_of.Finish:
            assert isinstance(event, events_of.Finish)
            self.pending += event.logprobs
            self.tally.add(self.index, event)
            reason = legacy_finish(event.reason) if self.functions else event.reason
            finish = self._chunk(Delta(), finish=reason)
            if self.context.live:
                done = {"type": "program.done", **(event.report or {})}
                return (event_object(done, self.index), finish)
            return (finish,)
        return ()

    def _chunk(self, delta: Delta, finish: FinishReason | None = None) -> ChunkChoice:
        entries = _logprobs(self.pending) if self.context.logprobs else None
        self.pending = []
        return ChunkChoice(index=self.index, delta=delta, logprobs=entries, finish_reason=finish)

    def _call_chunks(self, event: events_of.ToolCallEvent) -> Iterator[ChunkChoice]:
        self.calls += 1
        if self.functions:
            if self.calls == 1:
                opening = ChunkToolCallFunction(name=event.name, arguments="")
                yield self._chunk(Delta(function_call=opening))
                yield self._chunk(
                    Delta(function_call=ChunkToolCallFunction(arguments=event.arguments))
                )
            return
        index = self.calls - 1
        opening = ChunkToolCallFunction(name=event.name, arguments="")
        call = ChunkToolCall(index=index, id=event.call_id, type="function", function=opening)
        yield self._chunk(Delta(tool_calls=[call]))
        fragment = ChunkToolCallFunction(arguments=event.arguments)
        yield self._chunk(Delta(tool_calls=[ChunkToolCall(index=index, function=fragment)]))


async def chat_choice(
    events: AsyncIterator[events_of.ChoiceEvent],
    index: int,
    context: ReplyContext,
    tally: Tally,
    functions: bool = False,
) -> Choice:
    """Choice ``index`` whole, folded from the events :class:`ChatChunks` streams; its
    usage goes into ``tally``. A failed choice raises its error."""
    whole, finish = await fold_choice(events)
    tally.add(index, finish)
    calls = [
        ResponseToolCall(
            id=call.call_id or "",
            function=ResponseFunctionCall(name=call.name, arguments=call.arguments),
        )
        for call in whole.calls
    ]
    message = AssistantMessage(
        content=whole.text if whole.text or not calls else None,
        tool_calls=calls or None,
        reasoning_content=whole.reasoning or None,
    )
    reason = finish.reason
    if functions and calls:
        message.function_call, message.tool_calls = calls[0].function, None
        reason = legacy_finish(reason)
    return Choice(
        index=index,
        message=message,
        logprobs=_logprobs(whole.logprobs) if context.logprobs else None,
        finish_reason=reason,
        mellea=finish.report,
    )


def legacy_finish(reason: FinishReason) -> FinishReason:
    """The finish reason of a reply to a ``functions`` request."""
    return "function_call" if reason == "tool_calls" else reason


def _logprobs(entries: list[Any]) -> ChoiceLogprobs | None:
    wire = chat_logprobs(entries) if entries else None
    return wire if wire is not None and wire.content else None

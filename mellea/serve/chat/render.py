"""One chat choice's events rendered: as stream chunks, or folded into the whole choice.

Both renderers read the same :mod:`choice events <mellea.serve.choice_events>`, so a
streamed reply and a whole one cannot differ: the whole choice's content is its text
deltas joined, its tool calls the tool-call deltas, and so on.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

from mellea.serve.choice_events import (
    ChoiceEvent,
    Failed,
    Finish,
    Logprobs,
    ProgramEvent,
    ReasoningDelta,
    Role,
    TextDelta,
    ToolCallDelta,
)
from mellea.serve.closing import close_stream
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
from mellea.serve.reply_context import ReplyContext
from mellea.serve.usage import Tally

ProgramEventObject = dict[str, Any]  # a live program event, sent as an extension chunk


async def chat_chunks(
    events: AsyncIterator[ChoiceEvent],
    index: int,
    context: ReplyContext,
    tally: Tally,
    functions: bool = False,
) -> AsyncIterator[ChunkChoice | ProgramEventObject]:
    """Choice ``index``'s stream chunks: program events, role, deltas, tool calls, finish;
    its usage goes into ``tally``.

    Reasoning goes out as ``reasoning_content`` deltas and tool calls as ``tool_calls``
    deltas; with ``functions`` (the deprecated form) the first call goes out as
    ``function_call`` deltas, and no other. Log-probabilities ride on the next chunk
    after their tokens.
    """
    calls = 0
    pending: list[Any] = []  # log-probability entries not sent yet

    def chunk(delta: Delta, finish: FinishReason | None = None) -> ChunkChoice:
        entries = _logprobs(pending) if context.logprobs else None
        pending.clear()
        return ChunkChoice(index=index, delta=delta, logprobs=entries, finish_reason=finish)

    def call_chunks(event: ToolCallDelta) -> Iterator[ChunkChoice]:
        nonlocal calls
        calls += 1
        if functions:
            if calls == 1:
                yield chunk(
                    Delta(function_call=ChunkToolCallFunction(name=event.name, arguments=""))
                )
                yield chunk(Delta(function_call=ChunkToolCallFunction(arguments=event.arguments)))
            return
        opening = ChunkToolCall(
            index=calls - 1,
            id=event.call_id,
            type="function",
            function=ChunkToolCallFunction(name=event.name, arguments=""),
        )
        yield chunk(Delta(tool_calls=[opening]))
        fragment = ChunkToolCallFunction(arguments=event.arguments)
        yield chunk(Delta(tool_calls=[ChunkToolCall(index=calls - 1, function=fragment)]))

    try:
        async for event in events:
            if isinstance(event, ProgramEvent):
                yield event_object(event.event, index)
                continue
            if isinstance(event, Failed):
                raise event.error
            if isinstance(event, Role):
                yield ChunkChoice(index=index, delta=Delta(role="assistant", content=""))
                continue
            pending += event.logprobs
            if isinstance(event, ReasoningDelta):
                yield chunk(Delta(reasoning_content=event.text))
            elif isinstance(event, TextDelta):
                yield chunk(Delta(content=event.text))
            elif isinstance(event, ToolCallDelta):
                for item in call_chunks(event):
                    yield item
            else:
                tally.add(index, event)
                if context.live:
                    yield event_object({"type": "program.done", **(event.report or {})}, index)
                reason = legacy_finish(event.reason) if functions else event.reason
                yield chunk(Delta(), finish=reason)
    finally:
        await close_stream(events)


async def chat_choice(
    events: AsyncIterator[ChoiceEvent],
    index: int,
    context: ReplyContext,
    tally: Tally,
    functions: bool = False,
) -> Choice:
    """Choice ``index`` whole, folded from the events :func:`chat_chunks` streams; its
    usage goes into ``tally``. A failed choice raises its error."""
    reasoning: list[str] = []
    content: list[str] = []
    calls: list[ResponseToolCall] = []
    entries: list[Any] = []
    finish: Finish | None = None
    try:
        async for event in events:
            if isinstance(event, Failed):
                raise event.error
            if isinstance(event, ProgramEvent | Role):
                continue
            entries += event.logprobs
            if isinstance(event, ReasoningDelta):
                reasoning.append(event.text)
            elif isinstance(event, TextDelta):
                content.append(event.text)
            elif isinstance(event, ToolCallDelta):
                function = ResponseFunctionCall(name=event.name, arguments=event.arguments)
                calls.append(ResponseToolCall(id=event.call_id or "", function=function))
            else:
                finish = event
    finally:
        await close_stream(events)
    assert finish is not None, "a choice's events end with its finish or its failure"
    tally.add(index, finish)
    text = "".join(content)
    message = AssistantMessage(
        content=text if text or not calls else None,
        tool_calls=calls or None,
        reasoning_content="".join(reasoning) or None,
    )
    reason = finish.reason
    if functions and calls:
        message.function_call, message.tool_calls = calls[0].function, None
        reason = legacy_finish(reason)
    return Choice(
        index=index,
        message=message,
        logprobs=_logprobs(entries) if context.logprobs else None,
        finish_reason=reason,
        mellea=finish.report,
    )


def legacy_finish(reason: FinishReason) -> FinishReason:
    """The finish reason of a reply to a ``functions`` request."""
    return "function_call" if reason == "tool_calls" else reason


def _logprobs(entries: list[Any] | Logprobs) -> ChoiceLogprobs | None:
    wire = chat_logprobs(list(entries)) if entries else None
    return wire if wire is not None and wire.content else None

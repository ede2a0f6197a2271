"""One text completion choice's events rendered: as stream chunks, or folded into the
whole choice (from the same events, so the two cannot differ)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from mellea.serve.choice_events import (
    ChoiceEvent,
    Failed,
    Finish,
    ProgramEvent,
    Role,
    TextDelta,
)
from mellea.serve.closing import close_stream
from mellea.serve.completions.objects import CompletionChoice
from mellea.serve.logprobs import completion_logprobs
from mellea.serve.program_report import event_object
from mellea.serve.protocol import FinishReason
from mellea.serve.usage import Tally

ProgramEventObject = dict[str, Any]  # a live program event, sent as an extension chunk


async def text_chunks(
    events: AsyncIterator[ChoiceEvent],
    index: int,
    prompt: str,
    tally: Tally,
    *,
    echo: bool = False,
    logprobs: bool = False,
    live: bool = False,
) -> AsyncIterator[CompletionChoice | ProgramEventObject]:
    """Choice ``index``'s stream chunks (it completes ``prompt``): program events, the
    prompt again with ``echo``, text deltas, the finish; its usage goes into ``tally``."""
    offset = 0  # where the next token's text starts in this choice's text
    seen = False  # whether any log-probability entry arrived yet
    pending: list[Any] = []

    def chunk(text: str, finish: Any = None) -> CompletionChoice:
        nonlocal offset
        entries = None
        if logprobs and seen:
            entries = completion_logprobs(pending, offset)
            offset += sum(len(token) for token in entries.tokens)
        pending.clear()
        return CompletionChoice(index=index, text=text, logprobs=entries, finish_reason=finish)

    try:
        async for event in events:
            if isinstance(event, ProgramEvent):
                yield event_object(event.event, index)
                continue
            if isinstance(event, Failed):
                raise event.error
            if isinstance(event, Role):
                if echo:
                    yield CompletionChoice(index=index, text=prompt)
                continue
            pending += event.logprobs
            seen = seen or bool(event.logprobs)
            if isinstance(event, TextDelta):
                yield chunk(event.text)
            elif isinstance(event, Finish):
                tally.add(index, event)
                if live:
                    yield event_object({"type": "program.done", **(event.report or {})}, index)
                yield chunk("", text_finish(event.reason))
    finally:
        await close_stream(events)


async def text_choice(
    events: AsyncIterator[ChoiceEvent],
    index: int,
    prompt: str,
    tally: Tally,
    *,
    echo: bool = False,
    logprobs: bool = False,
) -> CompletionChoice:
    """Choice ``index`` whole, folded from the events :func:`text_chunks` streams; its
    usage goes into ``tally``. A failed choice raises its error."""
    texts: list[str] = []
    entries: list[Any] = []
    finish: Finish | None = None
    try:
        async for event in events:
            if isinstance(event, Failed):
                raise event.error
            if isinstance(event, ProgramEvent | Role):
                continue
            entries += event.logprobs
            if isinstance(event, TextDelta):
                texts.append(event.text)
            elif isinstance(event, Finish):
                finish = event
    finally:
        await close_stream(events)
    assert finish is not None, "a choice's events end with its finish or its failure"
    tally.add(index, finish)
    text = "".join(texts)
    return CompletionChoice(
        index=index,
        text=(prompt + text) if echo else text,
        logprobs=completion_logprobs(entries) if logprobs and entries else None,
        finish_reason=text_finish(finish.reason),
        mellea=finish.report,
    )


def text_finish(reason: FinishReason) -> Any:
    """A text completion's finish reason: it has no tool calls, so those are a ``stop``."""
    return "stop" if reason == "tool_calls" else reason

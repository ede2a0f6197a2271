"""Rendering one choice's events: the loop every endpoint's renderer runs, and the fold
a whole reply is built from.

A stream renderer is a function from one :mod:`choice event <mellea.serve.choice_events>`
to the items it sends (none, one or several); :func:`render_events` runs it over a
choice. :func:`fold_choice` gathers the same events into a :class:`WholeChoice`, so a
whole reply holds exactly what its stream would have sent.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from mellea.serve.choice_events import (
    ChoiceEvent,
    Failed,
    Finish,
    PromptScores,
    ReasoningDelta,
    TextDelta,
    ToolCallEvent,
)
from mellea.serve.closing import close_stream

T = TypeVar("T")


async def render_events(
    events: AsyncIterator[ChoiceEvent], render: Callable[[ChoiceEvent], Iterable[T]]
) -> AsyncIterator[T]:
    """What ``render`` makes of each event, in order; a :class:`Failed` choice raises its
    error. Stopping early closes the choice (and so its generation)."""
    try:
        async for event in events:
            if type(event) is Failed:
                raise event.error  # type: ignore[union-attr]
            for item in render(event):
                yield item
    finally:
        await close_stream(events)


@dataclass
class WholeChoice:
    """One choice's events gathered: its text, reasoning, tool calls, every
    log-probability entry, and its finish."""

    text: str = ""
    reasoning: str = ""
    calls: list[ToolCallEvent] = field(default_factory=list)
    logprobs: list[Any] = field(default_factory=list)
    prompt: tuple[Any, ...] | None = None  # the prompt's scores, when the reply asked
    finish: Finish | None = None

    def add(self, event: ChoiceEvent) -> Iterable[None]:
        """Take one event in (a renderer for :func:`render_events` that sends nothing)."""
        kind = type(event)  # each event is exactly one of these types: no isinstance chain
        if kind is TextDelta:
            self.text += event.text  # type: ignore[union-attr]
        elif kind is ReasoningDelta:
            self.reasoning += event.text  # type: ignore[union-attr]
        elif kind is ToolCallEvent:
            self.calls.append(event)  # type: ignore[arg-type]
        elif kind is Finish:
            self.finish = event  # type: ignore[assignment]
        elif kind is PromptScores:
            self.prompt = event.entries  # type: ignore[union-attr]
        logprobs = getattr(event, "logprobs", ())
        if logprobs:
            self.logprobs += logprobs
        return ()


async def fold_choice(events: AsyncIterator[ChoiceEvent]) -> tuple[WholeChoice, Finish]:
    """A choice's events gathered into one :class:`WholeChoice` (a failed choice raises),
    with its finish."""
    whole = WholeChoice()
    try:  # render_events' loop, inline: one async-generator hop less per event
        async for event in events:
            if type(event) is Failed:
                raise event.error  # type: ignore[union-attr]
            whole.add(event)
    finally:
        await close_stream(events)
    assert whole.finish is not None, "a choice's events end with its finish or its failure"
    return whole, whole.finish

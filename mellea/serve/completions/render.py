"""One text completion choice's events rendered: as stream chunks, or folded into the
whole choice (from the same events, so the two cannot differ)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

from mellea.serve import choice_events as events_of
from mellea.serve.completions.objects import CompletionChoice
from mellea.serve.logprobs import completion_logprobs
from mellea.serve.program_report import event_object
from mellea.serve.protocol import FinishReason
from mellea.serve.rendering import fold_choice
from mellea.serve.usage import Tally

TextChunk = CompletionChoice | dict[str, Any]  # a choice's chunk, or a live program event


class TextChunks:
    """Renders choice ``index``'s events (it completes ``prompt``) as stream chunks: the
    prompt again with ``echo``, text deltas with their log-probabilities, the finish;
    its usage goes into ``tally``."""

    def __init__(
        self,
        index: int,
        prompt: str,
        tally: Tally,
        *,
        echo: bool = False,
        logprobs: bool = False,
        live: bool = False,
    ) -> None:
        """A renderer of one choice."""
        self.index = index
        self.prompt = prompt
        self.tally = tally
        self.echo = echo
        self.logprobs = logprobs
        self.live = live
        self.offset = 0  # where the next token's text starts in this choice's text
        self.seen = False  # whether any log-probability entry arrived yet
        self.pending: list[Any] = []

    def render(self, event: events_of.ChoiceEvent) -> Iterator[TextChunk]:
        """The chunks ``event`` becomes."""
        if isinstance(event, events_of.ProgramEvent):
            yield event_object(event.event, self.index)
            return
        if isinstance(event, events_of.Role):
            if self.echo:
                yield CompletionChoice(index=self.index, text=self.prompt)
            return
        new = getattr(event, "logprobs", ())
        self.pending += new
        self.seen = self.seen or bool(new)
        if isinstance(event, events_of.TextDelta):
            yield self._chunk(event.text)
        elif isinstance(event, events_of.Finish):
            self.tally.add(self.index, event)
            if self.live:
                yield event_object({"type": "program.done", **(event.report or {})}, self.index)
            yield self._chunk("", text_finish(event.reason))

    def _chunk(self, text: str, finish: Any = None) -> CompletionChoice:
        entries = None
        if self.logprobs and self.seen:
            entries = completion_logprobs(self.pending, self.offset)
            self.offset += sum(len(token) for token in entries.tokens)
        self.pending = []
        return CompletionChoice(index=self.index, text=text, logprobs=entries, finish_reason=finish)


async def text_choice(
    events: AsyncIterator[events_of.ChoiceEvent],
    index: int,
    prompt: str,
    tally: Tally,
    *,
    echo: bool = False,
    logprobs: bool = False,
) -> CompletionChoice:
    """Choice ``index`` whole, folded from the events :class:`TextChunks` streams; its
    usage goes into ``tally``. A failed choice raises its error."""
    whole, finish = await fold_choice(events)
    tally.add(index, finish)
    return CompletionChoice(
        index=index,
        text=(prompt + whole.text) if echo else whole.text,
        logprobs=completion_logprobs(whole.logprobs) if logprobs and whole.logprobs else None,
        finish_reason=text_finish(finish.reason),
        mellea=finish.report,
    )


def text_finish(reason: FinishReason) -> Any:
    """A text completion's finish reason: it has no tool calls, so those are a ``stop``."""
    return "stop" if reason == "tool_calls" else reason

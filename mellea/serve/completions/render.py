"""One text completion choice's events rendered: as stream chunks, or folded into the
whole choice (from the same events, so the two cannot differ)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

from mellea.serve import choice_events as events_of
from mellea.serve.completions.objects import CompletionChoice
from mellea.serve.logprobs import completion_logprobs, vllm_prompt_logprobs
from mellea.serve.program_report import event_object
from mellea.serve.protocol import FinishReason
from mellea.serve.rendering import fold_choice
from mellea.serve.usage import Tally

TextChunk = CompletionChoice | dict[str, Any]  # a choice's chunk, or a live program event


@dataclass(frozen=True)
class PromptScoring:
    """How a reply shows its prompt's log-probabilities: ``echoed``, the legacy
    ``logprobs`` count when ``echo`` asked for the prompt back (its tokens lead the
    choice's ``logprobs``); ``vllm``, the ``prompt_logprobs`` count (vLLM's field)."""

    echoed: int | None = None
    vllm: int | None = None

    @property
    def asked(self) -> bool:
        """Whether the prompt is scored at all."""
        return self.echoed is not None or self.vllm is not None

    def prompt_fields(self, entries: tuple[Any, ...] | None) -> dict[str, Any]:
        """The choice fields the prompt's scores fill: ``logprobs`` (the prompt's part,
        text offsets from 0) and ``prompt_logprobs``. With no entries (no model call
        scored the prompt), the legacy lists hold none of its tokens and
        ``prompt_logprobs`` is absent."""
        entries = entries or ()
        fields: dict[str, Any] = {}
        if self.echoed is not None:
            fields["logprobs"] = completion_logprobs(entries, 0, self.echoed)
        if self.vllm is not None and entries:
            fields["prompt_logprobs"] = vllm_prompt_logprobs(entries, self.vllm)
        return fields


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
        scoring: PromptScoring = PromptScoring(),
    ) -> None:
        """A renderer of one choice (``scoring``: how its prompt's scores are shown)."""
        self.index = index
        self.prompt = prompt
        self.tally = tally
        self.echo = echo
        self.logprobs = logprobs
        self.live = live
        self.scoring = scoring
        self.offset = 0  # where the next token's text starts in this choice's text
        self.seen = False  # whether any log-probability entry arrived yet
        self.pending: list[Any] = []

    def render(self, event: events_of.ChoiceEvent) -> Iterator[TextChunk]:
        """The chunks ``event`` becomes."""
        if isinstance(event, events_of.ProgramEvent):
            yield event_object(event.event, self.index)
            return
        if isinstance(event, events_of.Role):
            if self.echo and not self.scoring.asked:  # else with the prompt's scores
                yield CompletionChoice(index=self.index, text=self.prompt)
            return
        if isinstance(event, events_of.PromptScores):
            text = self.prompt if self.echo else ""
            if self.echo and self.scoring.echoed is not None:
                self.offset = len(self.prompt)  # the generated tokens' offsets follow it
            fields = self.scoring.prompt_fields(event.entries)
            yield CompletionChoice(index=self.index, text=text, **fields)
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
    scoring: PromptScoring = PromptScoring(),
) -> CompletionChoice:
    """Choice ``index`` whole, folded from the events :class:`TextChunks` streams; its
    usage goes into ``tally``. A failed choice raises its error."""
    whole, finish = await fold_choice(events)
    tally.add(index, finish)
    fields = scoring.prompt_fields(whole.prompt) if scoring.asked else {}
    if "logprobs" in fields:  # echoed: the prompt's tokens, then the generated ones
        generated = completion_logprobs(whole.logprobs, len(prompt))
        fields["logprobs"] = fields["logprobs"].extend(generated)
    elif logprobs and whole.logprobs:
        fields["logprobs"] = completion_logprobs(whole.logprobs)
    return CompletionChoice(
        index=index,
        text=(prompt + whole.text) if echo else whole.text,
        finish_reason=text_finish(finish.reason),
        mellea=finish.report,
        **fields,
    )


def text_finish(reason: FinishReason) -> Any:
    """A text completion's finish reason: it has no tool calls, so those are a ``stop``."""
    return "stop" if reason == "tool_calls" else reason

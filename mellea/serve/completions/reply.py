"""The ``/v1/completions`` reply: ``prompts[i]`` is choice ``i``, each prompt ``n`` times in
a row; whole or streamed."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field
from typing import Any

from mellea.core.thunk import ModelOutputThunk
from mellea.serve.choice_events import ChoiceEvent
from mellea.serve.choices_reply import ChoicesReply
from mellea.serve.completions.objects import (
    Completion,
    CompletionChoice,
    CompletionWithUsage,
    new_text_completion_id,
)
from mellea.serve.completions.render import PromptScoring, TextChunk, TextChunks, text_choice
from mellea.serve.completions.request import CompletionRequest
from mellea.serve.errors import naming_field
from mellea.serve.frames import Frame
from mellea.serve.protocol import Usage
from mellea.serve.rendering import render_events
from mellea.serve.reply_context import ReplyContext, wants_events, wants_usage
from mellea.serve.usage import Tally


@dataclass(frozen=True)
class TextContext(ReplyContext):
    """A completions request's side of its reply: the ``prompts`` its choices complete
    (each ``n`` times in a row), whether each choice starts with its prompt (``echo``),
    and how its prompt's scores are shown (:class:`PromptScoring`)."""

    prompts: tuple[str, ...] = ()
    n: int = 1
    echo: bool = False
    scoring: PromptScoring = field(default_factory=PromptScoring)

    @classmethod
    def of(cls, body: CompletionRequest, prompts: list[str], n: int, model: str) -> TextContext:
        """The context of a reply to ``body`` completing ``prompts``, served as ``model``."""
        return cls(
            id=new_text_completion_id(),
            created=int(time.time()),
            model=model,
            stream=bool(body.stream),
            live=wants_events(body),
            include_usage=wants_usage(body),
            logprobs=body.logprobs is not None,
            prompts=tuple(prompts),
            n=n,
            echo=bool(body.echo),
            scoring=PromptScoring(
                echoed=body.logprobs if body.echo else None, vllm=body.prompt_logprobs
            ),
        )


class TextReply(ChoicesReply[Completion]):
    """A text completion: each choice's events rendered as chunks, or folded whole."""

    context: TextContext

    def __init__(self, context: TextContext) -> None:
        """The reply for ``context``."""
        super().__init__(context)
        self.n = context.n
        self.prompt_scores = context.scoring.asked

    def guard(self, call: Awaitable[ModelOutputThunk]) -> Awaitable[ModelOutputThunk]:
        """A client error naming the program's chat ``messages`` (a prompt too long)
        names the request's ``prompt`` instead."""
        return naming_field(call, "prompt")

    async def whole_choice(
        self, events: AsyncIterator[ChoiceEvent], index: int, tally: Tally
    ) -> CompletionChoice:
        """Choice ``index`` whole."""
        context = self.context
        prompt = context.prompts[index]
        return await text_choice(
            events,
            index,
            prompt,
            tally,
            echo=context.echo,
            logprobs=context.logprobs,
            scoring=context.scoring,
        )

    def chunks(
        self, events: AsyncIterator[ChoiceEvent], index: int, tally: Tally
    ) -> AsyncIterator[TextChunk]:
        """Choice ``index``'s chunks."""
        context = self.context
        renderer = TextChunks(
            index,
            context.prompts[index],
            tally,
            echo=context.echo,
            logprobs=context.logprobs,
            live=context.live,
            scoring=context.scoring,
        )
        return render_events(events, renderer.render)

    def whole_reply(self, choices: list[Any], usage: Usage | None) -> Completion:
        """The non-streamed completion (its usage always present)."""
        context = self.context
        return Completion(
            id=context.id,
            created=context.created,
            model=context.model,
            choices=choices,
            usage=usage or Usage(),
        )

    def frame(self, item: Any, usage: Usage | None = None) -> Frame:
        """A ``text_completion`` chunk frame: a choice's chunk, a program event, or the usage."""
        context = self.context
        chunk_type = CompletionWithUsage if context.include_usage else Completion
        body = chunk_type(
            id=context.id,
            created=context.created,
            model=context.model,
            choices=[item] if isinstance(item, CompletionChoice) else [],
        )
        if isinstance(item, dict):
            body.mellea = item
        body.usage = usage
        return {"data": body.model_dump_json()}

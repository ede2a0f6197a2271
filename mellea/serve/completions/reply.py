"""The ``/v1/completions`` reply: ``prompts[i]`` is choice ``i``, each prompt ``n`` times in
a row; whole or streamed."""

from __future__ import annotations

import time
from dataclasses import dataclass

from mellea.serve.completions.objects import (
    Completion,
    CompletionChoice,
    CompletionWithUsage,
    new_text_completion_id,
)
from mellea.serve.completions.render import text_choice, text_chunks
from mellea.serve.completions.request import CompletionRequest
from mellea.serve.frames import Frame, Frames, framed
from mellea.serve.protocol import Usage
from mellea.serve.reply_context import ReplyContext, wants_events, wants_usage
from mellea.serve.request_runner import Choices, Reply, ThunkSource
from mellea.serve.usage import Tally


@dataclass(frozen=True)
class TextContext(ReplyContext):
    """A completions request's side of its reply: the ``prompts`` its choices complete
    (each ``n`` times in a row), and whether each choice starts with its prompt (``echo``)."""

    prompts: tuple[str, ...] = ()
    n: int = 1
    echo: bool = False

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
        )


class TextReply(Reply[Completion]):
    """A text completion: each choice's events rendered as chunks, or folded whole."""

    def __init__(self, context: TextContext) -> None:
        """The reply for ``context``."""
        self.context = context
        self.stream = context.stream
        self.live = context.live

    async def whole(self, choices: Choices) -> Completion:
        """The non-streamed completion, every choice folded from its events."""
        context = self.context
        tally = Tally(len(choices.tasks), context.n)
        completion = Completion(
            id=context.id,
            created=context.created,
            model=context.model,
            choices=[
                await text_choice(
                    reader.events(),
                    index,
                    context.prompts[index],
                    tally,
                    echo=context.echo,
                    logprobs=context.logprobs,
                )
                for index, reader in enumerate(choices.readers())
            ],
            usage=tally.total() or Usage(),
        )
        if choices.observer is not None:
            choices.observer.on_finish(completion.usage)
        return completion

    def events(self, choices: Choices, sources: list[ThunkSource]) -> Frames:
        """The completion's chunks as they come, each choice rendered from its events."""
        context = self.context
        tally = Tally(len(sources), context.n)
        chunk_type = CompletionWithUsage if context.include_usage else Completion

        def frame(item: CompletionChoice | dict | None, usage: Usage | None = None) -> Frame:
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

        def ending() -> list[Frame]:
            usage = tally.total()
            if choices.observer is not None:
                choices.observer.on_finish(usage)
            return [frame(None, usage=usage or Usage())] if context.include_usage else []

        streams = [
            text_chunks(
                reader.events(),
                index,
                context.prompts[index],
                tally,
                echo=context.echo,
                logprobs=context.logprobs,
                live=context.live,
            )
            for index, reader in enumerate(choices.readers(sources))
        ]
        return framed(streams, frame, ending, context.id)

"""The ``/v1/chat/completions`` reply: one choice per program call, whole or streamed."""

from __future__ import annotations

import time
from dataclasses import dataclass

from mellea.core.parsers import ReplyParser
from mellea.serve.chat.render import chat_choice, chat_chunks
from mellea.serve.frames import Frame, Frames, framed
from mellea.serve.protocol import (
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionChunkWithUsage,
    ChatCompletionRequest,
    ChunkChoice,
    Usage,
    new_completion_id,
)
from mellea.serve.reply_context import ReplyContext, wants_events, wants_usage
from mellea.serve.request_runner import Choices, Reply, ThunkSource
from mellea.serve.usage import Tally


@dataclass(frozen=True)
class ChatContext(ReplyContext):
    """A chat request's side of its reply; ``functions``: it used the deprecated form."""

    functions: bool = False

    @classmethod
    def of(cls, body: ChatCompletionRequest, model: str) -> ChatContext:
        """The context of a reply to ``body`` served as ``model``."""
        return cls(
            id=new_completion_id(),
            created=int(time.time()),
            model=model,
            stream=bool(body.stream),
            live=wants_events(body),
            include_usage=wants_usage(body),
            logprobs=bool(body.logprobs),
            functions=body.uses_functions,
        )


class ChatReply(Reply[ChatCompletion]):
    """A chat completion: each choice's events rendered as chunks, or folded whole."""

    def __init__(self, context: ChatContext, parsers: list[ReplyParser | None]) -> None:
        """The reply for ``context``, with a fresh parser (or none) for each choice."""
        self.context = context
        self.stream = context.stream
        self.live = context.live
        self.parsers = parsers

    async def whole(self, choices: Choices) -> ChatCompletion:
        """The non-streamed completion, every choice folded from its events."""
        context = self.context
        tally = Tally(len(choices.tasks), n=len(choices.tasks))  # one prompt, n choices
        readers = choices.readers(parsers=self.parsers)
        completion = ChatCompletion(
            id=context.id,
            created=context.created,
            model=context.model,
            choices=[
                await chat_choice(reader.events(), index, context, tally, context.functions)
                for index, reader in enumerate(readers)
            ],
            usage=tally.total(),
        )
        if choices.observer is not None:
            choices.observer.on_finish(completion.usage)
        return completion

    def events(self, choices: Choices, sources: list[ThunkSource]) -> Frames:
        """The completion's chunks as they come, each choice rendered from its events."""
        context = self.context
        tally = Tally(len(sources), n=len(sources))
        chunk_type = ChatCompletionChunkWithUsage if context.include_usage else ChatCompletionChunk

        def frame(item: ChunkChoice | dict | None, usage: Usage | None = None) -> Frame:
            event = item if isinstance(item, dict) else None
            body = chunk_type(
                id=context.id,
                created=context.created,
                model=context.model,
                choices=[] if item is None or event is not None else [item],  # type: ignore[list-item]
                usage=usage,
                mellea=event,
            )
            return {"data": body.model_dump_json()}

        def ending() -> list[Frame]:
            usage = tally.total()
            if choices.observer is not None:
                choices.observer.on_finish(usage)
            return [frame(None, usage=usage or Usage())] if context.include_usage else []

        streams = [
            chat_chunks(reader.events(), index, context, tally, context.functions)
            for index, reader in enumerate(choices.readers(sources, self.parsers))
        ]
        return framed(streams, frame, ending, context.id)

"""The ``/v1/chat/completions`` reply: one choice per program call, whole or streamed."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from mellea.core.parsers import ReplyParser
from mellea.serve.chat.render import ChatChunk, ChatChunks, chat_choice
from mellea.serve.choice_events import ChoiceEvent
from mellea.serve.choices_reply import ChoicesReply
from mellea.serve.frames import Frame
from mellea.serve.protocol import (
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionChunkWithUsage,
    ChatCompletionRequest,
    Choice,
    Usage,
    new_completion_id,
)
from mellea.serve.rendering import render_events
from mellea.serve.reply_context import ReplyContext, wants_events, wants_usage
from mellea.serve.usage import Tally


@dataclass(frozen=True)
class ChatReplyContext(ReplyContext):
    """A chat request's side of its reply; ``functions``: it used the deprecated form."""

    functions: bool = False

    @classmethod
    def of(cls, body: ChatCompletionRequest, model: str) -> ChatReplyContext:
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


class ChatReply(ChoicesReply[ChatCompletion]):
    """A chat completion: each choice's events rendered as chunks, or folded whole."""

    context: ChatReplyContext

    def __init__(self, context: ChatReplyContext, parsers: list[ReplyParser | None]) -> None:
        """The reply for ``context``, with a fresh parser (or none) for each choice (one
        prompt: ``n`` is the number of choices)."""
        super().__init__(context)
        self.parsers = parsers
        self.n = len(parsers)

    async def whole_choice(
        self, events: AsyncIterator[ChoiceEvent], index: int, tally: Tally
    ) -> Choice:
        """Choice ``index`` as a whole message."""
        return await chat_choice(events, index, self.context, tally, self.context.functions)

    def chunks(
        self, events: AsyncIterator[ChoiceEvent], index: int, tally: Tally
    ) -> AsyncIterator[ChatChunk]:
        """Choice ``index``'s chunks."""
        renderer = ChatChunks(index, self.context, tally, self.context.functions)
        return render_events(events, renderer.render)

    def whole_reply(self, choices: list[Any], usage: Usage | None) -> ChatCompletion:
        """The non-streamed completion."""
        context = self.context
        return ChatCompletion(
            id=context.id,
            created=context.created,
            model=context.model,
            choices=choices,
            usage=usage,
        )

    def frame(self, item: Any, usage: Usage | None = None) -> Frame:
        """A ``chat.completion.chunk`` frame: a choice's chunk, a program event, or the usage."""
        context = self.context
        chunk_type = ChatCompletionChunkWithUsage if context.include_usage else ChatCompletionChunk
        event = item if isinstance(item, dict) else None
        body = chunk_type(
            id=context.id,
            created=context.created,
            model=context.model,
            choices=[] if item is None or event is not None else [item],
            usage=usage,
            mellea=event,
        )
        return {"data": body.model_dump_json()}

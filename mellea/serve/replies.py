"""The chat and text completion replies the request runner sends (whole or streamed)."""

from __future__ import annotations

import time

from mellea.core.parsers import ReplyParser
from mellea.serve.completion import chat_completion
from mellea.serve.protocol import ChatCompletion, ChatCompletionRequest, new_completion_id
from mellea.serve.runner import Choices, Frames, Reply
from mellea.serve.stream import ThunkSource, chat_completion_events, text_completion_events
from mellea.serve.text_completion import (
    Completion,
    CompletionRequest,
    new_text_completion_id,
    text_completion,
)


def wants_events(body: ChatCompletionRequest | CompletionRequest) -> bool:
    """Whether a streamed request asked for the program's live events."""
    options = body.stream_options
    return bool(body.stream and options and options.include_program_events)


def wants_usage(body: ChatCompletionRequest | CompletionRequest) -> bool:
    """Whether a streamed request asked for a last chunk with the usage."""
    return bool(body.stream_options and body.stream_options.include_usage)


class ChatReply(Reply[ChatCompletion]):
    """A ``/v1/chat/completions`` reply: one choice per program call."""

    def __init__(
        self, body: ChatCompletionRequest, parsers: list[ReplyParser | None], model: str
    ) -> None:
        """The reply to ``body``, with a fresh parser (or none) for each choice."""
        self.stream = bool(body.stream)
        self.live = wants_events(body)
        self.include_usage = wants_usage(body)
        self.logprobs = bool(body.logprobs)
        self.functions = body.uses_functions
        self.parsers = parsers
        self.model = model
        self.id, self.created = new_completion_id(), int(time.time())

    async def whole(self, choices: Choices) -> ChatCompletion:
        """The non-streamed completion, every choice's reply awaited."""
        completion = await choices.build(
            lambda thunks: chat_completion(
                thunks,
                self.parsers,
                completion_id=self.id,
                created=self.created,
                model=self.model,
                logprobs=self.logprobs,
                traces=choices.traces,
                functions=self.functions,
            )
        )
        if choices.observer is not None:
            choices.observer.on_finish(completion.usage)
        return completion

    def events(self, choices: Choices, sources: list[ThunkSource]) -> Frames:
        """The completion's chunks as they come."""
        return chat_completion_events(
            sources,
            self.parsers,
            completion_id=self.id,
            created=self.created,
            model=self.model,
            include_usage=self.include_usage,
            logprobs=self.logprobs,
            deadline=choices.deadline,
            observer=choices.observer,
            traces=choices.traces,
            functions=self.functions,
        )


class TextReply(Reply[Completion]):
    """A ``/v1/completions`` reply: ``prompts[i]`` is choice ``i``, each prompt ``n`` times
    in a row."""

    def __init__(self, body: CompletionRequest, prompts: list[str], n: int, model: str) -> None:
        """The reply to ``body`` completing ``prompts``."""
        self.stream = bool(body.stream)
        self.live = wants_events(body)
        self.include_usage = wants_usage(body)
        self.echo = bool(body.echo)
        self.logprobs = body.logprobs is not None
        self.prompts = prompts
        self.n = n
        self.model = model
        self.id, self.created = new_text_completion_id(), int(time.time())

    async def whole(self, choices: Choices) -> Completion:
        """The non-streamed completion, every choice's text awaited."""
        completion = await choices.build(
            lambda thunks: text_completion(
                thunks,
                self.prompts,
                completion_id=self.id,
                created=self.created,
                model=self.model,
                echo=self.echo,
                logprobs=self.logprobs,
                n=self.n,
                traces=choices.traces,
            )
        )
        if choices.observer is not None:
            choices.observer.on_finish(completion.usage)
        return completion

    def events(self, choices: Choices, sources: list[ThunkSource]) -> Frames:
        """The completion's chunks as they come."""
        return text_completion_events(
            sources,
            self.prompts,
            completion_id=self.id,
            created=self.created,
            model=self.model,
            include_usage=self.include_usage,
            echo=self.echo,
            logprobs=self.logprobs,
            n=self.n,
            deadline=choices.deadline,
            observer=choices.observer,
            traces=choices.traces,
        )

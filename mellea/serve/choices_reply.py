"""A reply of one or more choices, each rendered from its reader's events: whole, or
streamed chunk by chunk with a usage chunk and ``[DONE]`` at the end (chat and text
completions)."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import AsyncIterator, Sequence
from typing import Any, TypeVar

from mellea.core.parsers import ReplyParser
from mellea.serve.choice_events import ChoiceEvent
from mellea.serve.frames import Frame, Frames, framed
from mellea.serve.protocol import Usage
from mellea.serve.reply_context import ReplyContext
from mellea.serve.request_runner import Choices, Reply, ThunkSource
from mellea.serve.usage import Tally

T = TypeVar("T")


class ChoicesReply(Reply[T]):
    """An endpoint's reply of ``n`` choices per prompt; subclasses render one choice
    (whole and as chunks) and frame the reply."""

    n: int = 1  # choices per prompt: a prompt's tokens count once in the usage
    parsers: Sequence[ReplyParser | None] | None = None
    prompt_scores: bool = False  # each choice's prompt log-probabilities are rendered

    def __init__(self, context: ReplyContext) -> None:
        """The reply for ``context``."""
        self.context = context
        self.stream = context.stream
        self.live = context.live

    @abstractmethod
    async def whole_choice(
        self, events: AsyncIterator[ChoiceEvent], index: int, tally: Tally
    ) -> Any:
        """Choice ``index`` whole, folded from its events (its usage into ``tally``)."""

    @abstractmethod
    def chunks(self, events: AsyncIterator[ChoiceEvent], index: int, tally: Tally) -> Any:
        """Choice ``index``'s stream chunks, rendered from its events."""

    @abstractmethod
    def whole_reply(self, choices: list[Any], usage: Usage | None) -> T:
        """The whole reply of these choices."""

    @abstractmethod
    def frame(self, item: Any, usage: Usage | None = None) -> Frame:
        """One stream chunk's frame (``item`` ``None``: the usage chunk)."""

    async def whole(self, choices: Choices) -> T:
        """The non-streamed reply, every choice folded from its events."""
        tally = Tally(len(choices.tasks), self.n)
        readers = choices.readers(parsers=self.parsers, prompt_scores=self.prompt_scores)
        whole = [
            await self.whole_choice(reader.events(), index, tally)
            for index, reader in enumerate(readers)
        ]
        reply = self.whole_reply(whole, tally.total())
        if choices.observer is not None:
            choices.observer.on_finish(reply.usage)  # type: ignore[attr-defined]
        return reply

    def events(self, choices: Choices, sources: list[ThunkSource]) -> Frames:
        """The reply's chunks as they come, each choice rendered from its events."""
        tally = Tally(len(sources), self.n)

        def ending() -> list[Frame]:
            usage = tally.total()
            if choices.observer is not None:
                choices.observer.on_finish(usage)
            return [self.frame(None, usage=usage)] if self.context.include_usage else []

        streams = [
            self.chunks(reader.events(), index, tally)
            for index, reader in enumerate(
                choices.readers(sources, self.parsers, prompt_scores=self.prompt_scores)
            )
        ]
        return framed(streams, self.frame, ending, self.context.id)

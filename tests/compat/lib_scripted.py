"""A backend that replies from a script, for in-process tests of upstream-style programs."""

from __future__ import annotations

from typing import Any

from mellea.backends.base import Backend
from mellea.core import GenerationChunk, ModelOutputThunk, TokenLogprob


class ScriptedBackend(Backend):
    """Replies with ``replies`` in turn (the last one repeats) and records each call.

    ``logprobs`` per reply token makes each reply carry as much per-token data as a
    request that asked for log-probabilities.
    """

    model_id = "scripted"

    def __init__(self, replies: list[str], logprobs: int = 0) -> None:
        super().__init__()
        self.replies = list(replies)
        self.logprobs = logprobs
        self.calls: list[dict[str, Any]] = []

    async def generate(self, messages, *, model_options=None, format=None, tool_calls=False):
        self.calls.append({"messages": messages, "options": model_options, "format": format})
        text = self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]
        logprobs = self.logprobs

        async def stream():
            for word in text.split(" "):
                lps = [TokenLogprob(word, -0.5, list(word.encode())) for _ in range(logprobs)]
                yield GenerationChunk(text=word + " ", logprobs=lps or None)
            yield GenerationChunk(finish_reason="stop")

        return ModelOutputThunk.from_stream(stream())

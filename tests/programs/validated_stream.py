"""Test program: validated streaming served, on a scripted backend.

Upstream's style for validated streaming (``stream()`` with sentence chunking and a
requirement that checks each chunk), with ``serve()`` returning the stream itself, so
the server sends only the sentences that pass. The first word of the last message
picks the text the backend streams (word by word):

- ``calm``: ``CALM``, every sentence passes;
- ``storm``: ``STORM``, whose third sentence names the storm and fails the check, so
  neither it nor the sentence after it is sent.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from mellea.backends.base import Backend
from mellea.core import GenerationChunk, ModelOutputThunk, Requirement
from mellea.core.requirement import PartialValidationResult
from mellea.serve import ChatMessage
from mellea.stdlib.components import Instruction
from mellea.stdlib.context import SimpleContext
from mellea.stdlib.streaming import Streamer, stream

CALM = "The sea is calm. The sky is blue. Gulls drift over the bay. Night falls."
STORM = "The sea is calm. The sky is blue. A storm breaks over the bay. Night falls."
PASSED_IN_STORM = "The sea is calm. The sky is blue."
RULE = "Never mention a storm"


class ScriptedBackend(Backend):
    """Streams ``CALM`` or ``STORM`` word by word, as the instruction's first word says."""

    model_id = "scripted"

    async def generate(self, messages, *, model_options=None, format=None, tool_calls=False):
        text = STORM if "storm" in messages[-1]["content"] else CALM
        return ModelOutputThunk.from_stream(_words(text))


async def _words(text: str) -> AsyncIterator[GenerationChunk]:
    words = text.split(" ")
    for i, word in enumerate(words):
        await asyncio.sleep(0.005)
        yield GenerationChunk(text=word if i == 0 else " " + word)
    usage = {"prompt_tokens": 4, "completion_tokens": len(words), "total_tokens": 4 + len(words)}
    yield GenerationChunk(finish_reason="stop", usage=usage)


class NoStorm(Requirement):
    """Fails any sentence that mentions a storm, as soon as it is complete."""

    async def stream_validate(self, chunk, *, backend, ctx) -> PartialValidationResult:
        if "storm" in chunk.lower():
            return PartialValidationResult("fail", reason=f"mentions a storm: {chunk!r}")
        return PartialValidationResult("pass", reason="no storm")


async def serve(input: list[ChatMessage], model_options: dict | None = None) -> Streamer:
    """Stream a description of the sea, sentence by sentence, without storms."""
    backend = ScriptedBackend()
    action = Instruction(input[-1].get_text_content())
    return await stream(
        action,
        backend,
        SimpleContext(),
        chunking="sentence",
        requirements=[NoStorm(RULE)],
        model_options=model_options,
    )

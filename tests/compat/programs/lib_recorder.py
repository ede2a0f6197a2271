"""Stands in for a remote model server: streams back which model was asked for, and the text.

Upstream-style programs under test reach it through the ``openai`` and ``ollama``
backends; the reply ``model=<name> | <last message>`` shows what they sent.
"""

import asyncio
from typing import Any

from mellea.core import GenerationChunk, ModelOutputThunk
from mellea.serve import ChatMessage


async def _words(text: str):
    for i, word in enumerate(text.split(" ")):
        await asyncio.sleep(0.005)
        yield GenerationChunk(text=word if i == 0 else " " + word)
    yield GenerationChunk(finish_reason="stop")


def serve(
    input: list[ChatMessage],
    requirements: list[str] | None = None,
    model_options: dict[str, Any] | None = None,
    client_options: dict[str, Any] | None = None,
) -> ModelOutputThunk:
    """Reply ``model=<requested model> | <turns> | <last message>``."""
    model = (client_options or {}).get("model")
    turns = ",".join(m.role for m in input)
    return ModelOutputThunk.from_stream(
        _words(f"model={model} | {turns} | {input[-1].get_text_content()}")
    )

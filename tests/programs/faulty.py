"""Test program: misbehaves in the way the last message asks for."""

import asyncio
import os
from pathlib import Path

from mellea.core import GenerationChunk, ModelOutputThunk, RequestError
from mellea.serve import ChatMessage


async def _then_fail():
    yield GenerationChunk(text="partial ")
    yield GenerationChunk(text="output")
    raise RuntimeError("SECRET-mid-stream-detail")


async def _endless(marker: Path):
    try:
        while True:
            await asyncio.sleep(0.02)
            yield GenerationChunk(text="tick ")
    finally:
        marker.write_text("closed")


async def serve(input: list[ChatMessage], requirements=None, model_options=None):
    """raise | wrong-type | midstream | slow | bad-request | endless:<marker path>."""
    text = input[-1].get_text_content()
    if text == "raise":
        raise RuntimeError("SECRET-program-detail")
    if text == "wrong-type":
        return 42
    if text == "midstream":
        return ModelOutputThunk.from_stream(_then_fail())
    if text == "slow":
        await asyncio.sleep(float(os.environ.get("SLOW_SECONDS", "2.5")))
        return ModelOutputThunk(value="finally")
    if text == "slow-raise":
        await asyncio.sleep(float(os.environ.get("SLOW_SECONDS", "2.5")))
        raise RuntimeError("SECRET-late-detail")
    if text == "bad-request":
        raise RequestError("the prompt is too long for this model", param="messages")
    if text.startswith("endless:"):
        return ModelOutputThunk.from_stream(_endless(Path(text.split(":", 1)[1])))
    return ModelOutputThunk(value="ok")

"""Test program: writes reasoning and tool calls in the model's own text formats."""

import asyncio
import json

from mellea.backends.model_options import ModelOption
from mellea.core import GenerationChunk, ModelOutputThunk, ModelToolCall


async def _pieces(text: str, size: int = 3):
    for start in range(0, len(text), size):
        await asyncio.sleep(0)
        yield GenerationChunk(text=text[start : start + size])
    words = len(text.split())
    yield GenerationChunk(
        finish_reason="stop",
        usage={"prompt_tokens": 3, "completion_tokens": words, "total_tokens": 3 + words},
    )


def _thunk(text: str) -> ModelOutputThunk:
    """A streaming thunk whose "tokens" are words, so reasoning tokens can be counted."""
    thunk = ModelOutputThunk.from_stream(_pieces(text))
    thunk.meta["count_tokens"] = lambda part: len(part.split())
    return thunk


async def serve(input, requirements=None, model_options=None):
    """Reply with hermes-style calls to every offered tool, after a <think> block."""
    options = model_options or {}
    tools = options.get(ModelOption.TOOLS) or []
    last = input[-1].get_text_content()
    if last == "program-call":
        call = ModelToolCall("lookup", None, {"q": "from the program"})
        return ModelOutputThunk(value="", tool_calls={call.name: call})
    text = "<think>The user wants the weather.</think>"
    if not tools:
        return _thunk(text + "No tools, so: sunny.")
    calls = "".join(
        "<tool_call>"
        + json.dumps({"name": t["function"]["name"], "arguments": {"city": "Paris", "n": i}})
        + "</tool_call>"
        for i, t in enumerate(tools)
    )
    return _thunk(text + "Let me check. " + calls)

"""Test program: echoes the last message word by word, and reports what serve() received."""

import asyncio
import json
import os
from typing import Any

from mellea.backends.model_options import ModelOption
from mellea.core import GenerationChunk, ModelOutputThunk, TokenLogprob
from mellea.serve import ChatMessage


async def _words(text: str, limit: int | None, logprobs: bool = False):
    words = text.split(" ")
    cut = limit is not None and limit < len(words)
    words = words[:limit] if cut else words
    for i, word in enumerate(words):
        await asyncio.sleep(float(os.environ.get("ECHO_DELAY", "0.01")))
        piece = word if i == 0 else " " + word
        # A made-up log-probability per word, so the wire format can be checked exactly.
        entry = TokenLogprob(piece, -0.25 * i, list(piece.encode()), [TokenLogprob("x", -9.0)])
        yield GenerationChunk(text=piece, logprobs=[entry] if logprobs else None)
    usage = {"prompt_tokens": 7, "completion_tokens": len(words), "total_tokens": 7 + len(words)}
    # Words up to </think> are reasoning (max_tokens 0 leaves no word at all).
    if words and words[0] == "<think>" and "</think>" in words:
        usage["completion_tokens_details"] = {"reasoning_tokens": words.index("</think>") + 1}
    yield GenerationChunk(finish_reason="length" if cut else "stop", usage=usage)


async def serve(
    input: list[ChatMessage],
    requirements: list[str] | None = None,
    model_options: dict[str, Any] | None = None,
    format: type | None = None,
) -> ModelOutputThunk:
    """``!args`` replies with the arguments as JSON; anything else is echoed."""
    text = input[-1].get_text_content()
    if text == "!args":
        options = {k: v for k, v in (model_options or {}).items()}
        reply = json.dumps(
            {
                "roles": [m.role for m in input],
                "requirements": requirements,
                "model_options": options,
                "format": format.model_json_schema() if format else None,
            }
        )
        return ModelOutputThunk(value=reply)
    options = model_options or {}
    limit = options.get(ModelOption.MAX_NEW_TOKENS)
    return ModelOutputThunk.from_stream(_words(text, limit, bool(options.get("logprobs"))))

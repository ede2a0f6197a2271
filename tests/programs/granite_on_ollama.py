"""Test program written for upstream's default: Granite on a local Ollama server."""

from typing import Any

import mellea
from mellea.serve import ChatMessage

session = mellea.start_session("ollama", "granite4:micro")


async def serve(input: list[ChatMessage], model_options: dict[str, Any] | None = None):
    """Answer the last message."""
    return await session.ainstruct(
        input[-1].get_text_content(),
        strategy=None,
        model_options=model_options,
        await_result=False,
    )

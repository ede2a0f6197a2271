"""Upstream-style program: images from the request go to a vision model through the openai backend.

Written like upstream mellea's ``m_serve_example_multimodal_image`` and its llama-server
audio example: the last message's text and images become one instruction. The model
server is ``MEDIA_BASE_URL`` (in the tests, a recording server on loopback).
"""

import os
from typing import Any

from mellea import start_session
from mellea.core import ImageBlock, ImageUrlBlock, ModelOutputThunk, Requirement
from mellea.serve import ChatMessage
from mellea.stdlib.sampling import RejectionSamplingStrategy


async def serve(
    input: list[ChatMessage],
    requirements: list[str] | None = None,
    model_options: dict[str, Any] | None = None,
) -> ModelOutputThunk:
    """Describe the images of the last message."""
    if not input:
        return ModelOutputThunk(value="No input provided")
    last_message = input[-1]
    text = last_message.get_text_content() or "Describe this image"
    image_blocks: list[ImageBlock | ImageUrlBlock] = last_message.get_image_blocks()
    session = start_session(
        "openai",
        model_id=os.environ.get("MEDIA_MODEL", "vision-model"),
        base_url=os.environ["MEDIA_BASE_URL"],
        api_key="not-needed",
    )
    return await session.ainstruct(
        description=text,
        images=image_blocks,
        requirements=[Requirement(r) for r in (requirements or []) if r],
        strategy=RejectionSamplingStrategy(loop_budget=2),
        model_options=model_options,
        await_result=False,  # streamed to the client as the model server sends it
    )

"""Upstream-style program: hands the request's audio and images to the local engine.

The local model reads text only, so a request carrying audio or images is answered
with a 400 naming ``messages``; a text-only request is answered by the model.
"""

from typing import Any

from mellea import start_session
from mellea.core import AudioBlock, ModelOutputThunk
from mellea.serve import ChatMessage


async def serve(
    input: list[ChatMessage],
    requirements: list[str] | None = None,
    model_options: dict[str, Any] | None = None,
) -> ModelOutputThunk:
    """Answer about the last message's audio (and images) on the local model."""
    last_message = input[-1]
    text = last_message.get_text_content() or "What is in this audio?"
    audio_blocks: list[AudioBlock] = list(last_message.get_audio_blocks())
    session = start_session()
    return await session.ainstruct(
        description=text,
        audio=audio_blocks,
        images=last_message.get_image_blocks(),
        strategy=None,
        model_options=model_options,
        await_result=False,
    )

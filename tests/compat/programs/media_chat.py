"""Upstream-style program: a synchronous ``serve`` that chats about images and audio.

Like upstream mellea's ``m_serve_example_multimodal_image``, it passes the last
message's images (and audio) to ``session.chat``, here on the openai backend pointed
at ``MEDIA_BASE_URL``.
"""

import os
from typing import Any

from mellea import start_session
from mellea.core import ModelOutputThunk
from mellea.serve import ChatMessage
from mellea.stdlib.context import ChatContext


def serve(
    input: list[ChatMessage],
    requirements: list[str] | None = None,
    model_options: dict[str, Any] | None = None,
) -> ModelOutputThunk:
    """Chat about the last message's images and audio."""
    _ = requirements, model_options
    last_message = input[-1]
    text = last_message.get_text_content() or "Describe this"
    session = start_session(
        "openai",
        model_id="multimodal-model",
        base_url=os.environ["MEDIA_BASE_URL"],
        ctx=ChatContext(),
    )
    result = session.chat(
        content=text,
        images=last_message.get_image_blocks(),
        audio=last_message.get_audio_blocks(),
    )
    return ModelOutputThunk(value=result.content)

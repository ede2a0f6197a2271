"""Upstream-style program: audio from the request goes to an audio-capable model server.

Written like upstream mellea's ``m_serve_example_multimodal_audio_llama_server``: the
openai backend, session-wide model options, and ``ainstruct(audio=...)``. The model
server is ``MEDIA_BASE_URL`` (in the tests, a recording server on loopback).
"""

import os
from typing import Any

from mellea import start_session
from mellea.backends import ModelOption
from mellea.core import AudioBlock, AudioUrlBlock, ModelOutputThunk, Requirement
from mellea.serve import ChatMessage
from mellea.stdlib.sampling import RejectionSamplingStrategy


async def serve(
    input: list[ChatMessage],
    requirements: list[str] | None = None,
    model_options: dict[str, Any] | None = None,
) -> ModelOutputThunk:
    """Answer about the audio of the last message."""
    last_message = input[-1]
    text = last_message.get_text_content() or "Transcribe or describe this audio"
    audio_blocks: list[AudioBlock | AudioUrlBlock] = list(last_message.get_audio_blocks())
    if not audio_blocks:
        return ModelOutputThunk(value="No audio provided.")
    session = start_session(
        "openai",
        model_id="audio-model",
        base_url=os.environ["MEDIA_BASE_URL"],
        api_key="default",
        model_options={ModelOption.MAX_NEW_TOKENS: 1000, "modalities": ["text"]},
    )
    return await session.ainstruct(
        description=text,
        audio=audio_blocks,
        requirements=[Requirement(r) for r in (requirements or []) if r],
        strategy=RejectionSamplingStrategy(loop_budget=2),
        model_options=model_options,
        await_result=False,  # streamed to the client as the model server sends it
    )

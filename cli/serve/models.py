"""Upstream mellea programs import ``ChatMessage`` from here; it lives in ``mellea.serve``."""

from mellea.serve.messages import (
    ChatMessage,
    ImageUrlContent,
    InputAudioContent,
    InputAudioData,
    MessageContent,
    TextContent,
)

__all__ = [
    "ChatMessage",
    "ImageUrlContent",
    "InputAudioContent",
    "InputAudioData",
    "MessageContent",
    "TextContent",
]

"""The OpenAI wire protocol, framework-free: models, option mapping, the request runner, SSE."""

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

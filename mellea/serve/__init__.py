"""The OpenAI wire protocol, framework-free: models, option mapping, the SSE helper."""

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

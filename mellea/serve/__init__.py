"""The OpenAI wire protocol, framework-free: models, option mapping, the request runner, one
reader per choice and each endpoint's renderers over it, SSE frames (cli/serve writes them)."""

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

"""Formatting for Granite models and their adapter functions: OpenAI-style request and
response types, and the io.yaml-driven rewriting of requests and results."""

from mellea.formatters.granite.base.types import (
    AssistantMessage,
    ChatCompletion,
    ChatCompletionResponse,
    DocumentMessage,
    GraniteChatCompletion,
    UserMessage,
    VLLMExtraBody,
)
from mellea.formatters.granite.intrinsics import IntrinsicsResultProcessor, IntrinsicsRewriter

__all__ = [
    "AssistantMessage",
    "ChatCompletion",
    "ChatCompletionResponse",
    "DocumentMessage",
    "GraniteChatCompletion",
    "IntrinsicsResultProcessor",
    "IntrinsicsRewriter",
    "UserMessage",
    "VLLMExtraBody",
]

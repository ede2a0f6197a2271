"""The OpenAI wire protocol, framework-free: models, option mapping, the SSE helper."""

from mellea.serve.messages import ChatMessage

__all__ = ["ChatMessage"]

"""Chat messages as clients send them, and as a program's ``serve()`` receives them."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class TextPart(BaseModel):
    """A text content part: ``{"type": "text", "text": "..."}``."""

    type: Literal["text"]
    text: str


class OtherPart(BaseModel):
    """A non-text content part (image, audio, file), kept as the client sent it."""

    model_config = ConfigDict(extra="allow")
    type: Literal["image_url", "input_audio", "file", "refusal"]


ContentPart = TextPart | OtherPart


class FunctionCall(BaseModel):
    """The function a tool call names, with its arguments as a JSON string."""

    name: str
    arguments: str = ""


class ToolCall(BaseModel):
    """A tool call carried by an assistant message."""

    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(BaseModel):
    """One message of a chat request.

    ``content`` is a string or a list of content parts; use
    :meth:`get_text_content` for the text either way.
    """

    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_call_id: str | None = None
    tool_calls: list[ToolCall] | None = None
    function_call: dict[str, Any] | None = None
    reasoning_content: str | None = Field(default=None, exclude=True)

    def get_text_content(self) -> str:
        """The message's text: the string content, or its text parts joined."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content if isinstance(part, TextPart))

    def to_openai(self) -> dict[str, Any]:
        """The message as a plain OpenAI-style dict (for a chat template or a remote API)."""
        return self.model_dump(exclude_none=True)

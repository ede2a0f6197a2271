"""The response object and its output items, in the shape the ``openai`` client parses.

These are plain pydantic models that write every field (the API has ``null`` for unset
values: ``"error": null``, ``"previous_response_id": null``), except an ``output_text``
part's ``logprobs``, which is there only when asked for.
"""

from __future__ import annotations

import time
import uuid
from typing import Any, Literal

from pydantic import BaseModel, Field

from mellea.serve.protocol import Usage

ItemStatus = Literal["in_progress", "completed", "incomplete"]
ResponseStatus = Literal["in_progress", "completed", "incomplete", "failed", "cancelled"]


def new_response_id() -> str:
    """A fresh ``resp_...`` id."""
    return f"resp_{uuid.uuid4().hex}"


class OutputText(BaseModel):
    """The text content part of an assistant message.

    ``logprobs`` (``[{token, logprob, bytes, top_logprobs}]``) is written only when the
    request asked for it.
    """

    type: Literal["output_text"] = "output_text"
    text: str = ""
    annotations: list[Any] = Field(default_factory=list)
    logprobs: list[dict[str, Any]] | None = Field(default=None, exclude_if=lambda v: v is None)


class OutputMessage(BaseModel):
    """An assistant message in ``output``."""

    type: Literal["message"] = "message"
    id: str
    status: ItemStatus = "in_progress"
    role: Literal["assistant"] = "assistant"
    content: list[OutputText] = Field(default_factory=list)


class FunctionCallItem(BaseModel):
    """A call of one of the request's function tools, in ``output``."""

    type: Literal["function_call"] = "function_call"
    id: str
    call_id: str
    name: str
    arguments: str = ""
    status: ItemStatus = "in_progress"


class ReasoningText(BaseModel):
    """The text of a reasoning item (what a reasoning parser split out of the reply)."""

    type: Literal["reasoning_text"] = "reasoning_text"
    text: str = ""


class SummaryText(BaseModel):
    """A part of a reasoning item's ``summary``: here the reasoning text itself, given
    when the request asked for a summary (``reasoning.summary``)."""

    type: Literal["summary_text"] = "summary_text"
    text: str = ""


class ReasoningItem(BaseModel):
    """The model's reasoning, in ``output`` before the message it led to."""

    type: Literal["reasoning"] = "reasoning"
    id: str
    summary: list[SummaryText] = Field(default_factory=list)
    content: list[ReasoningText] = Field(default_factory=list)
    status: ItemStatus = "in_progress"


OutputItem = OutputMessage | FunctionCallItem | ReasoningItem


class InputTokensDetails(BaseModel):
    """Where the input tokens came from."""

    cached_tokens: int = 0


class OutputTokensDetails(BaseModel):
    """What the output tokens were spent on."""

    reasoning_tokens: int = 0


class ResponseUsage(BaseModel):
    """Token counts of a response."""

    input_tokens: int = 0
    input_tokens_details: InputTokensDetails = Field(default_factory=InputTokensDetails)
    output_tokens: int = 0
    output_tokens_details: OutputTokensDetails = Field(default_factory=OutputTokensDetails)
    total_tokens: int = 0

    @classmethod
    def from_usage(cls, usage: Usage) -> ResponseUsage:
        """The Responses form of chat-completions token counts."""
        details = usage.prompt_tokens_details
        return cls(
            input_tokens=usage.prompt_tokens,
            input_tokens_details=InputTokensDetails(
                cached_tokens=details.cached_tokens if details else 0
            ),
            output_tokens=usage.completion_tokens,
            total_tokens=usage.total_tokens,
        )


class ResponseObject(BaseModel):
    """``object: "response"``: what POST, GET and the stream's lifecycle events carry."""

    id: str = Field(default_factory=new_response_id)
    object: Literal["response"] = "response"
    created_at: int = Field(default_factory=lambda: int(time.time()))
    completed_at: int | None = None
    status: ResponseStatus = "in_progress"
    background: bool = False
    error: dict[str, Any] | None = None
    incomplete_details: dict[str, Any] | None = None
    instructions: str | None = None
    max_output_tokens: int | None = None
    model: str
    output: list[OutputItem] = Field(default_factory=list)
    parallel_tool_calls: bool = True
    previous_response_id: str | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_logprobs: int | None = None
    tools: list[dict[str, Any]] = Field(default_factory=list)
    tool_choice: str | dict[str, Any] = "auto"
    text: dict[str, Any] = Field(default_factory=lambda: {"format": {"type": "text"}})
    truncation: Literal["auto", "disabled"] = "disabled"
    reasoning: dict[str, Any] | None = None
    usage: ResponseUsage | None = None
    user: str | None = None
    metadata: dict[str, str] = Field(default_factory=dict)
    store: bool = True
    # The program's report (mellea.serve.program_report), once the response has ended.
    mellea: dict[str, Any] | None = Field(default=None, exclude_if=lambda v: v is None)

    def wire(self) -> dict[str, Any]:
        """The JSON-ready dict sent to clients and kept in the store."""
        return self.model_dump(mode="json", by_alias=True)

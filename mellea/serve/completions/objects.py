"""The ``/v1/completions`` reply's wire objects: a completion and its choices (a streamed
chunk has the same shape)."""

from __future__ import annotations

import time
import uuid
from typing import Any, Literal

from pydantic import Field

from mellea.serve.logprobs import CompletionLogprobs
from mellea.serve.protocol import Usage, WireModel


class CompletionChoice(WireModel):
    """One prompt's completion."""

    keep_none = frozenset({"logprobs", "finish_reason"})
    index: int
    text: str
    logprobs: CompletionLogprobs | None = None
    finish_reason: Literal["stop", "length", "content_filter"] | None = None
    # vLLM's: the prompt's own log-probabilities, when ``prompt_logprobs`` was sent.
    prompt_logprobs: list[dict[str, dict[str, Any]] | None] | None = None
    mellea: dict[str, Any] | None = None  # the program's report (mellea.serve.program_report)


def new_text_completion_id() -> str:
    """A fresh ``cmpl-...`` id."""
    return f"cmpl-{uuid.uuid4().hex}"


class Completion(WireModel):
    """A non-streamed text completion, or one streamed chunk of it (same shape)."""

    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int = Field(default_factory=lambda: int(time.time()))
    model: str
    choices: list[CompletionChoice]
    usage: Usage | None = None
    system_fingerprint: str | None = None
    mellea: dict[str, Any] | None = None  # a program event in a stream chunk


class CompletionWithUsage(Completion):
    """A stream chunk when the client asked for usage: ``"usage": null`` until the last."""

    keep_none = frozenset({"usage"})

"""The legacy ``/v1/completions`` contract: prompt in, text out."""

from __future__ import annotations

import time
import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from mellea.core.thunk import ModelOutputThunk
from mellea.core.trace import ProgramTrace
from mellea.serve.bounds import MAX_CHOICES, check_body, check_generations
from mellea.serve.completion import finish_reason_of, total_usage, usage_of
from mellea.serve.errors import OpenAIError
from mellea.serve.logprobs import CompletionLogprobs, completion_logprobs
from mellea.serve.program_report import other_calls, program_report, with_calls
from mellea.serve.protocol import MAX_INT32, StreamOptions, Usage, WireModel


class CompletionRequest(BaseModel):
    """A ``POST /v1/completions`` body. Unknown fields are accepted and ignored."""

    model_config = ConfigDict(extra="allow")

    @model_validator(mode="before")
    @classmethod
    def bounded_body(cls, data: Any) -> Any:
        """The whole body within depth, size and Unicode bounds (see ``mellea.serve.bounds``)."""
        return check_body(data)

    prompt: str | list[str] | list[int] | list[list[int]]
    model: str | None = None
    max_tokens: int | None = Field(default=None, ge=1, le=MAX_INT32)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, ge=0, le=1)
    n: int | None = Field(default=None, ge=1, le=MAX_CHOICES)
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    stop: str | list[str] | None = None
    seed: int | None = Field(default=None, ge=-(2**63), lt=2**63)
    echo: bool | None = None
    logprobs: int | None = Field(default=None, ge=0, le=5)
    suffix: str | None = None
    best_of: int | None = Field(default=None, ge=1)
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
    logit_bias: dict[str, float] | None = None
    user: str | None = None
    top_k: int | None = Field(default=None, ge=0, le=MAX_INT32)
    min_p: float | None = Field(default=None, ge=0, le=1)
    repetition_penalty: float | None = Field(default=None, gt=0, le=10)
    ignore_eos: bool | None = None  # keep generating past end-of-sequence (benchmarks)

    def prompts(self) -> list[str]:
        """The prompts as strings; 400 for token-id prompts and empty lists."""
        if isinstance(self.prompt, str):
            return [self.prompt]
        if not self.prompt:
            raise OpenAIError(400, "prompt must not be empty", param="prompt")
        if all(isinstance(p, str) for p in self.prompt):
            return list(self.prompt)  # type: ignore[arg-type]
        raise OpenAIError(400, "token-id prompts are not supported; send text", param="prompt")

    def reject_unsupported(self) -> None:
        """400 for completion fields the server cannot honour."""
        if self.suffix is not None:
            raise OpenAIError(400, "suffix is not supported by this server", param="suffix")
        if self.echo and self.logprobs is not None:
            raise OpenAIError(
                400,
                "echo with logprobs needs the prompt's log-probabilities, "
                "which this server does not compute",
                param="logprobs",
            )
        if self.best_of is not None and self.best_of > 1:
            raise OpenAIError(400, "best_of > 1 is not supported", param="best_of")
        count = 1 if isinstance(self.prompt, str) or not self.prompt else len(self.prompt)
        if self.prompt and isinstance(self.prompt[0], int):
            count = 1  # one prompt of token ids (refused by ``prompts``)
        check_generations(count, self.n or 1)


class CompletionChoice(WireModel):
    """One prompt's completion."""

    keep_none = frozenset({"logprobs", "finish_reason"})
    index: int
    text: str
    logprobs: CompletionLogprobs | None = None
    finish_reason: Literal["stop", "length", "content_filter"] | None = None
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


async def text_completion(
    thunks: list[ModelOutputThunk],
    prompts: list[str],
    *,
    completion_id: str,
    created: int,
    model: str,
    echo: bool = False,
    logprobs: bool = False,
    n: int = 1,
    traces: list[ProgramTrace] | None = None,
) -> Completion:
    """Await every choice's reply and build the non-streamed completion.

    ``thunks[i]`` completes ``prompts[i]``; each prompt appears ``n`` times in a row.
    With program ``traces`` (one per choice), each choice carries its program's report
    and usage counts every model call of its program.
    """
    choices, usages, calls = [], [], []
    for index, (thunk, prompt) in enumerate(zip(thunks, prompts, strict=True)):
        trace = traces[index] if traces else None
        text = await thunk.avalue()
        reason = finish_reason_of(thunk)
        entries = thunk.logprobs if logprobs else None
        choices.append(
            CompletionChoice(
                index=index,
                text=(prompt + text) if echo else text,
                logprobs=completion_logprobs(entries) if entries else None,
                finish_reason="stop" if reason == "tool_calls" else reason,
                mellea=program_report(trace, thunk),
            )
        )
        usages.append(usage_of(thunk))
        calls += other_calls(trace, thunk)
    return Completion(
        id=completion_id,
        created=created,
        model=model,
        choices=choices,
        usage=with_calls(total_usage(usages, n), calls) or Usage(),
    )


def completion_options(request: CompletionRequest) -> dict[str, Any]:
    """Model options for a completion request (only what the client sent)."""
    from mellea.serve.options import LOGPROBS, TOP_LOGPROBS, sampling_options

    request.reject_unsupported()
    options = sampling_options(request)
    if request.logprobs is not None:
        options[LOGPROBS] = True
        options[TOP_LOGPROBS] = request.logprobs
    return options

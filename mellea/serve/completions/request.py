"""A ``/v1/completions`` request: its body, what it may not ask, its model options."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from mellea.core.model_options import ModelOption
from mellea.serve.bounds import MAX_CHOICES, MAX_PROMPT_LOGPROBS, check_generations
from mellea.serve.errors import OpenAIError
from mellea.serve.options import LOGPROBS, TOP_LOGPROBS, sampling_options
from mellea.serve.protocol import MAX_INT32, RequestBody, StreamOptions


class CompletionRequest(RequestBody):
    """A ``POST /v1/completions`` body."""

    prompt: str | list[str] | list[int] | list[list[int]]
    model: str | None = None
    max_tokens: int | None = Field(default=None, ge=0, le=MAX_INT32)  # 0: score the prompt
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, ge=0, le=1)
    n: int | None = Field(default=None, ge=1, le=MAX_CHOICES)
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    stop: str | list[str] | None = None
    seed: int | None = Field(default=None, ge=-(2**63), lt=2**63)
    echo: bool | None = None
    logprobs: int | None = Field(default=None, ge=0, le=5)
    # vLLM's: the prompt's own log-probabilities, this many alternatives per token.
    prompt_logprobs: int | None = Field(default=None, ge=0, le=MAX_PROMPT_LOGPROBS)
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
        if self.max_tokens == 0 and self.prompt_alternatives() is None:
            raise OpenAIError(
                400,
                "max_tokens 0 scores the prompt without generating: send it with echo "
                "and logprobs, or with prompt_logprobs",
                param="max_tokens",
            )
        if self.best_of is not None and self.best_of > 1:
            raise OpenAIError(400, "best_of > 1 is not supported", param="best_of")
        check_generations(self.prompt_count(), self.n or 1)

    def prompt_alternatives(self) -> int | None:
        """How many alternatives each prompt token's scores need (``echo`` with
        ``logprobs``, or ``prompt_logprobs``); None when the prompt is not scored."""
        echoed = self.logprobs if self.echo else None
        given = [k for k in (echoed, self.prompt_logprobs) if k is not None]
        return max(given) if given else None

    def prompt_count(self) -> int:
        """How many prompts the request holds (a list of token ids is one)."""
        if isinstance(self.prompt, str) or not self.prompt or isinstance(self.prompt[0], int):
            return 1
        return len(self.prompt)

    def generations(self) -> int:
        """How many replies the request asks for: each prompt ``n`` times."""
        return self.prompt_count() * (self.n or 1)


def completion_options(request: CompletionRequest) -> dict[str, Any]:
    """Model options for a completion request (only what the client sent)."""
    request.reject_unsupported()
    options = sampling_options(request)
    if request.logprobs is not None:
        options[LOGPROBS] = True
        options[TOP_LOGPROBS] = request.logprobs
    alternatives = request.prompt_alternatives()
    if alternatives is not None:  # the prompt's own text is scored: no chat template
        options[ModelOption.PROMPT_LOGPROBS] = alternatives
        options[ModelOption.RAW_PROMPT] = True
    return options

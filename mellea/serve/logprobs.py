"""Token log-probabilities in the two wire shapes: chat's and legacy completions'."""

from __future__ import annotations

from pydantic import Field

from mellea.core.logprobs import TokenLogprob
from mellea.serve.protocol import ChatTokenLogprob, ChoiceLogprobs, TopLogprob, WireModel

FLOOR = -9999.0  # JSON has no -inf; OpenAI reports impossible tokens with this value


def _value(logprob: float) -> float:
    return max(logprob, FLOOR)


def chat_logprobs(entries: list[TokenLogprob]) -> ChoiceLogprobs:
    """Chat's ``logprobs``: ``{"content": [{token, logprob, bytes, top_logprobs}, ...]}``."""
    return ChoiceLogprobs(
        content=[
            ChatTokenLogprob(
                token=entry.token,
                logprob=_value(entry.logprob),
                bytes=entry.bytes,
                top_logprobs=[
                    TopLogprob(token=top.token, logprob=_value(top.logprob), bytes=top.bytes)
                    for top in entry.top_logprobs
                ],
            )
            for entry in entries
        ]
    )


class CompletionLogprobs(WireModel):
    """Legacy completions' ``logprobs``: parallel lists, one item per token."""

    tokens: list[str] = Field(default_factory=list)
    token_logprobs: list[float] = Field(default_factory=list)
    top_logprobs: list[dict[str, float]] = Field(default_factory=list)
    text_offset: list[int] = Field(default_factory=list)


def completion_logprobs(entries: list[TokenLogprob], offset: int = 0) -> CompletionLogprobs:
    """Legacy ``logprobs`` for ``entries``; ``offset`` is where the first token's text starts."""
    result = CompletionLogprobs()
    for entry in entries:
        result.tokens.append(entry.token)
        result.token_logprobs.append(_value(entry.logprob))
        result.top_logprobs.append({top.token: _value(top.logprob) for top in entry.top_logprobs})
        result.text_offset.append(offset)
        offset += len(entry.token)
    return result

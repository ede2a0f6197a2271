"""Token log-probabilities in the wire shapes: chat's, legacy completions' (also for a
scored prompt, ``echo`` with ``logprobs``) and vLLM's ``prompt_logprobs``."""

from __future__ import annotations

from pydantic import Field

from mellea.core.logprobs import TokenLogprob
from mellea.serve.protocol import ChatTokenLogprob, ChoiceLogprobs, TopLogprob, WireModel

FLOOR = -9999.0  # JSON has no -inf; OpenAI reports impossible tokens with this value


def _value(logprob: float) -> float:
    return max(logprob, FLOOR)


def _maybe(logprob: float | None) -> float | None:
    return None if logprob is None else max(logprob, FLOOR)


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
    """Legacy completions' ``logprobs``: parallel lists, one item per token (a scored
    prompt's first token has ``null`` for its log-probability and alternatives)."""

    tokens: list[str] = Field(default_factory=list)
    token_logprobs: list[float | None] = Field(default_factory=list)
    top_logprobs: list[dict[str, float] | None] = Field(default_factory=list)
    text_offset: list[int] = Field(default_factory=list)

    def extend(self, more: CompletionLogprobs) -> CompletionLogprobs:
        """These tokens, then ``more``'s."""
        self.tokens += more.tokens
        self.token_logprobs += more.token_logprobs
        self.top_logprobs += more.top_logprobs
        self.text_offset += more.text_offset
        return self


def completion_logprobs(
    entries: list[TokenLogprob] | tuple[TokenLogprob, ...], offset: int = 0, top: int = 20
) -> CompletionLogprobs:
    """Legacy ``logprobs`` for ``entries``; ``offset`` is where the first token's text
    starts; at most ``top`` alternatives each."""
    result = CompletionLogprobs()
    for entry in entries:
        result.tokens.append(entry.token)
        result.token_logprobs.append(_maybe(entry.logprob))
        result.top_logprobs.append(
            None
            if entry.logprob is None
            else {alt.token: _value(alt.logprob) for alt in entry.top_logprobs[:top]}  # type: ignore[arg-type]
        )
        result.text_offset.append(offset)
        offset += len(entry.token)
    return result


def vllm_prompt_logprobs(
    entries: list[TokenLogprob] | tuple[TokenLogprob, ...], top: int
) -> list[dict[str, dict[str, float | int | str | None]] | None]:
    """vLLM's ``prompt_logprobs``: ``None`` for the first token, then per token a map of
    token id -> ``{logprob, rank, decoded_token}`` holding the token itself and the
    ``top`` most likely there."""
    result: list[dict[str, dict[str, float | int | str | None]] | None] = []
    for entry in entries:
        if entry.logprob is None:
            result.append(None)
            continue
        alternatives = {
            str(alt.token_id): {
                "logprob": _value(alt.logprob),
                "rank": rank,
                "decoded_token": alt.token,
            }  # type: ignore[arg-type]
            for rank, alt in enumerate(entry.top_logprobs[:top], start=1)
        }
        alternatives[str(entry.token_id)] = {
            "logprob": _value(entry.logprob),
            "rank": entry.rank,
            "decoded_token": entry.token,
        }
        result.append(alternatives)
    return result

"""The ``logprobs_workaround`` of an io.yaml: reading an adapter's answer from the
final channel of a Harmony-format output (gpt-oss).

Such a model writes ``<|channel|>analysis<|message|>...<|end|>`` before
``<|channel|>final<|message|>{answer}<|end|>``, and a server may hand back the whole
text or only part of it as the message content. The answer is then taken from the
generated tokens themselves: those after the last ``final`` channel header, up to an
end token. Tokens are matched one by one, so text that merely spells ``<|channel|>``
out of several tokens is never taken for the special token.
"""

from __future__ import annotations

from collections.abc import Sequence

CHANNEL = "<|channel|>"
MESSAGE = "<|message|>"
END_TOKENS = frozenset({"<|end|>", "<|return|>", "<|end_of_text|>"})


def _skip_blank(tokens: Sequence[str], i: int) -> int:
    while i < len(tokens) and not tokens[i].strip():
        i += 1
    return i


def final_message_start(tokens: Sequence[str]) -> int | None:
    """The index of the ``<|message|>`` token that ends the last
    ``<|channel|> final <|message|>`` header (blank tokens may sit between), or None."""
    found = None
    for i, token in enumerate(tokens):
        if token != CHANNEL:
            continue
        j = _skip_blank(tokens, i + 1)
        if j >= len(tokens) or tokens[j].strip() != "final":
            continue
        j = _skip_blank(tokens, j + 1)
        if j < len(tokens) and tokens[j] == MESSAGE:
            found = j
    return found


def final_channel_span(tokens: Sequence[str]) -> tuple[int, int] | None:
    """``(start, end)``: the token range of the final channel's answer, or None when
    there is no final channel or it is empty."""
    header = final_message_start(tokens)
    if header is None:
        return None
    start = header + 1
    end = next((i for i in range(start, len(tokens)) if tokens[i] in END_TOKENS), len(tokens))
    if start >= end:
        return None
    return start, end


__all__ = ["CHANNEL", "END_TOKENS", "MESSAGE", "final_channel_span", "final_message_start"]

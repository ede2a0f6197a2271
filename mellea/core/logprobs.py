"""Token log-probabilities, as a backend reports them for a generation."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class TokenLogprob:
    """One generated token: its text, log-probability, raw bytes and likely alternatives.

    ``bytes`` holds the token's exact UTF-8 bytes, which matters when a token is only
    part of a character (its ``token`` text then cannot show it faithfully).
    """

    token: str
    logprob: float
    bytes: list[int] | None = None
    top_logprobs: list[TokenLogprob] = field(default_factory=list)

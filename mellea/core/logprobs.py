"""Token log-probabilities, as a backend reports them for a generation."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class TokenLogprob:
    """One generated (or prompt) token: its text, log-probability, raw bytes and likely
    alternatives.

    ``bytes`` holds the token's exact UTF-8 bytes, which matters when a token is only
    part of a character (its ``token`` text then cannot show it faithfully). A prompt's
    first token has no log-probability (``None``: nothing comes before it); prompt
    tokens also say their ``token_id`` and ``rank`` (1: the model's best guess there)
    where the backend knows them.
    """

    token: str
    logprob: float | None
    bytes: list[int] | None = None
    top_logprobs: list[TokenLogprob] = field(default_factory=list)
    token_id: int | None = None
    rank: int | None = None

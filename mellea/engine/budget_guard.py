"""Budget-aware closing: a constrained answer is complete when its token budget runs out.

A grammar-constrained generation (a JSON schema) that meets its ``max_tokens`` in the
middle of a value would end as text no parser takes. So, near the end of the budget,
each sampled token is checked: if, after it, the shortest way to an accepting state
(the *closing path*) no longer fits in the tokens left, the first token of the
closing path from before it is used instead. The closing path is found greedily on a
copy of the llguidance matcher: a forced token where the grammar forces one, else
the first allowed token of a short preference list (close the open string, close the
object or array, the shortest value), else the first token the grammar allows.

Each choice depends only on the matcher's state and whether the text is inside a
string, so following the path one token at a time shortens it by exactly one: once
the path fits, it keeps fitting, and the text at the limit is a complete value.

Far from the end nothing runs per token beyond a comparison: the path's length is
re-estimated every :data:`REFRESH` tokens, and checked each token only once the
tokens left come within :data:`ZONE` of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

ZONE = 64  # check every token once the tokens left are within this of the path's length
# Farther away, re-estimate the path's length every REFRESH tokens. A token can lengthen
# the path by many (opening an object whose required members all follow), so the zone
# is wide enough for several such openings between two estimates.
REFRESH = 8
SEARCH_LIMIT = 256  # a closing path longer than this is not looked for

# What to try, in order, when the grammar forces nothing. Outside a string: close an
# object or array, else end the member, else the shortest value. Inside one: close it, else any character.
OUTSIDE_STRING = (
    "}",
    "]",
    ",",  # only where it is progress: a number ends, or a required member must follow
    "0",
    '""',
    '"',
    "false",
    "null",
    "[]",
    "{}",
    "f",
    "n",
    "t",
    "[",
    "{",
    *"123456789",
    "-",
    ":",
)
INSIDE_STRING = ('"', "a", "0", " ")
AFTER_BACKSLASH = ("n", '"')


@dataclass(frozen=True)
class Lexical:
    """Where the text so far ends: inside a string, and just after a backslash in it."""

    in_string: bool = False
    escaped: bool = False

    def scan(self, data: bytes) -> Lexical:
        """The state after ``data`` follows."""
        in_string, escaped = self.in_string, self.escaped
        for byte in data:
            if escaped:
                escaped = False
            elif in_string and byte == 0x5C:  # a backslash
                escaped = True
            elif byte == 0x22:  # a double quote
                in_string = not in_string
        return Lexical(in_string, escaped)


class ClosingTokens:
    """The token ids of the preference lists, for one tokenizer (built once)."""

    def __init__(self, ll_tokenizer: Any) -> None:
        self.decode = ll_tokenizer.decode_bytes

        def ids(texts: tuple[str, ...]) -> list[int]:
            found = []
            for text in texts:
                tokens = ll_tokenizer.tokenize_bytes(text.encode())
                if len(tokens) == 1 and self.decode(tokens) == text.encode():
                    found.append(tokens[0])
            return found

        self.outside = ids(OUTSIDE_STRING)
        self.inside = ids(INSIDE_STRING)
        self.escaped = ids(AFTER_BACKSLASH)

    def preferred(self, lexical: Lexical) -> list[int]:
        """The tokens to try, in order, where the text is in ``lexical``."""
        if lexical.escaped:
            return self.escaped
        return self.inside if lexical.in_string else self.outside


def _next_token(matcher: Any, lexical: Lexical, tokens: ClosingTokens) -> int | None:
    """The closing path's next token from ``matcher``'s state; None if nothing is allowed."""
    forced = matcher.compute_ff_tokens()
    if forced:
        return forced[0]
    for token in tokens.preferred(lexical):
        if matcher.validate_tokens([token]) == 1:
            return token
    import numpy as np

    mask = np.frombuffer(matcher.compute_bitmask(), dtype=np.uint8)
    allowed = np.flatnonzero(np.unpackbits(mask, bitorder="little"))
    return int(allowed[0]) if allowed.size else None


def closing_path(
    matcher: Any, lexical: Lexical, tokens: ClosingTokens, limit: int = SEARCH_LIMIT
) -> list[int] | None:
    """The tokens that take ``matcher`` (consumed: pass a copy) to an accepting state;
    None when none is found within ``limit`` tokens."""
    path: list[int] = []
    while not (matcher.is_accepting() or matcher.is_stopped()):
        if len(path) >= limit or matcher.is_error():
            return None
        token = _next_token(matcher, lexical, tokens)
        if token is None or not matcher.consume_token(token):
            return None
        path.append(token)
        lexical = lexical.scan(tokens.decode([token]))
    return None if matcher.is_error() else path


class BudgetGuard:
    """One sequence's closing state: the last estimate of its closing path's length."""

    def __init__(self, tokens: ClosingTokens) -> None:
        self.tokens = tokens
        self.lexical = Lexical()
        self.unscanned: list[int] = []  # accepted tokens not yet read into ``lexical``
        self.distance = 0  # the closing path's length at the last estimate
        self.checked_at = -REFRESH  # output tokens there were at the last estimate
        self.closed = False  # whether a token was replaced to close in budget

    def accepted(self, token: int) -> None:
        """Note a token the grammar accepted (read lazily, when a check needs it)."""
        self.unscanned.append(token)

    def due(self, produced: int, max_tokens: int) -> bool:
        """Whether the token after ``produced`` output tokens must be checked."""
        left = max_tokens - produced - 1
        return left <= self.distance + ZONE or produced - self.checked_at >= REFRESH

    def choose(self, matcher: Any, token: int, produced: int, max_tokens: int) -> int:
        """``token`` if the closing path after it fits in the tokens left after it,
        else the closing path's first token from ``matcher``'s state (not consumed)."""
        if self.unscanned:
            self.lexical = self.lexical.scan(self.tokens.decode(self.unscanned))
            self.unscanned = []
        left = max_tokens - produced - 1
        self.checked_at = produced
        after = matcher.deep_copy()
        if after.consume_token(token):
            lexical = self.lexical.scan(self.tokens.decode([token]))
            path = closing_path(after, lexical, self.tokens)
            if path is not None and len(path) <= left:
                self.distance = len(path)
                return token
        path = closing_path(matcher.deep_copy(), self.lexical, self.tokens)
        if not path:  # complete already, or no closing found: the model's token stands
            return token
        self.distance = len(path) - 1
        self.closed = True
        return path[0]

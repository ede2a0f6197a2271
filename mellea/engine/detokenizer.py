"""Incremental detokenization that never emits half a character.

Byte-level tokenizers split multi-byte characters across tokens, and SentencePiece
ones only put the right space in front of a token when it is decoded after its
neighbour. So each step decodes a small window (the tokens since the last emitted
text, plus a few before them) and emits only the part that is new and complete.
"""

from __future__ import annotations

from typing import Any

CONTEXT_TOKENS = 5  # prompt tokens decoded in front of the first output token
REPLACEMENT = "\ufffd"


class IncrementalDetokenizer:
    """Feeds on token ids and returns the text they add, holding back broken characters."""

    def __init__(
        self, tokenizer: Any, prompt_ids: list[int], skip_special_tokens: bool = True
    ) -> None:
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        # ids[:read] were already turned into text; ids[:prefix] only serve as context.
        self.ids = list(prompt_ids[-CONTEXT_TOKENS:])
        self.prefix = 0
        self.read = len(self.ids)

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=self.skip_special_tokens)

    def step(self, token_ids: list[int]) -> str:
        """Add tokens; return the new complete text (possibly empty)."""
        self.ids.extend(token_ids)
        before = self._decode(self.ids[self.prefix : self.read])
        text = self._decode(self.ids[self.prefix :])
        if len(text) <= len(before) or text.endswith(REPLACEMENT):
            return ""
        # Slide the window: what was new becomes the context; older ids can go.
        self.ids = self.ids[self.prefix :]
        self.read -= self.prefix
        self.prefix, self.read = self.read, len(self.ids)
        return text[len(before) :]

    def flush(self) -> str:
        """The text still held back, without a trailing incomplete character."""
        before = self._decode(self.ids[self.prefix : self.read])
        text = self._decode(self.ids[self.prefix :])
        self.prefix = self.read = len(self.ids)
        return text[len(before) :].rstrip(REPLACEMENT)

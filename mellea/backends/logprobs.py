"""Token log-probabilities from a backend's own form into :class:`TokenLogprob`."""

from __future__ import annotations

import weakref
from typing import Any

from mellea.core.logprobs import TokenLogprob


def _byte_level_decoder() -> dict[str, int]:
    """The inverse of the byte-to-character table byte-level BPE vocabularies use.

    Printable Latin-1 bytes stand for themselves; the others were shifted to the
    code points from 256 up, in byte order.
    """
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    table = {chr(b): b for b in printable}
    shifted = 0
    for b in range(256):
        if b not in printable:
            table[chr(256 + shifted)] = b
            shifted += 1
    return table


_BYTE_LEVEL = _byte_level_decoder()


class TokenTexts:
    """Each token id's text and exact bytes for one tokenizer (cached: ids repeat a lot)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self._cache: dict[int, tuple[str, list[int]]] = {}

    def __call__(self, token_id: int) -> tuple[str, list[int]]:
        """``(text, bytes)`` of ``token_id``; a piece of a character shows as ``\\xNN``."""
        cached = self._cache.get(token_id)
        if cached is None:
            cached = self._cache[token_id] = self._lookup(token_id)
        return cached

    def _lookup(self, token_id: int) -> tuple[str, list[int]]:
        piece = self.tokenizer.convert_ids_to_tokens(token_id)
        if isinstance(piece, str) and piece and all(c in _BYTE_LEVEL for c in piece):
            raw = bytes(_BYTE_LEVEL[c] for c in piece)  # byte-level BPE (GPT-2, Llama 3)
        elif isinstance(piece, str) and len(piece) == 6 and piece.startswith("<0x"):
            raw = bytes([int(piece[3:5], 16)])  # SentencePiece byte fallback
        else:
            raw = self.tokenizer.decode([token_id]).encode()
        return raw.decode("utf-8", errors="backslashreplace"), list(raw)

    def logprob(self, token_id: int, logprob: float) -> TokenLogprob:
        """A :class:`TokenLogprob` (without alternatives) for ``token_id``."""
        text, raw = self(token_id)
        return TokenLogprob(token=text, logprob=logprob, bytes=raw)


_texts_by_tokenizer: weakref.WeakKeyDictionary[Any, TokenTexts] = weakref.WeakKeyDictionary()


def token_texts(tokenizer: Any) -> TokenTexts:
    """The one :class:`TokenTexts` of ``tokenizer``: backends built per request share it."""
    texts = _texts_by_tokenizer.get(tokenizer)
    if texts is None:
        texts = _texts_by_tokenizer[tokenizer] = TokenTexts(tokenizer)
    return texts


def engine_logprobs(entries: list[Any], texts: TokenTexts) -> list[TokenLogprob]:
    """The local engine's ``TokenLogprobs`` (ids and numbers) with their token texts."""
    result = []
    for entry in entries:
        item = texts.logprob(entry.token_id, entry.logprob)
        item.top_logprobs = [texts.logprob(token, value) for token, value in entry.top]
        result.append(item)
    return result


def engine_prompt_logprobs(
    prompt_ids: list[int], entries: list[Any], texts: TokenTexts
) -> list[TokenLogprob]:
    """The local engine's prompt log-probabilities (None for the first token, then a
    ``TokenLogprobs`` per token) as one :class:`TokenLogprob` per prompt token, each
    with its id and rank; the first has no log-probability."""
    first = texts.logprob(prompt_ids[0], 0.0)
    first.logprob = None
    result = [first, *engine_logprobs([e for e in entries if e is not None], texts)]
    for item, token_id, entry in zip(result, prompt_ids, entries, strict=True):
        item.token_id = token_id
        item.rank = entry.rank if entry is not None else None
        for top, (top_id, _) in zip(item.top_logprobs, entry.top if entry else [], strict=True):
            top.token_id = top_id
    return result


def openai_logprobs(content: list[Any]) -> list[TokenLogprob]:
    """A chat completion chunk's ``logprobs.content`` as :class:`TokenLogprob` entries."""
    return [
        TokenLogprob(
            token=entry.token,
            logprob=entry.logprob,
            bytes=entry.bytes,
            top_logprobs=[
                TokenLogprob(token=top.token, logprob=top.logprob, bytes=top.bytes)
                for top in entry.top_logprobs or []
            ],
        )
        for entry in content
    ]

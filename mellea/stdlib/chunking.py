"""Chunking strategies: how validated streaming cuts a growing text into checkable pieces.

A strategy is stateless: ``split(text)`` returns the complete chunks in ``text``
(each a verbatim substring, the unfinished tail withheld) and ``flush(text)`` the
tail once the stream has ended. :class:`Chunker` applies a strategy to a stream of
deltas, holding only the text since the last boundary.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod

_SENTENCE_END = re.compile("[.!?][\"'\u201d\u2019)]?\\s")
_SPACES = re.compile(r"\s+")
_PARAGRAPH_BREAK = re.compile(r"\n{2,}")


class ChunkingStrategy(ABC):
    """Decides where one chunk of streamed text ends."""

    @abstractmethod
    def split(self, text: str) -> list[str]:
        """The complete chunks in ``text``, without the unfinished tail.

        Each chunk must be a non-empty verbatim substring of ``text``; text between
        chunks (separators) may be left out.
        """

    def flush(self, text: str) -> list[str]:
        """The tail ``split`` withheld, as a last chunk once no more text comes;
        by default it is dropped."""
        del text
        return []


def _sentences(text: str) -> tuple[list[str], str]:
    """Complete sentences (separators dropped) and the remaining tail."""
    found: list[str] = []
    rest = text.lstrip()
    while (m := _SENTENCE_END.search(rest)) is not None:
        found.append(rest[: m.start() + len(m.group().rstrip())])
        rest = rest[m.end() :].lstrip()
    return found, rest


class SentenceChunking(ChunkingStrategy):
    """One sentence per chunk: it ends at ``.``, ``!`` or ``?`` (optionally a closing
    quote or parenthesis) followed by whitespace. Abbreviations split too."""

    def split(self, text: str) -> list[str]:
        """Complete sentences, without surrounding whitespace."""
        return _sentences(text)[0]

    def flush(self, text: str) -> list[str]:
        """The unfinished last sentence, stripped, if any."""
        tail = _sentences(text)[1].rstrip()
        return [tail] if tail else []


class WordChunking(ChunkingStrategy):
    """One whitespace-separated word per chunk."""

    def split(self, text: str) -> list[str]:
        """Every word already followed by whitespace."""
        words = [w for w in _SPACES.split(text) if w]
        if words and text and not text[-1].isspace():
            words.pop()
        return words

    def flush(self, text: str) -> list[str]:
        """The last word when the text does not end in whitespace."""
        if not text or text[-1].isspace():
            return []
        words = [w for w in _SPACES.split(text) if w]
        return words[-1:]


class ParagraphChunking(ChunkingStrategy):
    """One paragraph per chunk; paragraphs are separated by two or more newlines."""

    def split(self, text: str) -> list[str]:
        """Every paragraph already followed by a blank line."""
        parts = _PARAGRAPH_BREAK.split(text)
        if not re.search(r"\n{2,}$", text):
            parts = parts[:-1]
        return [p for p in parts if p]

    def flush(self, text: str) -> list[str]:
        """The last paragraph as it stands (not stripped), if the text did not end in a break."""
        if not text or re.search(r"\n{2,}$", text):
            return []
        tail = _PARAGRAPH_BREAK.split(text)[-1]
        return [tail] if tail else []


_ALIASES: dict[str, type[ChunkingStrategy]] = {
    "sentence": SentenceChunking,
    "word": WordChunking,
    "paragraph": ParagraphChunking,
}


def resolve_chunking_strategy(
    chunking: str | ChunkingStrategy | None,
) -> ChunkingStrategy | None:
    """A strategy from an alias (``"sentence"``, ``"word"``, ``"paragraph"``), a
    strategy (returned as is) or ``None`` (no chunking: raw deltas)."""
    if chunking is None or isinstance(chunking, ChunkingStrategy):
        return chunking
    if isinstance(chunking, str) and chunking in _ALIASES:
        return _ALIASES[chunking]()
    raise ValueError(f"unknown chunking {chunking!r}; use one of {sorted(_ALIASES)}")


class Chunker:
    """Feeds stream deltas to a strategy and returns chunks as they complete.

    However the text is sliced into deltas, the chunks are those ``split`` finds in
    the whole text.
    """

    def __init__(self, strategy: ChunkingStrategy) -> None:
        self._strategy = strategy
        self._pending = ""

    def feed(self, delta: str) -> list[str]:
        """Add a delta; the chunks it completed, in order."""
        self._pending += delta
        chunks = self._strategy.split(self._pending)
        cursor = 0
        for chunk in chunks:
            at = self._pending.find(chunk, cursor) if chunk else -1
            if at < 0:
                raise ValueError(
                    f"{type(self._strategy).__name__}.split() must return non-empty "
                    "verbatim pieces of its input"
                )
            cursor = at + len(chunk)
        self._pending = self._pending[cursor:]
        return chunks

    def flush(self) -> list[str]:
        """The withheld tail, as the strategy's ``flush`` makes it, once the stream ends."""
        tail, self._pending = self._pending, ""
        return self._strategy.flush(tail)


__all__ = [
    "Chunker",
    "ChunkingStrategy",
    "ParagraphChunking",
    "SentenceChunking",
    "WordChunking",
    "resolve_chunking_strategy",
]

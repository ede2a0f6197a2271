"""Reasoning parsers: split ``<think>...</think>`` reasoning from the reply's content.

Like the tool-call parsers, each format is one incremental state machine and ``parse`` runs it
on the whole text, so streamed deltas joined always equal the one-shot result. Reasoning is
trimmed of surrounding whitespace; in content, the whitespace around the block collapses to
the whitespace before it (to nothing at the start or end). Only a possible partial tag and
trailing whitespace are held back while streaming.

Tool calls come after the reasoning: chain the parsers by feeding each content delta of the
reasoning parser to the tool-call parser (see :class:`mellea.core.parsers.ReplyParser`).
A call written inside the reasoning stays reasoning.
"""

from __future__ import annotations

from typing import ClassVar

from mellea.core.parsers._text import TrimmedText, partial_suffix

OPEN = "<think>"
CLOSE = "</think>"


class ReasoningParser:
    """Base of the reasoning formats: the state of one reply (use a fresh one per reply)."""

    name: ClassVar[str] = ""
    starts_in_reasoning: ClassVar[bool] = False

    def __init__(self) -> None:
        """Start a reply."""
        self._buf = ""
        # "start": before anything is known; "content_before": content, <think> may come;
        # "reasoning": inside the block; "content": after it, everything is content.
        self._state = "start"
        self._reasoning = TrimmedText(trim_start=True)
        self._content = TrimmedText()
        self._out_reasoning = ""
        self._out_content = ""
        self._finished = False

    def parse(self, text: str) -> tuple[str | None, str]:
        """Split a whole reply into (reasoning, or None if there is none; content)."""
        fresh = type(self)()
        first, last = fresh.feed(text), fresh.finish()
        return (first[0] + last[0]) or None, first[1] + last[1]

    def feed(self, piece: str) -> tuple[str, str]:
        """Add the next piece of the reply; return the (reasoning, content) it certainly adds."""
        if self._finished:
            raise RuntimeError("feed() called after finish()")
        self._buf += piece
        while self._step(final=False):
            pass
        return self._take()

    def finish(self) -> tuple[str, str]:
        """End of the reply: release what was held back."""
        if not self._finished:
            self._finished = True
            while self._step(final=True):
                pass
            self._out_content += self._content.flush()
            # Trailing whitespace of an unclosed block is dropped, as at ``</think>``.
        return self._take()

    def _step(self, final: bool) -> bool:
        if self._state == "start":
            return self._start(final)
        if self._state == "content":
            self._out_content += self._content.push(self._buf)
            self._buf = ""
            return False
        inside = self._state == "reasoning"
        tag = CLOSE if inside else OPEN
        at = self._buf.find(tag)
        if at < 0:
            keep = 0 if final else partial_suffix(self._buf, tag)
            self._emit(inside, self._buf[: len(self._buf) - keep])
            self._buf = self._buf[len(self._buf) - keep :]
            return False
        self._emit(inside, self._buf[:at])
        self._buf = self._buf[at + len(tag) :]
        if inside:
            self._reasoning.cut()
        self._content.cut()
        self._state = "content" if inside else "reasoning"
        return True

    def _start(self, final: bool) -> bool:
        if not self.starts_in_reasoning:
            self._state = "content_before"
            return True
        # The template opened the block; a model may still repeat the opening tag.
        head = self._buf.lstrip()
        if head.startswith(OPEN):
            self._buf = head[len(OPEN) :]
        elif OPEN.startswith(head) and not final:
            return False
        self._state = "reasoning"
        return True

    def _emit(self, reasoning: bool, text: str) -> None:
        if reasoning:
            self._out_reasoning += self._reasoning.push(text)
        else:
            self._out_content += self._content.push(text)

    def _take(self) -> tuple[str, str]:
        out = self._out_reasoning, self._out_content
        self._out_reasoning = self._out_content = ""
        return out


class Qwen3ReasoningParser(ReasoningParser):
    """Qwen3 (and QwQ): ``<think>...</think>`` in the output; without ``<think>``, all is content.

    For models whose chat template opens the block itself (Qwen3 ``-Thinking-2507``), use
    ``deepseek_r1``.
    """

    name = "qwen3"


class DeepSeekR1ReasoningParser(ReasoningParser):
    """DeepSeek-R1: the template opened the block, so the output starts as reasoning.

    Everything up to ``</think>`` is reasoning (all of it if ``</think>`` never comes); a
    repeated ``<think>`` at the very start is dropped.
    """

    name = "deepseek_r1"
    starts_in_reasoning = True

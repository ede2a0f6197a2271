"""Text helpers shared by the streaming parsers: marker prefixes, JSON extents, trimming."""

from __future__ import annotations

import json
import re
from typing import Any

_JSON_SPECIAL = re.compile(r'["\\{}\[\]]')


def partial_suffix(text: str, marker: str) -> int:
    """Length of the longest end of ``text`` that is a proper beginning of ``marker``.

    That many characters must be held back: more input may complete the marker.
    """
    for size in range(min(len(text), len(marker) - 1), 0, -1):
        if text.endswith(marker[:size]):
            return size
    return 0


def first_non_space(text: str) -> int | None:
    """Index of the first non-whitespace character of ``text``, or None if there is none."""
    stripped = text.lstrip()
    return len(text) - len(stripped) if stripped else None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def loads_strict(text: str) -> Any:
    """``json.loads`` that also rejects ``NaN``/``Infinity`` (they cannot be re-emitted as JSON)."""
    return json.loads(text, parse_constant=_reject_constant)


def canonical_arguments(args: dict[str, Any]) -> str:
    """The one JSON form of a call's arguments, the same as ``ModelToolCall.arguments_json``."""
    return json.dumps(args, ensure_ascii=False)


class JsonExtent:
    """Finds, incrementally, where a JSON object or array ends.

    The scanned text must start with ``{`` or ``[``. Only brackets and strings are tracked,
    so the extent of malformed JSON is still found; validity is checked by decoding it.
    """

    def __init__(self) -> None:
        """Start before the opening bracket."""
        self._pos = 0
        self._depth = 0
        self._in_string = False
        self._escaped = False

    def scan(self, text: str) -> int | None:
        """End (exclusive) of the value at the start of ``text``, or None if it is not closed yet.

        ``text`` may only grow between calls; scanning resumes where it stopped.
        """
        pos = self._pos
        if self._escaped and pos < len(text):
            pos += 1  # the character a backslash at the end of the last scan escaped
            self._escaped = False
        while True:
            match = _JSON_SPECIAL.search(text, pos)
            if match is None:
                self._pos = len(text)
                return None
            pos = match.end()
            char = match.group()
            if self._in_string:
                if char == "\\":
                    if pos == len(text):
                        self._escaped = True
                    else:
                        pos += 1
                elif char == '"':
                    self._in_string = False
            elif char == '"':
                self._in_string = True
            elif char in "{[":
                self._depth += 1
            elif char in "}]":
                self._depth -= 1
                if self._depth <= 0:
                    self._pos = pos
                    return pos


class TrimmedText:
    """One output channel that drops whitespace touching a removed span (tag, tool call).

    Whitespace on both sides of a removed span collapses: to nothing at the start or end of
    the channel, to the whitespace before the span between two pieces of text. So trailing
    whitespace is held until it is known which case applies.
    """

    def __init__(self, trim_start: bool = False) -> None:
        """``trim_start``: drop the whitespace the channel starts with."""
        self._pending = ""
        self._trim_start = trim_start
        self._started = False  # whether any text was released

    def push(self, text: str) -> str:
        """Add text; return what can be released now."""
        if self._trim_start:
            text = text.lstrip()
            if not text:
                return ""
            self._trim_start = False
        text = self._pending + text
        body = text.rstrip()
        self._pending = text[len(body) :]
        self._started = self._started or bool(body)
        return body

    def cut(self) -> None:
        """A span was removed here."""
        if not self._started:
            self._pending = ""
        self._trim_start = True

    def flush(self) -> str:
        """End of the channel: release held whitespace unless a removed span came last."""
        pending, self._pending = self._pending, ""
        return "" if self._trim_start else pending

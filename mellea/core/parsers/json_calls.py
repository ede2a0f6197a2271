"""Replies that are JSON calls: ``llama3_json``, ``granite`` and ``json`` (constrained decoding)."""

from __future__ import annotations

from mellea.core.parsers._text import JsonExtent
from mellea.core.parsers.tool_calls import ScanningToolParser, calls_from_json


class JsonReplyParser(ScanningToolParser):
    """A reply that starts (after whitespace and an optional tag) with JSON call(s).

    A reply that starts otherwise is all content; so is a value that is not a valid call,
    together with everything after it.
    """

    openers = "{["
    tags: tuple[str, ...] = ()  # optional markers before a call, dropped when a call follows
    separator = ""  # between calls; empty: the reply holds a single JSON value
    require_args = False

    def __init__(self) -> None:
        """Start a reply before its first value."""
        super().__init__()
        self._extent = JsonExtent()

    def _step(self, final: bool) -> bool:
        if self._state == "pass":
            return self._pass_rest()
        if self._state == "value":
            return self._value(final)
        if not self._skip_space(final):
            return False
        if self._state == "sep":
            if self.separator and self._buf.startswith(self.separator):
                self._buf = self._buf[len(self.separator) :]
            self._state = "expect"
        elif self._buf[0] in self.openers:
            self._state, self._extent = "value", JsonExtent()
        elif self._state == "tagged":
            self._fallback()
        elif tag := next((t for t in self.tags if self._buf.startswith(t)), None):
            self._raw, self._buf = tag, self._buf[len(tag) :]
            self._state = "tagged"
        elif not final and any(t.startswith(self._buf) for t in self.tags):
            return False
        else:
            self._state = "pass"
        return True

    def _value(self, final: bool) -> bool:
        end = self._extent.scan(self._buf)
        if end is None:
            if final:
                self._raw, self._buf = self._raw + self._buf, ""
                self._fallback()
            return False
        region, self._buf = self._buf[:end], self._buf[end:]
        calls = calls_from_json(region, require_args=self.require_args)
        if calls is None:
            self._raw += region
            self._fallback()
            return True
        self._raw = ""
        for call in calls:
            self._call(call)
        self._state = "sep" if self.separator else "pass"
        return True


class Llama3JsonToolParser(JsonReplyParser):
    """Llama 3.x: ``<|python_tag|>{"name": "f", "parameters": {...}}; {...}``.

    The tag is optional and ``"arguments"`` is accepted for ``"parameters"``; the arguments key
    is required, so a plain JSON answer with a ``"name"`` field stays content.
    """

    name = "llama3_json"
    openers = "{"
    tags = ("<|python_tag|>",)
    separator = ";"
    require_args = True


class GraniteToolParser(JsonReplyParser):
    """Granite 3.x: ``<|tool_call|>[{"name": "f", "arguments": {...}}, ...]``.

    Granite 3.1+ may write the marker as ``<tool_call>``; Granite 4 uses ``hermes``.
    """

    name = "granite"
    tags = ("<|tool_call|>", "<tool_call>")


class JsonToolParser(JsonReplyParser):
    """The whole reply is ``{"name": "f", "arguments": {...}}`` or a list of such objects."""

    name = "json"

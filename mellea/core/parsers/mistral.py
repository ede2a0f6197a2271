"""Mistral calls: ``[TOOL_CALLS][{"name", "arguments"}, ...]`` and ``[TOOL_CALLS]f[ARGS]{...}``."""

from __future__ import annotations

import re

from mellea.core.parsers._text import (
    JsonExtent,
    canonical_arguments,
    first_non_space,
    loads_strict,
    partial_suffix,
)
from mellea.core.parsers.tool_calls import ParsedToolCall, ToolCallParser, calls_from_json

_NAME = re.compile(r"[A-Za-z0-9_.\-]*")
_CALL_ID = re.compile(r"[A-Za-z0-9]*")


class MistralToolParser(ToolCallParser):
    """Mistral's ``[TOOL_CALLS]`` marker followed by either call layout.

    - older tokenizers: a JSON list (or single object) of ``{"name", "arguments"}``;
    - v11+ tokenizers: ``name[ARGS]{json}``, optionally ``name[CALL_ID]id[ARGS]{json}``,
      the marker repeated before each call.

    Text before and between markers is content; a marker not followed by a valid call is
    released as content together with what was read after it.
    """

    name = "mistral"
    marker = "[TOOL_CALLS]"
    args_tag = "[ARGS]"
    id_tag = "[CALL_ID]"

    def __init__(self) -> None:
        """Start a reply outside any call."""
        super().__init__()
        self._state = "text"
        self._raw = ""  # consumed call text, released as content if the call proves invalid
        self._fn = ""
        self._extent = JsonExtent()

    def _advance(self, final: bool) -> None:
        while self._step(final):
            pass

    def _step(self, final: bool) -> bool:
        if self._state == "text":
            return self._scan_text(final)
        if self._state in ("json", "args"):
            return self._json(final)
        if self._state in ("head", "args_start"):
            at = first_non_space(self._buf)
            space, self._buf = (self._buf, "") if at is None else (self._buf[:at], self._buf[at:])
            self._raw += space
            if not self._buf:
                return self._wait_or_fallback(final)
            if self._state == "args_start":
                return self._open_json("args") if self._buf[0] == "{" else self._fallback()
            if self._buf[0] in "[{":
                return self._open_json("json")
            if _NAME.match(self._buf).end():
                self._state = "name"
                return True
            return self._fallback()
        return self._word(final)

    def _scan_text(self, final: bool) -> bool:
        at = self._buf.find(self.marker)
        if at < 0:
            keep = 0 if final else partial_suffix(self._buf, self.marker)
            cut = len(self._buf) - keep
            self._text(self._buf[:cut])
            self._buf = self._buf[cut:]
            return False
        self._text(self._buf[:at])
        self._raw, self._buf = self.marker, self._buf[at + len(self.marker) :]
        self._state = "head"
        return True

    def _word(self, final: bool) -> bool:
        """Read the function name (state ``name``) or call id (``call_id``) and the tag after it."""
        pattern = _NAME if self._state == "name" else _CALL_ID
        size = pattern.match(self._buf).end()
        word, rest = self._buf[:size], self._buf[size:]
        tags = [self.args_tag, self.id_tag] if self._state == "name" else [self.args_tag]
        tag = next((t for t in tags if rest.startswith(t)), None)
        if tag is None:
            if not final and any(t.startswith(rest) for t in tags):
                return False  # the word or a tag may still be arriving
            self._raw, self._buf = self._raw + word, rest
            return self._fallback()
        if self._state == "name":
            self._fn = word
        self._raw += word + tag
        self._buf = rest[len(tag) :]
        self._state = "args_start" if tag == self.args_tag else "call_id"
        return True

    def _open_json(self, state: str) -> bool:
        self._state, self._extent = state, JsonExtent()
        return True

    def _json(self, final: bool) -> bool:
        end = self._extent.scan(self._buf)
        if end is None:
            if final:
                self._raw, self._buf = self._raw + self._buf, ""
                return self._fallback()
            return False
        region, self._buf = self._buf[:end], self._buf[end:]
        calls = calls_from_json(region) if self._state == "json" else self._args_call(region)
        if calls is None:
            self._raw += region
            return self._fallback()
        self._raw, self._state = "", "text"
        for call in calls:
            self._call(call)
        return True

    def _args_call(self, region: str) -> list[ParsedToolCall] | None:
        try:
            args = loads_strict(region)
        except (ValueError, RecursionError):
            return None
        if not isinstance(args, dict) or not self._fn:
            return None
        return [ParsedToolCall(name=self._fn, arguments=canonical_arguments(args))]

    def _wait_or_fallback(self, final: bool) -> bool:
        return self._fallback() if final else False

    def _fallback(self) -> bool:
        self._text(self._raw)
        self._raw, self._state = "", "text"
        return True

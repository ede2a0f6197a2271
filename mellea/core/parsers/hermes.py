"""Hermes-style calls, also used by Qwen2.5 and Qwen3: ``<tool_call>{json}</tool_call>``."""

from __future__ import annotations

from mellea.core.parsers._text import partial_suffix
from mellea.core.parsers.tool_calls import ToolCallParser, calls_from_json


class MarkedCallParser(ToolCallParser):
    """Calls written as JSON between an opening and a closing marker, anywhere in the reply.

    A call left unclosed at the end of the reply still counts if its JSON is complete
    (generation may stop right before the closing marker).
    """

    start = ""
    end = ""

    def __init__(self) -> None:
        """Start a reply outside any call."""
        super().__init__()
        self._in_call = False
        self._searched = 0  # how far the call body was already searched for the end marker

    def _advance(self, final: bool) -> None:
        while self._step(final):
            pass

    def _step(self, final: bool) -> bool:
        if not self._in_call:
            at = self._buf.find(self.start)
            if at < 0:
                keep = 0 if final else partial_suffix(self._buf, self.start)
                cut = len(self._buf) - keep
                self._text(self._buf[:cut])
                self._buf = self._buf[cut:]
                return False
            self._text(self._buf[:at])
            self._buf = self._buf[at + len(self.start) :]
            self._in_call, self._searched = True, 0
            return True
        at = self._buf.find(self.end, self._searched)
        if at < 0 and not final:
            self._searched = max(0, len(self._buf) - len(self.end) + 1)
            return False
        if at < 0:
            body, raw, self._buf = self._buf, self.start + self._buf, ""
        else:
            body = self._buf[:at]
            raw = self.start + body + self.end
            self._buf = self._buf[at + len(self.end) :]
        self._in_call = False
        calls = calls_from_json(body)
        if calls is None:
            self._text(raw)
        else:
            for call in calls:
                self._call(call)
        return True


class HermesToolParser(MarkedCallParser):
    """``<tool_call>{"name": "f", "arguments": {...}}</tool_call>``, repeated, text around."""

    name = "hermes"
    start = "<tool_call>"
    end = "</tool_call>"

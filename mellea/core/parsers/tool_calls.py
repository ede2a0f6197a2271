"""The tool-call parser interface: one-shot ``parse`` and incremental ``feed``/``finish``.

Every format is written once, as an incremental state machine over a text buffer that only
commits to a decision when no continuation of the text could change it; ``parse`` runs that
same machine on the whole text. So a streamed reply, however it is split, adds up to exactly
what ``parse`` returns:

- the content deltas joined equal ``parse``'s content (``""`` for ``None``);
- each call is streamed as one :class:`ToolCallDelta` carrying ``id``, ``name`` and the
  complete ``arguments``, sent as soon as the call's text is complete.

Arguments are always re-serialized in one canonical form, ``json.dumps(args,
ensure_ascii=False)`` (what ``ModelToolCall.arguments_json`` returns), whatever spacing the
model used. Whitespace around a call collapses (to nothing at the start or end of the content,
to the whitespace before the call between two pieces of text), so content is held back only
while it could be the start of a call marker or is trailing whitespace.
Malformed calls are released as content; no model output makes a parser raise.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any, ClassVar

from mellea.core.parsers._text import (
    TrimmedText,
    canonical_arguments,
    first_non_space,
    loads_strict,
)


def new_call_id() -> str:
    """A fresh OpenAI-style tool call id, ``call_`` and 24 hex digits."""
    return f"call_{uuid.uuid4().hex[:24]}"


@dataclass
class ParsedToolCall:
    """A complete call: ``arguments`` is the JSON string the OpenAI wire format carries."""

    name: str
    arguments: str
    id: str = field(default_factory=new_call_id)


@dataclass
class ToolCallDelta:
    """What a stream chunk adds to the call at ``index`` (the OpenAI ``delta.tool_calls`` item)."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str | None = None


@dataclass
class StreamDelta:
    """What a piece of streamed text adds to the reply: content and tool-call deltas."""

    content: str = ""
    tool_calls: list[ToolCallDelta] = field(default_factory=list)


def call_from_object(
    obj: Any, arg_keys: tuple[str, ...] = ("arguments", "parameters"), require_args: bool = False
) -> ParsedToolCall | None:
    """A call from a decoded ``{"name": ..., "arguments": {...}}`` object, or None if it is not one.

    Arguments given as a JSON string (some models double-encode them) are decoded.
    """
    if not isinstance(obj, dict):
        return None
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip():
        return None
    key = next((k for k in arg_keys if k in obj), None)
    if key is None and require_args:
        return None
    args = obj[key] if key is not None else {}
    if isinstance(args, str):
        try:
            args = loads_strict(args)
        except ValueError:
            return None
    if not isinstance(args, dict):
        return None
    return ParsedToolCall(name=name.strip(), arguments=canonical_arguments(args))


def calls_from_json(text: str, require_args: bool = False) -> list[ParsedToolCall] | None:
    """Calls from JSON text holding one call object or a non-empty list of them, else None."""
    try:
        value = loads_strict(text)
    except (ValueError, RecursionError):
        return None
    items = value if isinstance(value, list) else [value]
    calls = [call_from_object(item, require_args=require_args) for item in items]
    if not calls or any(call is None for call in calls):
        return None
    return calls  # type: ignore[return-value]


class ToolCallParser:
    """Base of the tool-call formats; subclasses implement :meth:`_advance`.

    A parser instance holds the state of one reply: use a fresh one per reply
    (``parse`` does not touch the streaming state).
    """

    name: ClassVar[str] = ""

    def __init__(self) -> None:
        """Start a reply."""
        self._buf = ""
        self._content = TrimmedText()
        self._out = StreamDelta()
        self._calls = 0
        self._finished = False

    def parse(self, text: str) -> tuple[str | None, list[ParsedToolCall]]:
        """Split a whole reply into (content outside the calls, or None if empty; the calls)."""
        fresh = type(self)()
        deltas = [fresh.feed(text), fresh.finish()]
        content = "".join(delta.content for delta in deltas)
        calls = [
            ParsedToolCall(name=d.name or "", arguments=d.arguments or "{}", id=d.id or "")
            for delta in deltas
            for d in delta.tool_calls
        ]
        return content or None, calls

    def feed(self, piece: str) -> StreamDelta:
        """Add the next piece of the reply; return what can be told about it for certain."""
        if self._finished:
            raise RuntimeError("feed() called after finish()")
        self._buf += piece
        self._advance(final=False)
        return self._take()

    def finish(self) -> StreamDelta:
        """End of the reply: resolve what was held back (an unfinished call becomes content)."""
        if not self._finished:
            self._finished = True
            self._advance(final=True)
            self._out.content += self._content.flush()
        return self._take()

    def _advance(self, final: bool) -> None:
        """Consume ``self._buf`` as far as is certain (everything when ``final``)."""
        raise NotImplementedError

    def _text(self, text: str) -> None:
        """Emit text outside any call."""
        self._out.content += self._content.push(text)

    def _call(self, call: ParsedToolCall) -> None:
        """Emit a complete call."""
        self._content.cut()
        self._out.tool_calls.append(
            ToolCallDelta(index=self._calls, id=call.id, name=call.name, arguments=call.arguments)
        )
        self._calls += 1

    def _take(self) -> StreamDelta:
        out, self._out = self._out, StreamDelta()
        return out


class ScanningToolParser(ToolCallParser):
    """Base of formats read by a small state machine over ``_state``: ``"expect"``
    (before a call), ``"tagged"`` (after a marker that announces one), the format's own
    states inside calls, and ``"pass"`` (the rest of the reply is plain content).

    Subclasses implement :meth:`_step`. Text consumed while it may still be a call is
    kept in ``_raw`` and released as content by :meth:`_fallback` when it is not one.
    """

    def __init__(self) -> None:
        """Start a reply before its first call."""
        super().__init__()
        self._state = "expect"
        self._raw = ""

    def _advance(self, final: bool) -> None:
        while self._step(final):
            pass

    def _step(self, final: bool) -> bool:
        """Consume some of the buffer; True while there is more to do now."""
        raise NotImplementedError

    def _pass_rest(self) -> bool:
        """In ``"pass"``: the buffer is content."""
        self._text(self._buf)
        self._buf = ""
        return False

    def _skip_space(self, final: bool) -> bool:
        """Move leading whitespace off the buffer (held in ``_raw`` after a marker, else
        content); False when nothing is left to read."""
        at = first_non_space(self._buf)
        space, self._buf = (self._buf, "") if at is None else (self._buf[:at], self._buf[at:])
        if self._state == "tagged":
            self._raw += space
        else:
            self._text(space)
        if self._buf:
            return True
        if final and self._raw:
            self._fallback()
        return False

    def _fallback(self) -> None:
        """What was held back is not a call: it is content, and so is the rest."""
        self._text(self._raw)
        self._raw, self._state = "", "pass"

"""Grow a response's ``output`` from reply pieces, with the stream events announcing each step.

Items follow the reply in order: reasoning, then the assistant message, with a function
call closing whatever item was open. The same builder serves streamed and non-streamed
requests, so both end with the same output.

When the request asks for a reasoning summary (``reasoning.summary``), a reasoning item
also carries its text as one ``summary_text`` part, announced by the
``response.reasoning_summary_*`` events beside the ``reasoning_text`` ones: clients that
read only ``summary`` (the AI SDK) show the reasoning too.

Token log-probabilities, when asked for, go only with message text: entries of tokens
that gave no message text (reasoning, tool-call markup) wait for the next
``output_text`` delta, or for the message's ``done`` event if it closes first.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mellea.core.logprobs import TokenLogprob
from mellea.serve.logprobs import chat_logprobs
from mellea.serve.responses.items import new_item_id
from mellea.serve.responses.objects import (
    FunctionCallItem,
    ItemStatus,
    OutputItem,
    OutputMessage,
    OutputText,
    ReasoningItem,
    ReasoningText,
    SummaryText,
)

Event = dict[str, Any]


class OutputBuilder:
    """Appends items to ``output``; each method returns the events for what it did.

    Events are ``{"type": ..., ...}`` dicts without sequence numbers.
    """

    def __init__(
        self,
        output: list[OutputItem],
        logprobs: bool = False,
        new_id: Callable[[str], str] = new_item_id,
        summary: bool = False,
    ) -> None:
        """Build into ``output`` (the response object's own list); with ``logprobs``,
        message text parts carry the log-probabilities of their tokens. ``new_id(prefix)``
        names each new item (a replay passes the stored ids). With ``summary``, reasoning
        items carry their text in ``summary`` too."""
        self.output = output
        self.logprobs = logprobs
        self.new_id = new_id
        self.summary = summary
        self._open: OutputMessage | ReasoningItem | None = None
        self._seen = 0  # log-probability entries taken from the reply so far
        self._pending: list[dict[str, Any]] = []  # ... and not yet sent with message text

    def reply_logprobs(self, entries: list[TokenLogprob] | None) -> None:
        """The reply's log-probability entries so far (a growing list): the new ones go
        with the next message text, or with the message's ``done`` if none comes."""
        if self.logprobs and entries and len(entries) > self._seen:
            wire = chat_logprobs(entries[self._seen :]).content or []
            self._pending += [entry.model_dump(mode="json") for entry in wire]
            self._seen = len(entries)

    def reasoning(self, text: str) -> list[Event]:
        """Reasoning text: continues the open reasoning item or starts one."""
        events = [] if isinstance(self._open, ReasoningItem) else self._start(ReasoningItem)
        events.append(self._append(text, "response.reasoning_text.delta"))
        if self.summary:
            events.append(self._summary_delta(text))
        return events

    def text(self, text: str) -> list[Event]:
        """Message text: continues the open message or starts one."""
        events = [] if isinstance(self._open, OutputMessage) else self._start(OutputMessage)
        assert isinstance(self._open, OutputMessage)
        logprobs = self._take(self._open.content[0])
        return [*events, self._append(text, "response.output_text.delta", logprobs=logprobs)]

    def function_call(
        self, call_id: str, name: str, arguments: str, status: ItemStatus = "completed"
    ) -> list[Event]:
        """A call: it is added, its arguments sent, and it is done at once (``incomplete``
        when the reply was cut short in the middle of it)."""
        events = self.close()
        item = FunctionCallItem(id=self.new_id("fc"), call_id=call_id, name=name)
        self.output.append(item)
        where = {"item_id": item.id, "output_index": len(self.output) - 1}
        events.append(_item_event("response.output_item.added", item, where["output_index"]))
        if arguments:
            events.append(
                {"type": "response.function_call_arguments.delta", **where, "delta": arguments}
            )
        item.arguments = arguments
        events.append(
            {
                "type": "response.function_call_arguments.done",
                **where,
                "name": name,
                "arguments": arguments,
            }
        )
        item.status = status
        events.append(_item_event("response.output_item.done", item, where["output_index"]))
        return events

    def finish(self, status: ItemStatus) -> list[Event]:
        """End of the reply: close the open item; a reply with nothing to show gets an
        empty message, so every response has a message or a call."""
        shown = any(item.type in ("message", "function_call") for item in self.output)
        events = [] if shown else self.empty_message()
        return [*events, *self.close(status)]

    def empty_message(self) -> list[Event]:
        """Open a message with no text yet."""
        return self._start(OutputMessage)

    def close(self, status: ItemStatus = "completed") -> list[Event]:
        """Finish the open reasoning item or message, if any."""
        item, self._open = self._open, None
        if item is None:
            return []
        index = self.output.index(item)
        part = item.content[0]
        where = {"item_id": item.id, "output_index": index, "content_index": 0}
        if isinstance(item, OutputMessage):
            self._take(item.content[0])
            logprobs = item.content[0].logprobs or []
            done = {
                "type": "response.output_text.done",
                **where,
                "text": part.text,
                "logprobs": logprobs,
            }
        else:
            done = {"type": "response.reasoning_text.done", **where, "text": part.text}
        item.status = status
        return [
            done,
            {"type": "response.content_part.done", **where, "part": part.model_dump(mode="json")},
            *self._summary_done(item, index),
            _item_event("response.output_item.done", item, index),
        ]

    def abandon(self) -> None:
        """The reply stopped early (failure, cancel): the open item stays ``incomplete``."""
        if self._open is not None:
            self._open.status = "incomplete"
            self._open = None

    def _start(self, kind: type[OutputMessage] | type[ReasoningItem]) -> list[Event]:
        events = self.close()
        if kind is OutputMessage:
            item: OutputMessage | ReasoningItem = OutputMessage(id=self.new_id("msg"))
            part: OutputText | ReasoningText = OutputText(logprobs=[] if self.logprobs else None)
        else:
            item, part = ReasoningItem(id=self.new_id("rs")), ReasoningText()
        self.output.append(item)
        index = len(self.output) - 1
        events.append(_item_event("response.output_item.added", item, index))
        item.content.append(part)  # type: ignore[arg-type]
        self._open = item
        events.append(
            {
                "type": "response.content_part.added",
                "item_id": item.id,
                "output_index": index,
                "content_index": 0,
                "part": part.model_dump(mode="json"),
            }
        )
        if self.summary and isinstance(item, ReasoningItem):
            summary = SummaryText()
            item.summary.append(summary)
            events.append(_summary_event("response.reasoning_summary_part.added", item, index))
        return events

    def _summary_delta(self, text: str) -> Event:
        """The open reasoning item's summary grows by ``text``."""
        item = self._open
        assert isinstance(item, ReasoningItem)
        item.summary[0].text += text
        index = len(self.output) - 1
        return {
            "type": "response.reasoning_summary_text.delta",
            "item_id": item.id,
            "output_index": index,
            "summary_index": 0,
            "delta": text,
        }

    def _summary_done(self, item: OutputMessage | ReasoningItem, index: int) -> list[Event]:
        """The events that close a reasoning item's summary part (none without one)."""
        if not isinstance(item, ReasoningItem) or not item.summary:
            return []
        where = {"item_id": item.id, "output_index": index, "summary_index": 0}
        text = item.summary[0].text
        return [
            {"type": "response.reasoning_summary_text.done", **where, "text": text},
            _summary_event("response.reasoning_summary_part.done", item, index),
        ]

    def _take(self, part: OutputText) -> list[dict[str, Any]]:
        """The pending log-probability entries, now added to ``part``."""
        taken, self._pending = self._pending, []
        if part.logprobs is not None:
            part.logprobs += taken
        return taken

    def _append(self, text: str, event_type: str, **extra: Any) -> Event:
        item = self._open
        assert item is not None
        item.content[0].text += text
        return {
            "type": event_type,
            "item_id": item.id,
            "output_index": len(self.output) - 1,
            "content_index": 0,
            "delta": text,
            **extra,
        }


def _item_event(event_type: str, item: OutputItem, index: int) -> Event:
    return {"type": event_type, "output_index": index, "item": item.model_dump(mode="json")}


def _summary_event(event_type: str, item: ReasoningItem, index: int) -> Event:
    return {
        "type": event_type,
        "item_id": item.id,
        "output_index": index,
        "summary_index": 0,
        "part": item.summary[0].model_dump(mode="json"),
    }


def wants_summary(reasoning: dict[str, Any] | None) -> bool:
    """Whether a response's ``reasoning`` (as the request sent it) asks for a summary."""
    return bool((reasoning or {}).get("summary"))

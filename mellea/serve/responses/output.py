"""Grow a response's ``output`` from reply pieces, with the stream events announcing each step.

Items follow the reply in order: reasoning, then the assistant message, with a function
call closing whatever item was open. The same builder serves streamed and non-streamed
requests, so both end with the same output.
"""

from __future__ import annotations

from typing import Any

from mellea.serve.responses.items import new_item_id
from mellea.serve.responses.objects import (
    FunctionCallItem,
    ItemStatus,
    OutputItem,
    OutputMessage,
    OutputText,
    ReasoningItem,
    ReasoningText,
)

Event = dict[str, Any]


class OutputBuilder:
    """Appends items to ``output``; each method returns the events for what it did.

    Events are ``{"type": ..., ...}`` dicts without sequence numbers.
    """

    def __init__(self, output: list[OutputItem]) -> None:
        """Build into ``output`` (the response object's own list)."""
        self.output = output
        self._open: OutputMessage | ReasoningItem | None = None

    def reasoning(self, text: str) -> list[Event]:
        """Reasoning text: continues the open reasoning item or starts one."""
        events = [] if isinstance(self._open, ReasoningItem) else self._start(ReasoningItem)
        return [*events, self._append(text, "response.reasoning_text.delta")]

    def text(self, text: str) -> list[Event]:
        """Message text: continues the open message or starts one."""
        events = [] if isinstance(self._open, OutputMessage) else self._start(OutputMessage)
        return [*events, self._append(text, "response.output_text.delta", logprobs=[])]

    def function_call(self, call_id: str, name: str, arguments: str) -> list[Event]:
        """A complete call: it is added, its arguments sent, and it is done at once."""
        events = self.close()
        item = FunctionCallItem(id=new_item_id("fc"), call_id=call_id, name=name)
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
        item.status = "completed"
        events.append(_item_event("response.output_item.done", item, where["output_index"]))
        return events

    def finish(self, status: ItemStatus) -> list[Event]:
        """End of the reply: close the open item; a reply with nothing to show gets an
        empty message, so every response has a message or a call."""
        shown = any(item.type in ("message", "function_call") for item in self.output)
        events = [] if shown else self._start(OutputMessage)
        return [*events, *self.close(status)]

    def close(self, status: ItemStatus = "completed") -> list[Event]:
        """Finish the open reasoning item or message, if any."""
        item, self._open = self._open, None
        if item is None:
            return []
        index = self.output.index(item)
        part = item.content[0]
        where = {"item_id": item.id, "output_index": index, "content_index": 0}
        if isinstance(item, OutputMessage):
            done = {"type": "response.output_text.done", **where, "text": part.text, "logprobs": []}
        else:
            done = {"type": "response.reasoning_text.done", **where, "text": part.text}
        item.status = status
        return [
            done,
            {"type": "response.content_part.done", **where, "part": part.model_dump(mode="json")},
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
            item: OutputMessage | ReasoningItem = OutputMessage(id=new_item_id("msg"))
            part: OutputText | ReasoningText = OutputText()
        else:
            item, part = ReasoningItem(id=new_item_id("rs")), ReasoningText()
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
        return events

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

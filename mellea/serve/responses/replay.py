"""A stored response's stream again, for ``GET /v1/responses/{id}?stream=true``.

The events are rebuilt from the stored output with the same builder a live run uses,
so they have the live stream's shapes; each content part arrives as one delta.
"""

from __future__ import annotations

from typing import Any

from mellea.core.logprobs import TokenLogprob
from mellea.serve.responses.output import Event, OutputBuilder
from mellea.serve.responses.run import terminal_event

# What the response looked like while it was being generated.
_UNSET_WHILE_RUNNING = {"usage": None, "completed_at": None, "incomplete_details": None}


def replay_events(response: dict[str, Any], starting_after: int | None = None) -> list[Event]:
    """The numbered events of a finished ``response``, after ``starting_after`` if given."""
    running = {**response, **_UNSET_WHILE_RUNNING, "status": "in_progress", "output": []}
    running["error"] = None
    events: list[Event] = [
        {"type": "response.created", "response": running},
        {"type": "response.in_progress", "response": running},
    ]
    stored = response.get("output", [])
    ids = iter(item["id"] for item in stored)
    wants_logprobs = any(
        part.get("logprobs") is not None
        for item in stored
        if item.get("type") == "message"
        for part in item.get("content", [])
    )
    builder = OutputBuilder([], wants_logprobs, lambda prefix: next(ids))
    entries: list[TokenLogprob] = []  # every message token so far, as the builder expects
    for item in stored:
        kind = item.get("type")
        if kind == "function_call":
            events += builder.function_call(item["call_id"], item["name"], item["arguments"])
            continue
        text = "".join(part.get("text", "") for part in item.get("content", []))
        if kind == "reasoning":
            events += builder.reasoning(text)
        elif kind == "message":
            for part in item.get("content", []):
                entries += [_entry(e) for e in part.get("logprobs") or []]
            builder.reply_logprobs(entries)
            events += builder.text(text) if text else builder.empty_message()
        events += builder.close(item.get("status", "completed"))
    events.append(terminal_event(response))
    numbered = [{"type": e["type"], "sequence_number": i, **e} for i, e in enumerate(events)]
    return [e for e in numbered if starting_after is None or e["sequence_number"] > starting_after]


def _entry(wire: dict[str, Any]) -> TokenLogprob:
    tops = [_entry(top) for top in wire.get("top_logprobs") or []]
    return TokenLogprob(wire["token"], wire["logprob"], wire.get("bytes"), tops)

"""A stored response's stream again, for ``GET /v1/responses/{id}?stream=true``.

The events are rebuilt from the stored output with the same builder a live run uses,
so they have the live stream's shapes; each content part arrives as one delta. A
response still running is replayed once it ends.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from mellea.core.logprobs import TokenLogprob
from mellea.serve.responses.output import Event, OutputBuilder, wants_summary
from mellea.serve.responses.run import terminal_event
from mellea.serve.responses.store_api import Store, store_call
from mellea.serve.responses.store_errors import UNAVAILABLE_MESSAGE, StoreUnavailable
from mellea.serve.responses.stored import StoredResponse

REPLAY_POLL_SECONDS = 0.25  # how often a replay looks whether a running response ended

# What the response looked like while it was being generated.
_UNSET_WHILE_RUNNING = {"usage": None, "completed_at": None, "incomplete_details": None}


async def replayed(
    store: Store, response_id: str, starting_after: int | None, wait_seconds: float
) -> AsyncIterator[dict[str, Any]]:
    """The events of the stored ``response_id`` (see :func:`replay_events`), once it is no
    longer in progress or ``wait_seconds`` ran out.

    The stream has already started (200 sent) when they are read: a response deleted
    meanwhile, one still running, or a store that stopped answering is one error event.
    """
    try:
        stored = await _ended(store, response_id, wait_seconds)
    except StoreUnavailable:
        message = f"response {response_id!r} cannot be replayed now: {UNAVAILABLE_MESSAGE}"
        yield error_event("store_unavailable", message)
        return
    if stored is None or stored.status == "in_progress":
        state = "was deleted" if stored is None else "is still in progress"
        yield error_event(None, f"response {response_id!r} {state}")
        return
    for event in replay_events(stored.response, starting_after):
        yield event


async def _ended(store: Store, response_id: str, wait_seconds: float) -> StoredResponse | None:
    """The stored response once it is no longer in progress (or the wait ran out)."""
    deadline = time.monotonic() + wait_seconds
    while (
        await store_call(store, store.status, response_id) == "in_progress"
        and time.monotonic() < deadline
    ):
        await asyncio.sleep(REPLAY_POLL_SECONDS)
    return await store_call(store, store.get, response_id)


def error_event(code: str | None, message: str) -> dict[str, Any]:
    """The one event of a replay that cannot send the response's own."""
    return {"type": "error", "sequence_number": 0, "code": code, "message": message}


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
    summary = wants_summary(response.get("reasoning"))
    builder = OutputBuilder([], wants_logprobs, lambda prefix: next(ids), summary)
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

"""The Responses API routes: ``/v1/responses`` create, retrieve, delete, input items, cancel."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, Response

from cli.serve.event_stream import EventStreamResponse, as_response
from cli.serve.json_body import BoundedJsonRoute
from cli.serve.offload import run_request_work
from cli.serve.reply_parsers import reply_parser
from cli.serve.request_adapter import reply_model
from cli.serve.settings import ServeSettings
from cli.serve.tenancy import tenant_of
from mellea.serve.errors import OpenAIError
from mellea.serve.frames import named_events
from mellea.serve.responses import (
    CancelSignal,
    ResponsesRequest,
    Store,
    StoredResponse,
    check_request,
    input_items,
    new_response,
    open_store,
    replay_events,
    serve_arguments,
)
from mellea.serve.responses.reply import ResponsesReply
from mellea.serve.responses.store_api import UNAVAILABLE_MESSAGE, StoreUnavailable, store_call
from mellea.serve.responses.truncation import call_fitting

log = logging.getLogger("mellea.serve")

CANCEL_WAIT_SECONDS = 5.0  # how long a cancel waits for the run to store its last output
REPLAY_WAIT_SECONDS = 600.0  # how long a replay waits for a running response to end
REPLAY_POLL_SECONDS = 0.25


router = APIRouter(route_class=BoundedJsonRoute)


def open_responses_store(state: Any, settings: ServeSettings) -> Store:
    """The store of created responses, kept in the app's ``state`` for the routes below.

    Responses are kept, within the count, age and size bounds of the settings, where
    ``settings.responses_db`` says: a PostgreSQL URL (shared by replicas), a SQLite file
    (shared by worker processes) or, without one, an in-memory database of this app. A response belongs to the tenant (API key) that
    created it; to any other it does not exist.
    """
    store = open_store(
        settings.responses_db,
        settings.responses_max_count,
        settings.responses_max_age,
        settings.responses_max_bytes,
        lease=settings.responses_lease,
    )
    state.responses_store = store
    state.responses_running = {}
    return store


@router.post("/v1/responses", response_model=None)
async def create_response(body: ResponsesRequest, request: Request) -> dict[str, Any] | Response:
    """Run the program on a Responses request; stream the events when asked to."""
    started = time.monotonic()
    state = request.app.state
    store: Store = state.responses_store
    owner = tenant_of(request.scope)
    tools = check_request(body)
    if body.stores:
        store.check()  # a database known to be down: 503 before anything runs
    history = await _history(store, body.previous_response_id, owner)
    # Looking referred items up scans the stored responses: off the loop.
    refers = isinstance(body.input, list) and any(
        item.get("type") == "item_reference" for item in body.input
    )
    items = await run_request_work(
        request, refers, input_items, body.input or "", lambda ids: store.items(ids, owner)
    )
    # A text.format schema takes a while to turn into a model, and a stored history
    # may be long whatever the body's size: both off the loop.
    spec = body.text.format if body.text else None
    heavy = bool(history) or (spec is not None and spec.type == "json_schema")
    args = await run_request_work(request, heavy, serve_arguments, body, tools, [*history, *items])
    response = new_response(body, tools, reply_model(state.settings))
    record = StoredResponse(response.wire(), items, history) if body.stores else None
    running = _Running(CancelSignal(_cancel_check(store, response.id, record)))
    sink = _Sink(store, record, state.responses_running, running, owner)
    cancel = running.signal if record is not None else None  # unstored: 404 on cancel
    reply = ResponsesReply(body, response, sink, reply_parser(state.settings, body), cancel)
    program_call = state.program.call
    fits = body.truncation == "auto"
    calls = [call_fitting(program_call, args) if fits else program_call(args)]
    return as_response(await state.runner.run(calls, reply, request.is_disconnected, started))


@router.get("/v1/responses/{response_id}", response_model=None)
async def retrieve_response(
    request: Request,
    response_id: str,
    stream: bool = False,
    starting_after: int | None = Query(None, ge=0),
) -> Response:
    """A stored response (404 if unknown, deleted, or created with ``store: false``).

    With ``stream=true`` its events are sent again, after ``starting_after`` if given;
    a response still running is replayed once it ends.
    """
    state = request.app.state
    stored = await _stored(state.responses_store, response_id, tenant_of(request.scope))
    if not stream:
        return JSONResponse(stored.response)
    settings: ServeSettings = state.settings
    replayed = _replayed(state.responses_store, settings, response_id, starting_after)
    return EventStreamResponse(named_events(replayed), keepalive_seconds=settings.keepalive_seconds)


async def _replayed(
    store: Store, settings: ServeSettings, response_id: str, starting_after: int | None
) -> AsyncGenerator[dict[str, Any], None]:
    try:
        stored = await _ended(store, settings, response_id)
    except StoreUnavailable:
        # The stream has started (200 sent): the 503 becomes its error event.
        message = f"response {response_id!r} cannot be replayed now: {UNAVAILABLE_MESSAGE}"
        yield _error_event("store_unavailable", message)
        return
    if stored is None or stored.status == "in_progress":
        state = "was deleted" if stored is None else "is still in progress"
        yield _error_event(None, f"response {response_id!r} {state}")
        return
    for event in replay_events(stored.response, starting_after):
        yield event


async def _ended(store: Store, settings: ServeSettings, response_id: str) -> StoredResponse | None:
    """The stored response once it is no longer in progress (or the wait ran out)."""
    deadline = time.monotonic() + (settings.request_timeout or REPLAY_WAIT_SECONDS)
    while (
        await store_call(store, store.status, response_id) == "in_progress"
        and time.monotonic() < deadline
    ):
        await asyncio.sleep(REPLAY_POLL_SECONDS)
    return await store_call(store, store.get, response_id)


def _error_event(code: str | None, message: str) -> dict[str, Any]:
    return {"type": "error", "sequence_number": 0, "code": code, "message": message}


@router.delete("/v1/responses/{response_id}", response_model=None)
async def delete_response(request: Request, response_id: str) -> Response:
    """Forget a stored response."""
    store: Store = request.app.state.responses_store
    if not await store_call(store, store.delete, response_id, tenant_of(request.scope)):
        raise _not_found(response_id)
    return JSONResponse({"id": response_id, "object": "response", "deleted": True})


@router.get("/v1/responses/{response_id}/input_items", response_model=None)
async def list_input_items(
    request: Request,
    response_id: str,
    limit: int = Query(20, ge=1, le=100),
    order: Literal["asc", "desc"] = "desc",
    after: str | None = None,
) -> Response:
    """The input items the response was created with, a page at a time."""
    store = request.app.state.responses_store
    items = (await _stored(store, response_id, tenant_of(request.scope))).input
    if order == "desc":
        items = items[::-1]
    if after is not None:
        ids = [item["id"] for item in items]
        if after not in ids:
            raise OpenAIError(400, f"no input item with id {after!r}", param="after")
        items = items[ids.index(after) + 1 :]
    page = items[:limit]
    return JSONResponse(
        {
            "object": "list",
            "data": page,
            "first_id": page[0]["id"] if page else None,
            "last_id": page[-1]["id"] if page else None,
            "has_more": len(items) > len(page),
        }
    )


@router.post("/v1/responses/{response_id}/cancel", response_model=None)
async def cancel_response(request: Request, response_id: str) -> Response:
    """Stop a response still being generated; it ends ``cancelled`` with what it had."""
    store: Store = request.app.state.responses_store
    result = await store_call(store, store.cancel, response_id, tenant_of(request.scope))
    if result is None:
        raise _not_found(response_id)
    before, response = result
    if before != "in_progress":
        raise OpenAIError(
            400,
            f"cannot cancel a response that is {before}; only a response still in "
            "progress can be cancelled",
            param="response_id",
        )
    local = request.app.state.responses_running.get(response_id)
    if local is not None:
        local.signal.set()
        try:
            await asyncio.wait_for(local.done.wait(), CANCEL_WAIT_SECONDS)
        except TimeoutError:
            log.warning("response %s did not stop within %.0f s", response_id, CANCEL_WAIT_SECONDS)
    stored = await store_call(store, store.get, response_id)
    return JSONResponse(stored.response if stored is not None else response)


@dataclass
class _Running:
    """A response being generated in this process: how to cancel it, and when it ended."""

    signal: CancelSignal
    done: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass
class _Sink:
    """Keeps a run's response in the store (if the request asked to) and tracks it while it runs."""

    store: Store
    record: StoredResponse | None
    running: dict[str, _Running]
    state: _Running
    owner: str  # the tenant the stored response belongs to

    def started(self, response: dict[str, Any]) -> Awaitable[None] | None:
        """Store the in-progress response and make it cancellable."""
        self.running[response["id"]] = self.state
        if self.record is None:
            return None
        self.record.response = response
        return store_call(self.store, self.store.create, self.record, self.owner)

    def finished(self, response: dict[str, Any]) -> Awaitable[dict[str, Any]] | dict[str, Any]:
        """Store the final response; a cancel that came first keeps its status."""
        self.running.pop(response["id"], None)
        self.state.done.set()
        if self.record is None:
            return response
        return _or(store_call(self.store, self.store.finish, response), response)


async def _or(stored: Awaitable[dict[str, Any] | None], fallback: dict[str, Any]) -> dict[str, Any]:
    """What the store wrote, or ``fallback`` if the response was deleted meanwhile."""
    return await stored or fallback


async def _history(store: Store, previous_id: str | None, owner: str) -> list[dict[str, Any]]:
    """The conversation a ``previous_response_id`` continues (its instructions stay behind)."""
    if previous_id is None:
        return []
    previous = await store_call(store, store.get, previous_id, owner)
    if previous is None:
        raise OpenAIError(
            400,
            f"previous response {previous_id!r} not found",
            param="previous_response_id",
            code="previous_response_not_found",
        )
    if previous.status == "in_progress":
        raise OpenAIError(
            400,
            f"previous response {previous_id!r} is still in progress",
            param="previous_response_id",
        )
    return previous.conversation()


def _cancel_check(
    store: Store, response_id: str, record: StoredResponse | None
) -> Callable[[], Awaitable[bool]] | None:
    """With a shared store, a cancel may reach another worker: the run polls the store."""
    if record is None or not store.shared:
        return None

    async def cancelled() -> bool:
        return await store_call(store, store.status, response_id) == "cancelled"

    return cancelled


async def _stored(store: Store, response_id: str, owner: str) -> StoredResponse:
    """The tenant's stored response (another tenant's is as unknown as a missing one)."""
    stored = await store_call(store, store.get, response_id, owner)
    if stored is None:
        raise _not_found(response_id)
    return stored


def _not_found(response_id: str) -> OpenAIError:
    return OpenAIError(404, f"no response with id {response_id!r}", param="response_id")

"""The Responses API routes: ``/v1/responses`` create, retrieve, delete, input items, cancel.

The bookkeeping (history, the store, cancel, replay) is :mod:`mellea.serve.responses.service`'s;
each route reads the request, calls it and sends what it returns.
"""

from __future__ import annotations

import functools
import time
from typing import Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, Response

from cli.serve.event_stream import EventStreamResponse, as_response
from cli.serve.json_body import BoundedJsonRoute
from cli.serve.offload import run_request_work
from cli.serve.program import Program
from cli.serve.reply_parsers import reply_parser
from cli.serve.request_adapter import reply_model
from cli.serve.settings import ServeSettings
from cli.serve.tenancy import tenant_of
from mellea.serve.frames import named_events
from mellea.serve.responses import ResponsesRequest, Store, check_request, new_response, open_store
from mellea.serve.responses.service import ResponsesService
from mellea.serve.responses.store_sink import LocalRuns
from mellea.serve.responses.truncation import call_truncating

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
    state.responses_runs = LocalRuns()
    return store


def responses_of(request: Request) -> ResponsesService:
    """The Responses service as the tenant (API key) of ``request`` sees it."""
    state = request.app.state
    return ResponsesService(state.responses_store, state.responses_runs, tenant_of(request.scope))


@router.post("/v1/responses", response_model=None)
async def create_response(body: ResponsesRequest, request: Request) -> dict[str, Any] | Response:
    """Run the program on a Responses request; stream the events when asked to."""
    started = time.monotonic()
    state = request.app.state
    responses = responses_of(request)
    tools = check_request(body)
    conversation = await responses.conversation(
        body, tools, functools.partial(run_request_work, request)
    )
    response = new_response(body, tools, reply_model(state.settings))
    reply = responses.reply(body, response, conversation, reply_parser(state.settings, body))
    program: Program = state.program
    calls = [call_truncating(program.call, conversation.arguments, body.truncation)]
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
    responses = responses_of(request)
    stored = await responses.retrieve(response_id)
    if not stream:
        return JSONResponse(stored)
    settings: ServeSettings = request.app.state.settings
    events = responses.replay(response_id, starting_after, settings.request_timeout)
    return EventStreamResponse(named_events(events), keepalive_seconds=settings.keepalive_seconds)


@router.delete("/v1/responses/{response_id}", response_model=None)
async def delete_response(request: Request, response_id: str) -> Response:
    """Forget a stored response."""
    return JSONResponse(await responses_of(request).delete(response_id))


@router.get("/v1/responses/{response_id}/input_items", response_model=None)
async def list_input_items(
    request: Request,
    response_id: str,
    limit: int = Query(20, ge=1, le=100),
    order: Literal["asc", "desc"] = "desc",
    after: str | None = None,
) -> Response:
    """The input items the response was created with, a page at a time."""
    page = await responses_of(request).input_items(response_id, limit, order, after)
    return JSONResponse(page)


@router.post("/v1/responses/{response_id}/cancel", response_model=None)
async def cancel_response(request: Request, response_id: str) -> Response:
    """Stop a response still being generated; it ends ``cancelled`` with what it had."""
    return JSONResponse(await responses_of(request).cancel(response_id))

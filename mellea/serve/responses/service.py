"""The Responses API over its store, framework-free: what the routes of
``cli/serve/responses_routes.py`` call for each endpoint.

A :class:`ResponsesService` is one tenant's view (a response of another tenant does not
exist for it): it builds a new response's conversation from the stored history and
referred items, sets up the reply that keeps the response in the store, and answers
retrieve, replay, delete, input items and cancel with wire-ready objects or OpenAI errors.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeVar

from mellea.core.parsers import ReplyParser
from mellea.serve.errors import OpenAIError
from mellea.serve.options import ServeArguments
from mellea.serve.responses.arguments import serve_arguments
from mellea.serve.responses.items import input_items
from mellea.serve.responses.objects import ResponseObject
from mellea.serve.responses.replay import replayed
from mellea.serve.responses.reply import ResponsesReply
from mellea.serve.responses.request import FunctionTool, ResponsesRequest
from mellea.serve.responses.store_api import Store, store_call
from mellea.serve.responses.store_sink import LocalRun, LocalRuns, StoreSink, cancel_signal
from mellea.serve.responses.stored import StoredResponse

T = TypeVar("T")

CANCEL_WAIT_SECONDS = 5.0  # how long a cancel waits for the run to store its last output
REPLAY_WAIT_SECONDS = 600.0  # how long a replay waits for a running response to end


class Offload(Protocol):
    """How the server runs a piece of request work: ``fn(*args)``, on the event loop or,
    when ``heavy`` (or the body is large), in a worker thread."""

    def __call__(self, heavy: bool, fn: Callable[..., T], *args: Any) -> Awaitable[T]:
        """``fn(*args)``'s result."""
        ...


@dataclass
class Conversation:
    """What a new response is generated from: the stored history it continues, its own
    input items, and ``serve()``'s arguments made of both."""

    history: list[dict[str, Any]]
    input: list[dict[str, Any]]
    arguments: ServeArguments


@dataclass
class ResponsesService:
    """The stored responses of one tenant (``owner``) and the runs of this process."""

    store: Store
    runs: LocalRuns
    owner: str

    async def conversation(
        self, body: ResponsesRequest, tools: list[FunctionTool], offload: Offload
    ) -> Conversation:
        """The history of ``previous_response_id``, the input with its item references
        resolved, and ``serve()``'s arguments; 400s for a missing or running previous
        response, a 503 for a store known to be down when the response is to be kept."""
        if body.stores:
            self.store.check()  # a database known to be down: 503 before anything runs
        history = await self._history(body.previous_response_id)
        # Looking referred items up scans the stored responses: off the loop.
        refers = isinstance(body.input, list) and any(
            item.get("type") == "item_reference" for item in body.input
        )
        items = await offload(refers, input_items, body.input or "", self._items)
        # A text.format schema takes a while to turn into a model, and a stored history
        # may be long whatever the body's size: both off the loop.
        spec = body.text.format if body.text else None
        heavy = bool(history) or (spec is not None and spec.type == "json_schema")
        args = await offload(heavy, serve_arguments, body, tools, [*history, *items])
        return Conversation(history, items, args)

    def reply(
        self,
        body: ResponsesRequest,
        response: ResponseObject,
        conversation: Conversation,
        parser: ReplyParser | None,
    ) -> ResponsesReply:
        """The reply generating ``response``: kept in the store when the request asks to
        (then it can be cancelled too), tracked in this process while it runs."""
        record = None
        if body.stores:
            record = StoredResponse(response.wire(), conversation.input, conversation.history)
        run = LocalRun(cancel_signal(self.store, response.id, record is not None))
        sink = StoreSink(self.store, record, self.runs, run, self.owner)
        cancel = run.signal if record is not None else None  # unstored: 404 on cancel
        return ResponsesReply(body, response, sink, parser, cancel)

    async def retrieve(self, response_id: str) -> dict[str, Any]:
        """The stored response (404 if unknown, deleted, or created with ``store: false``)."""
        return (await self._stored(response_id)).response

    def replay(
        self, response_id: str, starting_after: int | None, request_timeout: float | None
    ) -> AsyncIterator[dict[str, Any]]:
        """The events of a response :meth:`retrieve` found, after ``starting_after`` if
        given; a response still running is replayed once it ends (waiting at most the
        request timeout)."""
        wait = request_timeout or REPLAY_WAIT_SECONDS
        return replayed(self.store, response_id, starting_after, wait)

    async def delete(self, response_id: str) -> dict[str, Any]:
        """Forget a stored response; the deletion object, or a 404."""
        if not await store_call(self.store, self.store.delete, response_id, self.owner):
            raise _not_found(response_id)
        return {"id": response_id, "object": "response", "deleted": True}

    async def input_items(
        self, response_id: str, limit: int, order: Literal["asc", "desc"], after: str | None
    ) -> dict[str, Any]:
        """One page (a ``list`` object) of the input items the response was created with,
        in ``order``, after the item ``after`` if given."""
        items = (await self._stored(response_id)).input
        if order == "desc":
            items = items[::-1]
        if after is not None:
            ids = [item["id"] for item in items]
            if after not in ids:
                raise OpenAIError(400, f"no input item with id {after!r}", param="after")
            items = items[ids.index(after) + 1 :]
        page = items[:limit]
        return {
            "object": "list",
            "data": page,
            "first_id": page[0]["id"] if page else None,
            "last_id": page[-1]["id"] if page else None,
            "has_more": len(items) > len(page),
        }

    async def cancel(self, response_id: str) -> dict[str, Any]:
        """Stop a response still being generated; it ends ``cancelled`` with what it had.

        A run of this process stops at once and is waited for; one of another process
        notices the stored status. A response that is not in progress is a 400.
        """
        result = await store_call(self.store, self.store.cancel, response_id, self.owner)
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
        await self.runs.stop(response_id, CANCEL_WAIT_SECONDS)
        stored = await store_call(self.store, self.store.get, response_id)
        return stored.response if stored is not None else response

    def _items(self, item_ids: list[str]) -> dict[str, dict[str, Any]]:
        """The tenant's stored items with these ids (what an ``item_reference`` names)."""
        return self.store.items(item_ids, self.owner)

    async def _history(self, previous_id: str | None) -> list[dict[str, Any]]:
        """The conversation a ``previous_response_id`` continues (its instructions stay behind)."""
        if previous_id is None:
            return []
        previous = await store_call(self.store, self.store.get, previous_id, self.owner)
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

    async def _stored(self, response_id: str) -> StoredResponse:
        """The tenant's stored response (another tenant's is as unknown as a missing one)."""
        stored = await store_call(self.store, self.store.get, response_id, self.owner)
        if stored is None:
            raise _not_found(response_id)
        return stored


def _not_found(response_id: str) -> OpenAIError:
    return OpenAIError(404, f"no response with id {response_id!r}", param="response_id")

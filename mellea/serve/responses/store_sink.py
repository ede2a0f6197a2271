"""Where a run of ``POST /v1/responses`` reports its response: the store (when the request
asked to keep it), and the table of this process's runs that a cancel reaches.

A run reports through :class:`StoreSink` (a :class:`~mellea.serve.responses.run.ResponseSink`);
:class:`LocalRuns` is how ``POST /v1/responses/{id}/cancel`` stops a run of this process
at once, and waits for it to store what it had.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from mellea.serve.responses.run import CancelSignal
from mellea.serve.responses.store_api import Store, store_call
from mellea.serve.responses.stored import StoredResponse

log = logging.getLogger("mellea.serve")


@dataclass
class LocalRun:
    """A response being generated in this process: how to cancel it, and when it ended."""

    signal: CancelSignal
    done: asyncio.Event = field(default_factory=asyncio.Event)


class LocalRuns:
    """The responses being generated in this process, by id (one table per app)."""

    def __init__(self) -> None:
        """An empty table."""
        self._runs: dict[str, LocalRun] = {}

    def add(self, response_id: str, run: LocalRun) -> None:
        """``run`` generates ``response_id`` from now on."""
        self._runs[response_id] = run

    def end(self, response_id: str, run: LocalRun) -> None:
        """``run`` of ``response_id`` ended (its final response is being stored)."""
        self._runs.pop(response_id, None)
        run.done.set()

    async def stop(self, response_id: str, wait_seconds: float) -> None:
        """Cancel the run of ``response_id`` if this process has one, and wait up to
        ``wait_seconds`` for it to store its last output."""
        run = self._runs.get(response_id)
        if run is None:
            return
        run.signal.set()
        try:
            await asyncio.wait_for(run.done.wait(), wait_seconds)
        except TimeoutError:
            log.warning("response %s did not stop within %.0f s", response_id, wait_seconds)


@dataclass
class StoreSink:
    """Keeps a run's response in the store (if the request asked to) and tracks it while it runs."""

    store: Store
    record: StoredResponse | None  # None: a ``store: false`` request, kept nowhere
    runs: LocalRuns
    run: LocalRun
    owner: str  # the tenant the stored response belongs to

    def started(self, response: dict[str, Any]) -> Awaitable[None] | None:
        """Store the in-progress response and make it cancellable."""
        self.runs.add(response["id"], self.run)
        if self.record is None:
            return None
        self.record.response = response
        return store_call(self.store, self.store.create, self.record, self.owner)

    def finished(self, response: dict[str, Any]) -> Awaitable[dict[str, Any]] | dict[str, Any]:
        """Store the final response; a cancel that came first keeps its status."""
        self.runs.end(response["id"], self.run)
        if self.record is None:
            return response
        return _stored_or(store_call(self.store, self.store.finish, response), response)


def cancel_signal(store: Store, response_id: str, stored: bool) -> CancelSignal:
    """The signal that cancels a new response: set in this process by :class:`LocalRuns`
    and, with a shared store, by a cancel that reached another worker (the run polls the
    store's status)."""
    if not stored or not store.shared:
        return CancelSignal()
    return CancelSignal(_cancelled_in_store(store, response_id))


def _cancelled_in_store(store: Store, response_id: str) -> Callable[[], Awaitable[bool]]:
    async def cancelled() -> bool:
        return await store_call(store, store.status, response_id) == "cancelled"

    return cancelled


async def _stored_or(
    stored: Awaitable[dict[str, Any] | None], fallback: dict[str, Any]
) -> dict[str, Any]:
    """What the store wrote, or ``fallback`` if the response was deleted meanwhile."""
    return await stored or fallback

"""Admission: a bounded number of requests at once, a bounded queue, 429 beyond it."""

from __future__ import annotations

import asyncio

from starlette.types import ASGIApp, Receive, Scope, Send

from cli.serve.observability import ServerMetrics
from cli.serve.responses import send_error

RETRY_AFTER_SECONDS = 1


class Admission:
    """ASGI middleware for ``POST /v1/...``: at most ``limit`` run, ``queue`` more wait.

    A request beyond both gets 429 with ``Retry-After`` at once. While the server
    drains for shutdown, new requests get 503. The engine's own admission (free
    KV blocks) stays the inner limit.
    """

    def __init__(
        self, app: ASGIApp, metrics: ServerMetrics, limit: int | None, queue: int, state: object
    ) -> None:
        self.app = app
        self.metrics = metrics
        self.limit = limit
        self.queue = queue
        self.state = state  # the app's state: ``draining`` is set on shutdown
        self.running = 0
        self.waiting = 0
        self._slots: asyncio.Semaphore | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope["method"] != "POST"
            or not scope["path"].startswith("/v1/")
        ):
            await self.app(scope, receive, send)
            return
        if getattr(self.state, "draining", False):
            await send_error(
                send,
                503,
                "the server is shutting down",
                code="draining",
                headers={"retry-after": str(RETRY_AFTER_SECONDS)},
            )
            return
        if self.limit is None:
            await self._run(scope, receive, send)
            return
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.limit)
        if self.running >= self.limit and self.waiting >= self.queue:
            await send_error(
                send,
                429,
                f"the server is at capacity ({self.running} running, {self.waiting} queued); retry later",
                code="too_many_requests",
                headers={"retry-after": str(RETRY_AFTER_SECONDS)},
            )
            return
        self.waiting += 1
        self.metrics.queue_depth.set(self.waiting)
        try:
            await self._slots.acquire()
        finally:
            self.waiting -= 1
            self.metrics.queue_depth.set(self.waiting)
        try:
            await self._run(scope, receive, send)
        finally:
            self._slots.release()

    async def _run(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.running += 1
        self.metrics.in_flight.inc()
        try:
            await self.app(scope, receive, send)
        finally:
            self.running -= 1
            self.metrics.in_flight.dec()

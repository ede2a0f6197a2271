"""Admission: a bounded number of generations at once, a bounded queue, 429 beyond it."""

from __future__ import annotations

import asyncio
from collections import deque

from starlette.types import ASGIApp, Receive, Scope, Send

from cli.serve.error_response import send_error
from cli.serve.limits import rewound
from cli.serve.observability import ServerMetrics
from cli.serve.request_body import generations, is_generating

RETRY_AFTER_SECONDS = 1


class Admission:
    """ASGI middleware for the generating routes: at most ``limit`` generations run,
    ``queue`` more requests wait (first come, first served).

    A request counts the generations it asks for (``n`` choices, times the prompts of
    a completions request), capped at ``limit`` so a large one can still run alone.
    It is admitted after its body has been read (see :class:`cli.serve.limits.BodyReader`);
    a client that leaves while queued gives its place up. A request beyond the queue gets 429 with ``Retry-After`` at once; while the
    server drains for shutdown, 503. The engine's own admission (free KV blocks) stays
    the inner limit.
    """

    def __init__(
        self, app: ASGIApp, metrics: ServerMetrics, limit: int | None, queue: int, state: object
    ) -> None:
        self.app = app
        self.metrics = metrics
        self.limit = limit
        self.queue = queue
        self.state = state  # the app's state: ``draining`` is set on shutdown
        self.running = 0  # generations admitted
        self._waiters: deque[tuple[int, asyncio.Future[None]]] = deque()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not is_generating(scope):  # at capacity a client can still read or cancel
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
        weight = generations(scope)
        if self.limit is not None:
            weight = min(weight, self.limit)
            if not self._fits(weight) and len(self._waiters) >= self.queue:
                await send_error(
                    send,
                    429,
                    f"the server is at capacity ({self.running} generations running, "
                    f"{len(self._waiters)} requests queued); retry later",
                    code="too_many_requests",
                    headers={"retry-after": str(RETRY_AFTER_SECONDS)},
                )
                return
            if self._fits(weight):
                self.running += weight
            else:
                await receive()  # the body, read already; given to the app again below
                if not await self._wait(weight, receive):
                    return  # the client left while queued: nobody to answer
                receive = rewound(scope, receive)
        else:
            self.running += weight
        self.metrics.in_flight.inc()
        try:
            await self.app(scope, receive, send)
        finally:
            self.metrics.in_flight.dec()
            self.running -= weight
            self._wake()

    def _fits(self, weight: int) -> bool:
        """Whether ``weight`` more generations may start now (nobody queued before them)."""
        assert self.limit is not None
        return not self._waiters and self.running + weight <= self.limit

    async def _wait(self, weight: int, receive: Receive) -> bool:
        """Queue for ``weight`` generations; False if the client left while waiting."""
        waiter = asyncio.get_running_loop().create_future()
        entry = (weight, waiter)
        self._waiters.append(entry)
        self.metrics.queue_depth.set(len(self._waiters))
        left = asyncio.ensure_future(_disconnected(receive))
        try:
            await asyncio.wait({waiter, left}, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            self._give_up(entry)
            raise
        finally:
            left.cancel()
        if waiter.done():  # _wake counted us in before resolving it
            return True
        self._give_up(entry)
        return False

    def _give_up(self, entry: tuple[int, asyncio.Future[None]]) -> None:
        """Leave the queue, or, if admitted meanwhile, hand the generations back."""
        weight, waiter = entry
        if waiter.done():
            self.running -= weight
        else:
            waiter.cancel()
            self._waiters.remove(entry)
        self._wake()

    def _wake(self) -> None:
        """Admit queued requests, in order, while the first of them fits."""
        assert self.limit is not None or not self._waiters
        while self._waiters:
            weight, waiter = self._waiters[0]
            if self.running + weight > self.limit:  # type: ignore[operator]
                break
            self._waiters.popleft()
            self.running += weight
            waiter.set_result(None)
        self.metrics.queue_depth.set(len(self._waiters))


async def _disconnected(receive: Receive) -> None:
    """Return once the client has gone."""
    while (await receive())["type"] != "http.disconnect":
        pass

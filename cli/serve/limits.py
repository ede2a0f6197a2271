"""Slow clients: the whole request body is read first, within a size limit (413) and a
deadline (408), and a client that stops taking in its reply is dropped.

Admission comes after this, so a client that sends its body slowly (or never) holds a
connection, not one of the server's concurrency slots; nor can one that never reads
its reply keep its slot once its send buffers are full.
"""

from __future__ import annotations

import asyncio
import logging

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from cli.serve.error_response import send_error

log = logging.getLogger("mellea.serve")
_BODY = "body"  # where the read body waits in the request's ``scope["state"]``
LINGER_SECONDS = 5.0  # how long a refused body is still read (and dropped) after the 413


class BodyReader:
    """ASGI middleware: the body is read whole before the app runs, then handed on.

    A body over ``max_bytes`` gets 413. A declared ``Content-Length`` over the limit is
    answered at once, before any of the body is read (as nginx does); what the client
    still sends is then read and dropped for up to ``LINGER_SECONDS``, so that a client
    still sending gets to read the answer instead of a reset connection. A chunked body
    is read until it passes the limit, to its end (and dropped) up to twice the limit. A
    body not complete ``timeout`` seconds after its headers came gets 408. Either way
    the connection is closed.
    """

    def __init__(self, app: ASGIApp, max_bytes: int, timeout: float | None) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.timeout = timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers", [])).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._too_large(send, complete=False)
            await self._drain(receive)
            await send({"type": "http.response.body", "body": b""})
            return
        try:
            async with asyncio.timeout(self.timeout):
                body = await self._read(receive)
        except TimeoutError:
            await send_error(
                send,
                408,
                f"the request body did not arrive within {self.timeout:g} s",
                code="request_timeout",
                headers={"connection": "close"},
            )
            return
        except _TooLarge:
            await self._too_large(send)
            return
        if body is None:  # the client left while sending
            return
        scope.setdefault("state", {})[_BODY] = body
        await self.app(scope, _replay(body, receive), send)

    async def _read(self, receive: Receive) -> bytes | None:
        chunks: list[bytes] = []
        seen = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            seen += len(chunk)
            if seen > 2 * self.max_bytes:
                raise _TooLarge
            if seen > self.max_bytes:
                chunks.clear()  # read on to the end, keeping nothing
            else:
                chunks.append(chunk)
            if not message.get("more_body", False):
                if seen > self.max_bytes:
                    raise _TooLarge
                return b"".join(chunks)

    async def _drain(self, receive: Receive) -> None:
        """Read and drop the rest of a refused body, for a while at most."""
        linger = min(LINGER_SECONDS, self.timeout or LINGER_SECONDS)
        try:
            async with asyncio.timeout(linger):
                while True:
                    message = await receive()
                    if message["type"] == "http.disconnect" or not message.get("more_body"):
                        return
        except TimeoutError:
            return

    async def _too_large(self, send: Send, complete: bool = True) -> None:
        await send_error(
            send,
            413,
            f"request body is larger than the limit of {self.max_bytes} bytes",
            code="request_too_large",
            headers={"connection": "close"},
            complete=complete,
        )


class _TooLarge(Exception):
    pass


class WriteDeadline:
    """ASGI middleware: a reply whose client takes in nothing for ``timeout`` seconds
    (its buffers full: it stopped reading) is abandoned and the connection closed, so
    its generation and its concurrency slot are freed.

    One timer per request looks at the write in progress, if any, each ``timeout``
    seconds: a timer per write (``asyncio.timeout``) cost more than the rest of this
    middleware stack for a short streamed reply.
    """

    def __init__(self, app: ASGIApp, timeout: float | None) -> None:
        self.app = app
        self.timeout = timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.timeout is None:
            await self.app(scope, receive, send)
            return
        timeout = self.timeout
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        since: float | None = None  # when the write in progress began
        stalled = False

        def check() -> None:
            nonlocal stalled, timer
            now = loop.time()
            if since is not None and now - since >= timeout:
                stalled = True
                task.cancel()
            else:
                timer = loop.call_at((since if since is not None else now) + timeout, check)

        timer = loop.call_later(timeout, check)

        async def bounded(message: Message) -> None:
            nonlocal since
            since = loop.time()
            try:
                await send(message)
            finally:
                since = None

        try:
            await self.app(scope, receive, bounded)
        except asyncio.CancelledError:
            if not stalled:
                raise
            task.uncancel()
            # Returning with the reply unfinished makes the server close the connection.
            log.info("the client took in nothing for %g s; its reply is abandoned", timeout)
        finally:
            timer.cancel()


def read_body(scope: Scope) -> bytes:
    """The body :class:`BodyReader` read (empty when there was none)."""
    return (scope.get("state") or {}).get(_BODY) or b""


def rewound(scope: Scope, receive: Receive) -> Receive:
    """``receive`` that gives the read body first again: for a middleware that read past it
    (to see whether the client left) before handing the request on."""
    return _replay(scope["state"][_BODY], receive)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that gives the read body once, then waits for the client (disconnect)."""
    given = False

    async def replayed() -> Message:
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed

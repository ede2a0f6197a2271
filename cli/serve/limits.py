"""Refuse request bodies over a size limit without reading them whole."""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from cli.serve.responses import send_error


class BodySizeLimit:
    """ASGI middleware: a body over ``max_bytes`` gets 413.

    A declared ``Content-Length`` over the limit is refused before any of the body
    is read; a chunked body is counted as it arrives and cut off at the limit.
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers", [])).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._refuse(send)
            return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise HTTPException(413, self._message())
            return message

        await self.app(scope, counted, send)

    def _message(self) -> str:
        return f"request body is larger than the limit of {self.max_bytes} bytes"

    async def _refuse(self, send: Send) -> None:
        await send_error(
            send, 413, self._message(), code="request_too_large", headers={"connection": "close"}
        )

"""Send an OpenAI-shaped error straight from ASGI middleware."""

from __future__ import annotations

import json

from starlette.types import Send

from mellea.serve.errors import ERROR_TYPES, error_body


async def send_error(
    send: Send,
    status: int,
    message: str,
    *,
    code: str | None = None,
    param: str | None = None,
    headers: dict[str, str] | None = None,
) -> None:
    """Write a complete JSON error response with ``status``."""
    body = json.dumps(
        error_body(message, ERROR_TYPES.get(status, "invalid_request_error"), param, code)
    ).encode()
    raw_headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
    ]
    raw_headers += [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw_headers})
    await send({"type": "http.response.body", "body": body})

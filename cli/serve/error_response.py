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
    complete: bool = True,
) -> None:
    """Write a JSON error response with ``status``.

    With ``complete=False`` every byte of it goes out but the response stays open (the
    caller ends it with an empty ``http.response.body``), so the request can still be read.
    """
    body = json.dumps(
        error_body(message, ERROR_TYPES.get(status, "invalid_request_error"), param, code)
    ).encode()
    raw_headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
    ]
    raw_headers += [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw_headers})
    await send({"type": "http.response.body", "body": body, "more_body": not complete})

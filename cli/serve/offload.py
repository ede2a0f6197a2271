"""Request work that may run on the event loop, and work that goes to a worker thread."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

from starlette.requests import Request

T = TypeVar("T")

# Bodies up to this size are mapped to serve() arguments on the loop: for them the hop
# to a worker thread and back costs more than the work (about a tenth of the server's
# time per request with a program that returns a fixed text).
INLINE_BODY_BYTES = 16 * 1024


async def run_request_work(request: Request, heavy: bool, fn: Callable[..., T], *args: object) -> T:
    """``fn(*args)``: on the loop for a small body, in a worker thread when the body is
    large (or of unknown size) or ``heavy`` (e.g. a JSON schema to turn into a model),
    so that one request's parsing never stalls the others."""
    size = request.headers.get("content-length", "")
    if not heavy and size.isdigit() and int(size) <= INLINE_BODY_BYTES:
        return fn(*args)
    return await asyncio.to_thread(fn, *args)

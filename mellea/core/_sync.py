"""Run mellea's async code from synchronous callers.

Sync methods (``session.instruct`` and friends) run their coroutine on one
background event loop owned by this process, so they work in plain scripts, in
worker threads, and even when the caller's thread already runs a loop.

The loop holds no settings: each coroutine runs in a copy of its caller's context,
so the runtime active where ``instruct`` was called (the serving app's, see
:mod:`mellea.backends.runtime`) is the one the coroutine sees.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None


def _background_loop() -> asyncio.AbstractEventLoop:
    global _loop
    with _lock:
        if _loop is None or _loop.is_closed():
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name="mellea-sync-loop", daemon=True)
            thread.start()
            _loop = loop
        return _loop


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion on the background loop and return its result.

    The coroutine runs in a copy of the caller's context, so context variables set by
    the caller (a request's program trace, for one) are seen by the code it runs.
    """
    context = contextvars.copy_context()
    future = context.run(asyncio.run_coroutine_threadsafe, coro, _background_loop())
    return future.result()

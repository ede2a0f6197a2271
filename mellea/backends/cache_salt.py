"""The prefix-cache salt of the request being served, for backends that cache prompts.

A server sets it once per request (from the caller's API key and the request's own
``cache_salt``); it travels with the context into the program's tasks, worker threads
and the sync-method loop, and the local backend hands it to the engine, whose prefix
cache then shares blocks only between requests with the same salt.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_salt: ContextVar[str | None] = ContextVar("mellea_cache_salt", default=None)


def current_cache_salt() -> str | None:
    """The salt of the request being served here (None: the shared cache)."""
    return _salt.get()


@contextmanager
def cache_salt(salt: str | None) -> Iterator[None]:
    """Generations started inside this block (and tasks or threads it starts) use ``salt``."""
    token = _salt.set(salt)
    try:
        yield
    finally:
        _salt.reset(token)

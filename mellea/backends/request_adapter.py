"""The adapter the request being served names, for the local sessions that pick none.

A server sets it once per request whose ``model`` names one of its adapters (``m serve
--lora NAME=PATH``). Like the prefix-cache salt (:mod:`mellea.backends.cache_salt`) it
travels with the context into the program's tasks, worker threads and the sync-method
loop, and the local backend reads it: a generation whose call names no adapter
(``ModelOption.ADAPTER``), on a session not started on one (``model_id=NAME``), whose
engine holds this adapter, generates with it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_adapter: ContextVar[str | None] = ContextVar("mellea_request_adapter", default=None)


def current_request_adapter() -> str | None:
    """The adapter the request being served here names (None: none, the base model)."""
    return _adapter.get()


@contextmanager
def request_adapter(name: str | None) -> Iterator[None]:
    """Generations started inside this block (and tasks or threads it starts) that pick
    no adapter of their own use ``name`` where their engine holds it."""
    token = _adapter.set(name)
    try:
        yield
    finally:
        _adapter.reset(token)

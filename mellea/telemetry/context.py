"""Telemetry context: session, request, model and sampling iteration, carried in
context variables (each asyncio task has its own) and copied onto log records."""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import AsyncGenerator, Generator
from contextvars import ContextVar, Token
from typing import Any

_FIELDS: dict[str, ContextVar[Any]] = {
    "session_id": ContextVar("mellea_session_id", default=None),
    "request_id": ContextVar("mellea_request_id", default=None),
    "model_id": ContextVar("mellea_model_id", default=None),
    "sampling_iteration": ContextVar("mellea_sampling_iteration", default=None),
}


def get_session_id() -> str | None:
    """The current session id, if set."""
    return _FIELDS["session_id"].get()


def get_request_id() -> str | None:
    """The current request id, if set."""
    return _FIELDS["request_id"].get()


def get_model_id() -> str | None:
    """The current model id, if set."""
    return _FIELDS["model_id"].get()


def get_sampling_iteration() -> int | None:
    """The current sampling iteration, if set."""
    return _FIELDS["sampling_iteration"].get()


def get_current_context() -> dict[str, Any]:
    """The fields that are set, by name."""
    return {k: v.get() for k, v in _FIELDS.items() if v.get() is not None}


def generate_request_id() -> str:
    """A new random request id."""
    return uuid.uuid4().hex


def _apply(values: dict[str, Any]) -> dict[str, Token[Any]]:
    unknown = sorted(set(values) - set(_FIELDS))
    if unknown:
        raise ValueError(
            f"unknown telemetry context field(s): {', '.join(unknown)}; use {', '.join(_FIELDS)}"
        )
    return {k: _FIELDS[k].set(v) for k, v in values.items()}


def _restore(tokens: dict[str, Token[Any]]) -> None:
    for k, token in tokens.items():
        _FIELDS[k].reset(token)


@contextlib.contextmanager
def with_context(**kwargs: Any) -> Generator[None, None, None]:
    """Set context fields for the block (``session_id``, ``request_id``, ``model_id``,
    ``sampling_iteration``); the previous values come back after it."""
    tokens = _apply(kwargs)
    try:
        yield
    finally:
        _restore(tokens)


@contextlib.asynccontextmanager
async def async_with_context(**kwargs: Any) -> AsyncGenerator[None, None]:
    """``async with`` form of :func:`with_context`."""
    tokens = _apply(kwargs)
    try:
        yield
    finally:
        _restore(tokens)


class MelleaContextFilter(logging.Filter):
    """Copies the context fields onto each log record (never drops a record)."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Add the fields that are set to ``record``."""
        for key, value in get_current_context().items():
            setattr(record, key, value)
        return True

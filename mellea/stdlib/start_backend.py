"""``start_backend``: a context and a backend, without a session around them."""

from __future__ import annotations

from typing import Any, Literal

from mellea.backends.base import Backend
from mellea.backends.registry import create_backend
from mellea.core.base import Context
from mellea.stdlib.context import ChatContext, SimpleContext


def resolve_context(ctx: Context | None, context_type: Literal["simple", "chat"] | None) -> Context:
    """``ctx``, or a new context of ``context_type`` (default: a ``SimpleContext``)."""
    if ctx is not None and context_type is not None:
        raise ValueError("pass either ctx or context_type, not both")
    if context_type is None:
        return ctx if ctx is not None else SimpleContext()
    if context_type not in ("simple", "chat"):
        raise ValueError(f"context_type must be 'simple' or 'chat', not {context_type!r}")
    return ChatContext() if context_type == "chat" else SimpleContext()


def start_backend(
    backend_name: str = "local",
    model_id: Any = None,
    ctx: Context | None = None,
    *,
    context_type: Literal["simple", "chat"] | None = None,
    model_options: dict[str, Any] | None = None,
    **backend_kwargs: Any,
) -> tuple[Context, Backend]:
    """``(context, backend)`` as ``start_session`` would build them (same arguments)."""
    context = resolve_context(ctx, context_type)
    backend = create_backend(backend_name, model_id, model_options=model_options, **backend_kwargs)
    return context, backend

"""Upstream's functional API: session calls on an explicit context and backend.

Each function takes ``(what, context, backend, **same keywords as the session
method)`` and returns ``(result, new_context)`` (or a ``SamplingResult`` when
``return_sampling_results=True``); the given context is not changed.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from mellea.backends.base import Backend
from mellea.core._sync import run_sync
from mellea.core.base import Context
from mellea.core.requirement import ValidationResult
from mellea.core.sampling import SamplingResult
from mellea.core.thunk import ModelOutputThunk
from mellea.plugins import hook_points
from mellea.stdlib.components.chat import Message, ToolMessage
from mellea.stdlib.session import MelleaSession


def _with_context(result: Any, session: MelleaSession) -> Any:
    return result if isinstance(result, SamplingResult) else (result, session.ctx)


async def aact(action: Any, context: Context, backend: Backend, **kwargs: Any) -> Any:
    """Run a component; see :meth:`MelleaSession.aact`."""
    session = MelleaSession(backend, context)
    return _with_context(await session.aact(action, **kwargs), session)


def act(action: Any, context: Context, backend: Backend, **kwargs: Any) -> Any:
    """Run a component to completion; see :meth:`MelleaSession.act`."""
    kwargs["await_result"] = True
    return run_sync(aact(action, context, backend, **kwargs))


async def ainstruct(description: str, context: Context, backend: Backend, **kwargs: Any) -> Any:
    """An instruction; see :meth:`MelleaSession.ainstruct`."""
    session = MelleaSession(backend, context)
    return _with_context(await session.ainstruct(description, **kwargs), session)


def instruct(description: str, context: Context, backend: Backend, **kwargs: Any) -> Any:
    """An instruction, run to completion; see :meth:`MelleaSession.instruct`."""
    kwargs["await_result"] = True
    return run_sync(ainstruct(description, context, backend, **kwargs))


async def achat(
    content: str, context: Context, backend: Backend, **kwargs: Any
) -> tuple[Message, Context]:
    """One chat turn; see :meth:`MelleaSession.achat`."""
    session = MelleaSession(backend, context)
    return await session.achat(content, **kwargs), session.ctx


def chat(
    content: str, context: Context, backend: Backend, **kwargs: Any
) -> tuple[Message, Context]:
    """One chat turn; see :meth:`MelleaSession.chat`."""
    return run_sync(achat(content, context, backend, **kwargs))


async def avalidate(
    reqs: Any, context: Context, backend: Backend, **kwargs: Any
) -> list[ValidationResult]:
    """Check requirements; see :meth:`MelleaSession.avalidate`."""
    return await MelleaSession(backend, context).avalidate(reqs, **kwargs)


def validate(
    reqs: Any, context: Context, backend: Backend, **kwargs: Any
) -> list[ValidationResult]:
    """Check requirements; see :meth:`MelleaSession.validate`."""
    return run_sync(avalidate(reqs, context, backend, **kwargs))


async def aquery(obj: Any, query: str, context: Context, backend: Backend, **kwargs: Any) -> Any:
    """Ask about an object; see :meth:`MelleaSession.aquery`. ``(thunk, new_context)``."""
    session = MelleaSession(backend, context)
    return await session.aquery(obj, query, **kwargs), session.ctx


def query(obj: Any, query: str, context: Context, backend: Backend, **kwargs: Any) -> Any:
    """Ask about an object, computed; ``(thunk, new_context)``."""
    kwargs["await_result"] = True
    return run_sync(aquery(obj, query, context, backend, **kwargs))


async def atransform(
    obj: Any, transformation: str, context: Context, backend: Backend, **kwargs: Any
) -> Any:
    """Transform an object; see :meth:`MelleaSession.atransform`. ``(result, new_context)``."""
    session = MelleaSession(backend, context)
    return await session.atransform(obj, transformation, **kwargs), session.ctx


def transform(
    obj: Any, transformation: str, context: Context, backend: Backend, **kwargs: Any
) -> Any:
    """Synchronous :func:`atransform`."""
    return run_sync(atransform(obj, transformation, context, backend, **kwargs))


async def acall_tools(result: ModelOutputThunk, backend: Backend) -> list[ToolMessage]:
    """Run every tool call in ``result``; one ``tool`` message per call.

    A tool that raises gives its exception as the output (its text as the content).
    The tool hooks fire around each call: a plugin may replace the call, block it
    (``PluginViolationError``) or change its output.
    """
    messages = []
    for call in result.tool_calls or []:
        invocation_id = str(uuid.uuid4())
        call = await hook_points.tool_pre_invoke(call, invocation_id, backend)
        started = time.monotonic()
        error: Exception | None = None
        try:
            output: Any = call.call_func()
        except Exception as exc:  # the model gets to see what went wrong
            output = error = exc
        elapsed_ms = int((time.monotonic() - started) * 1000)
        message = ToolMessage("tool", str(output), output, call.name, call.args, call)
        changed = await hook_points.tool_post_invoke(
            call, invocation_id, output, message, elapsed_ms, error, backend
        )
        if changed is not output:
            message = ToolMessage("tool", str(changed), changed, call.name, call.args, call)
        messages.append(message)
    return messages


def call_tools(result: ModelOutputThunk, backend: Backend) -> list[ToolMessage]:
    """Synchronous :func:`acall_tools`."""
    return run_sync(acall_tools(result, backend))


__all__ = [
    "aact",
    "acall_tools",
    "achat",
    "act",
    "ainstruct",
    "aquery",
    "atransform",
    "avalidate",
    "call_tools",
    "chat",
    "instruct",
    "query",
    "transform",
    "validate",
]

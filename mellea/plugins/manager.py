"""The plugin manager: registered handlers and how one hook call runs them.

Upstream's ``register()`` is global by design (a plugin registered without a session
fires for every session). Here "global" means the manager of the current app: each
:class:`~mellea.backends.runtime.Runtime` owns one and makes it current while a
program it serves is loaded or called, so two programs served from one process do
not see each other's plugins. Outside a served program the process's default
manager is current.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import itertools
import logging
import threading
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel

from mellea.plugins.base import MelleaBasePayload, PluginResult, PluginViolationError
from mellea.plugins.context import PluginContext, build_global_context
from mellea.plugins.policies import writable_fields
from mellea.plugins.types import MODE_ORDER, HookType, PluginMode

logger = logging.getLogger(__name__)

DEFAULT_PLUGIN_TIMEOUT = 5.0  # seconds one handler may take before it is given up on
# Framework control-flow tools (loop terminators): flagged on tool payloads.
INTERNAL_TOOL_NAMES: frozenset[str] = frozenset({"final_answer"})

HandlerFn = Callable[[Any, PluginContext], Awaitable[Any]]
P = TypeVar("P", bound=MelleaBasePayload)


@dataclass(frozen=True)
class Handler:
    """One registered hook handler. ``scope`` is the session or ``with`` block that
    registered it (``None``: registered globally)."""

    name: str
    hook_type: str
    fn: HandlerFn
    mode: PluginMode
    priority: int
    scope: str | None
    order: int


class PluginManager:
    """The handlers registered in one app, and the running of a hook call."""

    def __init__(self, *, timeout: float = DEFAULT_PLUGIN_TIMEOUT) -> None:
        self.timeout = timeout
        # Replaced, never changed in place, so the hook points read them without the lock.
        self._handlers: tuple[Handler, ...] = ()
        self._hook_types: frozenset[str] = frozenset()
        self._lock = threading.Lock()  # register/unregister may come from any thread
        self._order = itertools.count()
        self._background: set[asyncio.Task[Any]] = set()

    # -- registration ------------------------------------------------------

    def add(
        self,
        name: str,
        hook_type: str,
        fn: HandlerFn,
        *,
        mode: PluginMode,
        priority: int,
        scope: str | None,
    ) -> None:
        """Register ``fn`` for ``hook_type``; the same name in the same scope is replaced."""
        handler = Handler(
            name, str(hook_type), fn, PluginMode(mode), priority, scope, next(self._order)
        )
        with self._lock:
            kept = [h for h in self._handlers if not (h.name == name and h.scope == scope)]
            self._replace([*kept, handler])

    def remove(self, name: str, scope: str | None = None) -> None:
        """Unregister the handler ``name`` of ``scope`` (no error when there is none)."""
        with self._lock:
            self._replace([h for h in self._handlers if not (h.name == name and h.scope == scope)])

    def remove_scope(self, scope: str) -> None:
        """Unregister every handler ``scope`` registered."""
        with self._lock:
            self._replace([h for h in self._handlers if h.scope != scope])

    def clear(self) -> None:
        """Unregister everything."""
        with self._lock:
            self._replace([])

    def _replace(self, handlers: list[Handler]) -> None:
        self._handlers = tuple(handlers)
        self._hook_types = frozenset(h.hook_type for h in handlers)

    def handlers(self, hook_type: str | None = None) -> list[Handler]:
        """The registered handlers (for ``hook_type`` only, when given)."""
        found = self._handlers
        return [h for h in found if hook_type is None or h.hook_type == str(hook_type)]

    def has_hooks_for(self, hook_type: str) -> bool:
        """Whether any handler is registered for ``hook_type``."""
        return hook_type in self._hook_types

    def is_empty(self) -> bool:
        """Whether nothing is registered."""
        return not self._handlers

    # -- running -----------------------------------------------------------

    async def invoke(
        self, hook_type: str, payload: P, context: PluginContext
    ) -> tuple[PluginResult | None, P]:
        """Run ``hook_type``'s handlers on ``payload``; return the result and the payload
        as the handlers left it. Raises :class:`PluginViolationError` on a block."""
        handlers = sorted(
            self.handlers(hook_type),
            key=lambda h: (MODE_ORDER.index(h.mode), h.priority, h.order),
        )
        if not handlers:
            return None, payload
        payload = payload.model_copy(update={"hook": str(hook_type)})
        modified = False
        for mode in MODE_ORDER:
            group = [h for h in handlers if h.mode is mode]
            if not group:
                continue
            if mode is PluginMode.FIRE_AND_FORGET:
                self._start_background(group, payload.model_copy(), context)
            elif mode is PluginMode.CONCURRENT:
                results = await asyncio.gather(*(self._call(h, payload, context) for h in group))
                for handler, result in zip(group, results, strict=True):
                    if result is not None and not result.continue_processing:
                        raise _violation_error(hook_type, handler, result)
            else:
                for handler in group:
                    result = await self._call(handler, payload, context)
                    if result is None:
                        continue
                    if not result.continue_processing:
                        if mode is PluginMode.SEQUENTIAL:
                            raise _violation_error(hook_type, handler, result)
                        _log_ignored_block(hook_type, handler, result, mode)
                        continue
                    if mode is not PluginMode.AUDIT and result.modified_payload is not None:
                        changed = _apply_policy(str(hook_type), payload, result.modified_payload)
                        modified = modified or changed is not payload
                        payload = changed
        return PluginResult(modified_payload=payload if modified else None), payload

    async def _call(
        self, handler: Handler, payload: Any, context: PluginContext
    ) -> PluginResult | None:
        """One handler; its failure or timeout is logged and counts as "carry on"."""
        try:
            # In this task (not wait_for's own on 3.11, which could drop a cancel that
            # arrived as the handler returned: a client's leaving went unnoticed).
            async with asyncio.timeout(self.timeout):
                result = await handler.fn(payload, context)
        except Exception as exc:
            logger.warning(
                "plugin %s failed at %s (ignored): %r", handler.name, handler.hook_type, exc
            )
            return None
        if result is not None and not isinstance(result, PluginResult):
            logger.warning(
                "plugin %s returned %s, not a PluginResult or None (ignored)",
                handler.name,
                type(result).__name__,
            )
            return None
        return result

    def _start_background(self, group: list[Handler], payload: Any, context: PluginContext) -> None:
        for handler in group:
            task = asyncio.ensure_future(self._call(handler, payload, context))
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    async def drain_background(self) -> None:
        """Wait for the fire-and-forget handlers started on this event loop."""
        loop = asyncio.get_running_loop()
        pending = [t for t in list(self._background) if t.get_loop() is loop]
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)

    @contextlib.contextmanager
    def active(self) -> Iterator[PluginManager]:
        """Make this the manager ``register()`` and the hook points reach, in the block."""
        token = _current.set(self)
        try:
            yield self
        finally:
            _current.reset(token)


def _violation_error(hook_type: str, handler: Handler, result: PluginResult) -> Exception:
    violation = result.violation
    reason = violation.reason if violation is not None else "blocked"
    code = violation.code if violation is not None else ""
    name = (violation.plugin_name if violation is not None else "") or handler.name
    logger.warning("plugin violation at %s: [%s] %s (plugin=%s)", hook_type, code, reason, name)
    return PluginViolationError(str(hook_type), reason, code, name)


def _log_ignored_block(
    hook_type: str, handler: Handler, result: PluginResult, mode: PluginMode
) -> None:
    reason = result.violation.reason if result.violation is not None else "blocked"
    logger.warning(
        "plugin %s (%s mode) would block %s: %s (not enforced)",
        handler.name,
        mode.value,
        hook_type,
        reason,
    )


def _apply_policy(hook_type: str, payload: P, proposed: Any) -> P:
    """``payload`` with the changes ``proposed`` makes to the hook's writable fields."""
    if not isinstance(proposed, BaseModel):
        return payload
    writable = writable_fields(hook_type)
    updates = {}
    for name in type(payload).model_fields:
        if not hasattr(proposed, name):
            continue
        new = getattr(proposed, name)
        if new is getattr(payload, name) or new == getattr(payload, name):
            continue
        if name in writable:
            updates[name] = new
        else:
            logger.debug("change to %s.%s dropped: not writable", hook_type, name)
    return payload.model_copy(update=updates) if updates else payload


# The process's manager, current wherever no app made its own current (see above).
_default = PluginManager()
_current: contextvars.ContextVar[PluginManager | None] = contextvars.ContextVar(
    "mellea_plugin_manager", default=None
)


def get_plugin_manager() -> PluginManager:
    """The current plugin manager: the serving app's, else the process's."""
    return _current.get() or _default


ensure_plugin_manager = get_plugin_manager  # upstream's name; ours always exists


def has_plugins(hook_type: HookType | str | None = None) -> bool:
    """Whether any handler is registered (for ``hook_type``, when given); the hook
    points check this before building a payload."""
    manager = get_plugin_manager()
    if hook_type is None:
        return not manager.is_empty()
    return manager.has_hooks_for(hook_type)


async def invoke_hook(
    hook_type: HookType | str,
    payload: P,
    *,
    backend: Any = None,
    **context_fields: Any,
) -> tuple[PluginResult | None, P]:
    """Run ``hook_type``'s handlers on ``payload``: ``(result, payload as changed)``.

    ``(None, payload)`` when nothing is registered for the hook.

    Raises:
        PluginViolationError: a handler blocked the call.
    """
    manager = get_plugin_manager()
    if not manager.has_hooks_for(str(hook_type)):
        return None, payload
    context = PluginContext(build_global_context(backend=backend, **context_fields))
    return await manager.invoke(str(hook_type), payload, context)


def deregister_session_plugins(session_id: str) -> None:
    """Unregister what the session (or ``with`` block) ``session_id`` registered."""
    get_plugin_manager().remove_scope(session_id)


def is_internal_tool(tool_name: str) -> bool:
    """Whether ``tool_name`` is a framework control-flow tool (``final_answer``)."""
    return tool_name in INTERNAL_TOOL_NAMES


async def drain_background_tasks() -> None:
    """Wait for the current manager's fire-and-forget handlers (for tests)."""
    await get_plugin_manager().drain_background()


async def shutdown_plugins() -> None:
    """Unregister every plugin of the current manager."""
    manager = get_plugin_manager()
    await manager.drain_background()
    manager.clear()

"""Registering plugins, and the helpers a handler returns (``block``, ``modify``)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from mellea.plugins.base import PluginMeta, PluginResult, PluginViolation, ScopedActivation
from mellea.plugins.decorators import HookMeta
from mellea.plugins.manager import PluginManager, get_plugin_manager
from mellea.plugins.pluginset import PluginSet

logger = logging.getLogger(__name__)

DEFAULT_PRIORITY = 50
Item = Callable | Any | PluginSet


def modify(payload: Any, **field_updates: Any) -> PluginResult:
    """Carry on with a copy of ``payload`` that has ``field_updates`` (only the hook's
    writable fields are taken; others are dropped)."""
    return PluginResult(
        continue_processing=True, modified_payload=payload.model_copy(update=field_updates)
    )


def block(
    reason: str,
    *,
    code: str = "",
    description: str = "",
    details: dict[str, Any] | None = None,
) -> PluginResult:
    """Stop the call: the caller gets a :class:`~mellea.plugins.PluginViolationError`
    (in a mode that may block)."""
    return PluginResult(
        continue_processing=False,
        violation=PluginViolation(
            reason=reason, description=description or reason, code=code, details=details or {}
        ),
    )


def register(items: Item | list[Item], *, session_id: str | None = None) -> None:
    """Register hook functions, ``Plugin`` instances and ``PluginSet`` s.

    Without ``session_id`` they fire for every session of the app until
    ``unregister``; with it they are removed when that session is cleaned up.

    Raises:
        TypeError: an item is none of those.
    """
    manager = get_plugin_manager()
    for item in items if isinstance(items, list) else [items]:
        if isinstance(item, PluginSet):
            for member, priority in item.flatten():
                _register_one(manager, member, session_id, priority)
        else:
            _register_one(manager, item, session_id, None)


def unregister(items: Item | list[Item]) -> None:
    """Unregister globally registered items (the same kinds ``register`` takes);
    an item that is not registered is ignored."""
    manager = get_plugin_manager()
    for item in items if isinstance(items, list) else [items]:
        members = [m for m, _ in item.flatten()] if isinstance(item, PluginSet) else [item]
        for member in members:
            for name, *_ in _handlers_of(member, None):
                manager.remove(name, None)


def _register_one(
    manager: PluginManager, item: Any, scope: str | None, priority_override: int | None
) -> None:
    found = _handlers_of(item, priority_override)
    if not found and getattr(type(item), "_mellea_plugin_meta", None) is not None:
        logger.warning("plugin %r has no @hook methods; nothing registered", item)
    for name, hook_type, fn, mode, priority in found:
        manager.add(name, hook_type, fn, mode=mode, priority=priority, scope=scope)


def _handlers_of(item: Any, priority_override: int | None) -> list[tuple]:
    """``(name, hook_type, fn, mode, priority)`` for each handler ``item`` holds."""
    meta: HookMeta | None = getattr(item, "_mellea_hook_meta", None)
    if meta is not None and not isinstance(item, type):
        priority = _first(priority_override, meta.priority, DEFAULT_PRIORITY)
        name = f"{item.__module__}.{item.__qualname__}"
        return [(name, str(meta.hook_type), item, meta.mode, priority)]
    plugin_meta: PluginMeta | None = getattr(type(item), "_mellea_plugin_meta", None)
    from mellea.plugins.base import Plugin

    if plugin_meta is None and not isinstance(item, Plugin):
        raise TypeError(
            f"cannot register {item!r}: expected a @hook function, a Plugin instance or a PluginSet"
        )
    plugin_name = plugin_meta.name if plugin_meta else type(item).__name__
    class_priority = plugin_meta.priority if plugin_meta else DEFAULT_PRIORITY
    methods = []
    for attr in dir(item):
        if attr.startswith("_"):
            continue
        method = getattr(item, attr, None)
        hook_meta: HookMeta | None = getattr(method, "_mellea_hook_meta", None)
        if hook_meta is not None:
            methods.append((attr, method, hook_meta))
    hook_types = [str(meta.hook_type) for _, _, meta in methods]
    found = []
    for attr, method, hook_meta in methods:
        priority = _first(priority_override, hook_meta.priority, class_priority)
        # Upstream names a method's handler "<plugin>.<hook>"; two methods on one hook
        # would share that name, so theirs also carry the method's name.
        name = f"{plugin_name}.{hook_meta.hook_type!s}"
        if hook_types.count(str(hook_meta.hook_type)) > 1:
            name = f"{name}.{attr}"
        found.append((name, str(hook_meta.hook_type), method, hook_meta.mode, priority))
    return found


def _first(*values: int | None) -> int:
    return next(v for v in values if v is not None)


class _PluginScope(ScopedActivation):
    """What ``plugin_scope`` returns: registers its items for a ``with`` block."""

    def __init__(self, items: list[Item]) -> None:
        self._items = items

    def _scope_items(self) -> list[Item]:
        return self._items


def plugin_scope(*items: Item | list[Item]) -> _PluginScope:
    """A context manager (``with`` or ``async with``) that registers ``items`` (given
    one by one or as one list) on entry and unregisters them on exit, even on error."""
    if len(items) == 1 and isinstance(items[0], list):
        return _PluginScope(list(items[0]))
    return _PluginScope(list(items))

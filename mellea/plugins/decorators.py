"""``@hook``: mark an async function or method as a hook handler."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass

from mellea.plugins.types import PluginMode


@dataclass(frozen=True)
class HookMeta:
    """What ``@hook`` records on a handler: its hook point, mode and priority."""

    hook_type: str
    mode: PluginMode = PluginMode.SEQUENTIAL
    priority: int | None = None


def hook(
    hook_type: str,
    *,
    mode: PluginMode = PluginMode.SEQUENTIAL,
    priority: int | None = None,
) -> Callable:
    """Make an ``async def`` function (or ``Plugin`` method) a handler for ``hook_type``.

    The handler is called as ``await handler(payload, ctx)`` and returns ``None``
    (carry on) or a :class:`~mellea.plugins.PluginResult` (see ``block`` and
    ``modify``). Lower ``priority`` runs first; unset, a method takes its plugin
    class's priority and a function 50. Registering is separate (``register``,
    ``plugin_scope``, ``start_session(plugins=...)``).

    Raises:
        TypeError: the decorated function is not ``async def``.
    """

    def decorator(fn: Callable) -> Callable:
        if not inspect.iscoroutinefunction(fn):
            raise TypeError(
                f"a @hook handler must be defined with 'async def'; {fn.__qualname__!r} is not"
            )
        fn._mellea_hook_meta = HookMeta(hook_type=hook_type, mode=mode, priority=priority)  # type: ignore[attr-defined]
        return fn

    return decorator

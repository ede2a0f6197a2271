"""PluginSet: a named group of hooks and plugins, registered or scoped together."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mellea.plugins.base import ScopedActivation


class PluginSet(ScopedActivation):
    """A named group of ``@hook`` functions, ``Plugin`` instances and other sets.

    A set registers nothing itself: pass it to ``register``, ``plugin_scope`` or
    ``start_session(plugins=...)``, or use it as a context manager. ``priority``, when
    given, replaces the priority of every item in it, nested sets' items included.
    """

    def __init__(
        self,
        name: str,
        items: list[Callable | Any | PluginSet],
        *,
        priority: int | None = None,
    ):
        self.name = name
        self.items = items
        self.priority = priority
        self._scope_id: str | None = None

    def flatten(self) -> list[tuple[Callable | Any, int | None]]:
        """Every item with the priority this set (or a nested one) imposes on it."""
        result: list[tuple[Callable | Any, int | None]] = []
        for item in self.items:
            if isinstance(item, PluginSet):
                for sub_item, sub_priority in item.flatten():
                    imposed = self.priority if self.priority is not None else sub_priority
                    result.append((sub_item, imposed))
            else:
                result.append((item, self.priority))
        return result

    def _scope_name(self) -> str:
        return f"PluginSet {self.name}"

    def __repr__(self) -> str:
        return f"PluginSet({self.name!r}, {len(self.items)} items)"

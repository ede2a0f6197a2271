"""Upstream's cache objects (``Cache``, ``SimpleLRUCache``).

Upstream's Hugging Face backend keeps KV-cache state in one; our engine caches
prompt prefixes itself, so here they are plain, working containers a program may use
(and pass as ``LocalHFBackend(cache=...)``, which ignores it).
"""

from __future__ import annotations

import abc
from collections import OrderedDict
from collections.abc import Callable
from typing import Any


class Cache(abc.ABC):
    """A key-value store with a bounded size."""

    @abc.abstractmethod
    def put(self, key: str | int, value: Any) -> None:
        """Store ``value`` under ``key`` (may evict another entry)."""

    @abc.abstractmethod
    def get(self, key: str | int) -> Any | None:
        """The value under ``key``, or ``None``."""

    @abc.abstractmethod
    def current_size(self) -> int:
        """How many entries are held."""


class SimpleLRUCache(Cache):
    """Holds up to ``capacity`` entries and evicts the least recently used one,
    passing it to ``on_evict`` when given. A capacity of 0 or less stores nothing."""

    def __init__(self, capacity: int, on_evict: Callable[[Any], None] | None = None) -> None:
        self.capacity = capacity
        self.cache: OrderedDict[str | int, Any] = OrderedDict()
        self.on_evict = on_evict

    def current_size(self) -> int:
        """How many entries are held."""
        return len(self.cache)

    def get(self, key: str | int) -> Any | None:
        """The value under ``key`` (now the most recently used), or ``None``."""
        if key not in self.cache:
            return None
        self.cache.move_to_end(key)
        return self.cache[key]

    def put(self, key: str | int, value: Any) -> None:
        """Store ``value``; a new key in a full cache evicts the least recently used."""
        if self.capacity <= 0:
            return
        if key in self.cache:
            self.cache.move_to_end(key)
        elif len(self.cache) >= self.capacity:
            _, evicted = self.cache.popitem(last=False)
            if self.on_evict is not None:
                self.on_evict(evicted)
        self.cache[key] = value


__all__ = ["Cache", "SimpleLRUCache"]

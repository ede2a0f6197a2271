"""The second argument a hook handler gets: read-only facts about the call."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class GlobalContext:
    """Facts every hook may use; ``state["backend_name"]`` is the backend's model id."""

    request_id: str = ""
    state: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class PluginContext:
    """``ctx`` in ``async def handler(payload, ctx)``."""

    global_context: GlobalContext = field(default_factory=GlobalContext)
    state: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)


def build_global_context(*, backend: Any = None, **extra_fields: Any) -> GlobalContext:
    """The global context for one hook call: the backend's model id and ``extra_fields``."""
    state: dict[str, Any] = {}
    if backend is not None:
        state["backend_name"] = str(getattr(backend, "model_id", None) or "unknown")
    state.update(extra_fields)
    return GlobalContext(state=state)

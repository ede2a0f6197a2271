"""The plugin system's value types: results, violations, payloads, the ``Plugin`` class."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from types import TracebackType
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


@dataclass(frozen=True)
class PluginMeta:
    """A ``Plugin`` subclass's name and default priority (lower runs first)."""

    name: str
    priority: int = 50


class PluginViolation(BaseModel):
    """Why a plugin blocked a call."""

    reason: str
    description: str = ""
    code: str = ""
    details: dict[str, Any] = Field(default_factory=dict)
    plugin_name: str = ""


class PluginResult(BaseModel):
    """What a hook handler returns: carry on (maybe with a changed payload) or block.

    ``continue_processing=False`` with a ``violation`` blocks the call;
    ``modified_payload`` proposes a changed copy of the payload (only the hook's
    writable fields are taken).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    continue_processing: bool = True
    modified_payload: Any = None
    violation: PluginViolation | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)


class PluginViolationError(Exception):
    """A plugin blocked the call at ``hook_type``; ``reason``, ``code`` and
    ``plugin_name`` say why and who."""

    def __init__(self, hook_type: str, reason: str, code: str = "", plugin_name: str = ""):
        self.hook_type = hook_type
        self.reason = reason
        self.code = code
        self.plugin_name = plugin_name
        detail = f"[{code}] " if code else ""
        super().__init__(f"Plugin blocked {hook_type}: {detail}{reason}")


class MelleaBasePayload(BaseModel):
    """Fields every hook payload has. Payloads are frozen: a plugin proposes a change
    with ``payload.model_copy(update={...})`` (or ``modify``)."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    session_id: str | None = None
    request_id: str = ""
    timestamp: datetime = Field(default_factory=lambda: datetime.now(UTC))
    hook: str = ""
    user_metadata: dict[str, Any] = Field(default_factory=dict)


class ScopedActivation:
    """Registers ``self`` for the length of a ``with`` block (sync or async)."""

    _scope_id: str | None = None

    def _scope_name(self) -> str:
        return type(self).__name__

    def _scope_items(self) -> Any:
        """What the block registers: ``self`` unless a subclass says otherwise."""
        return self

    def __enter__(self) -> Any:
        """Register for the block; one instance may be active in one block at a time."""
        if self._scope_id is not None:
            raise RuntimeError(
                f"{self._scope_name()!r} is already active in a with block; "
                "use a new instance to activate it again"
            )
        from mellea.plugins.registry import register

        scope_id = str(uuid.uuid4())
        register(self._scope_items(), session_id=scope_id)
        self._scope_id = scope_id
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None:
        """Unregister what the block registered."""
        scope_id, self._scope_id = self._scope_id, None
        if scope_id is not None:
            from mellea.plugins.manager import deregister_session_plugins

            deregister_session_plugins(scope_id)

    async def __aenter__(self) -> Any:
        """``async with``: as ``with``."""
        return self.__enter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None:
        """``async with``: as ``with``."""
        self.__exit__(exc_type, exc_val, exc_tb)


class Plugin(ScopedActivation):
    """Base class for a plugin whose ``@hook`` methods share state.

    ``class Redactor(Plugin, name="redactor", priority=5): ...``; register an
    instance (``register``, ``start_session(plugins=...)``) or use it as a context
    manager to activate it for a block.
    """

    def __init_subclass__(cls, *, name: str = "", priority: int = 50, **kwargs: Any) -> None:
        """Record ``name`` and ``priority`` (the default for the class's hooks)."""
        super().__init_subclass__(**kwargs)
        if name:
            cls._mellea_plugin_meta = PluginMeta(name=name, priority=priority)  # type: ignore[attr-defined]

    def _scope_name(self) -> str:
        meta = getattr(type(self), "_mellea_plugin_meta", None)
        return meta.name if meta else type(self).__name__

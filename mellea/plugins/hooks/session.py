"""Payloads of the session hooks."""

from __future__ import annotations

from typing import Any

from mellea.plugins.base import MelleaBasePayload


class SessionPreInitPayload(MelleaBasePayload):
    """``session_pre_init``: ``start_session`` was called, no backend built yet.
    Writable: ``model_id``, ``model_options``."""

    backend_name: str
    model_id: str
    model_options: dict[str, Any] | None = None
    context_type: str = "SimpleContext"


class SessionPostInitPayload(MelleaBasePayload):
    """``session_post_init``: the session is ready."""

    session_id: str = ""
    model_id: str = ""
    context: Any = None


class SessionResetPayload(MelleaBasePayload):
    """``session_reset``: the session's context is about to be replaced by an empty one."""

    previous_context: Any = None


class SessionCleanupPayload(MelleaBasePayload):
    """``session_cleanup``: the session is being cleaned up (its ``with`` block ended).
    ``interaction_count``: turns committed to the context since the last reset;
    ``exception``: what ended the ``with`` block, if anything."""

    context: Any = None
    interaction_count: int = 0
    exception: BaseException | None = None

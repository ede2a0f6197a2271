"""Short one-line previews for the debug logs."""

from __future__ import annotations

from typing import Any

PREVIEW_CHARS = 100


def preview(value: Any) -> str:
    """``value`` as one line of at most :data:`PREVIEW_CHARS` characters."""
    text = " ".join(str(value).split())
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 3] + "..."


def describe(requirement: Any) -> str:
    """A requirement's description (or its text)."""
    return str(getattr(requirement, "description", None) or requirement)


def backend_name(ctx: Any) -> str:
    """The model id the hook context carries, or ``unknown``."""
    state = getattr(getattr(ctx, "global_context", None), "state", None) or {}
    return str(state.get("backend_name", "unknown"))

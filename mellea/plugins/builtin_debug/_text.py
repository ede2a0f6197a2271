"""Short one-line previews for the debug logs, and the lines logged per verdict."""

from __future__ import annotations

import logging
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


def passed(result: Any) -> bool:
    """Whether a validation result (or a plain truth value) passed."""
    return bool(result.as_bool()) if hasattr(result, "as_bool") else bool(result)


def log_verdict(
    logger: logging.Logger, requirement: Any, result: Any, *, with_score: bool = False
) -> None:
    """One requirement's verdict: a pass at DEBUG; a failure at INFO with its reason
    (unless that is a bare yes/no) and, ``with_score``, its score at DEBUG."""
    if passed(result):
        logger.debug("    pass %s", describe(requirement))
        return
    logger.info("    FAIL %s", describe(requirement))
    reason = getattr(result, "reason", None)
    if reason and reason.strip().lower() not in ("yes", "no"):
        logger.info("       reason: %s", preview(reason))
    score = getattr(result, "score", None) if with_score else None
    if score is not None:
        logger.debug("       score: %.2f", score)

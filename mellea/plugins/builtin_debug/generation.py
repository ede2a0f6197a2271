"""Debug logging of every backend call: the request before, the reply after."""

from __future__ import annotations

import logging
from typing import Any

from mellea.plugins.builtin_debug._text import backend_name, describe, preview
from mellea.plugins.decorators import hook
from mellea.plugins.hooks.generation import GenerationPostCallPayload, GenerationPreCallPayload
from mellea.plugins.types import HookType

logger = logging.getLogger(__name__)


@hook(HookType.GENERATION_PRE_CALL)
async def log_generation_pre_call(payload: GenerationPreCallPayload, ctx: Any) -> None:
    """Log the model, the action about to be sent and its requirements."""
    gen_id = payload.generation_id or "no-id"
    action = payload.action
    shown = preview(action) if action is not None else "(no action)"
    logger.debug("[GEN-PRE-CALL gen_id=%s] model=%s | prompt=%s", gen_id, backend_name(ctx), shown)
    requirements = getattr(action, "requirements", None) or []
    if requirements:
        logger.debug("   requirements (%d):", len(requirements))
        for number, requirement in enumerate(requirements, 1):
            logger.debug("     %d. %s", number, describe(requirement))


@hook(HookType.GENERATION_POST_CALL)
async def log_generation_post_call(payload: GenerationPostCallPayload, ctx: Any) -> None:
    """Log the reply: latency, token counts and the start of the text."""
    output = payload.model_output
    text = getattr(output, "value", None)
    usage = getattr(output, "usage", None) or {}
    tokens = (
        f"({usage.get('prompt_tokens', '?')}+{usage.get('completion_tokens', '?')}"
        f"={usage.get('total_tokens', '?')})"
        if usage
        else "unknown"
    )
    logger.debug(
        "[GEN-POST-CALL gen_id=%s] model=%s | latency=%.0fms | tokens=%s | response=%s",
        payload.generation_id or "no-id",
        backend_name(ctx),
        payload.latency_ms or 0,
        tokens,
        preview(text) if text else "(no value)",
    )

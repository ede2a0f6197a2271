"""Debug logging of requirement checks: what is checked, and each verdict."""

from __future__ import annotations

import logging
from typing import Any

from mellea.plugins.builtin_debug._text import describe, log_verdict
from mellea.plugins.decorators import hook
from mellea.plugins.hooks.validation import ValidationPostCheckPayload, ValidationPreCheckPayload
from mellea.plugins.types import HookType

logger = logging.getLogger(__name__)


@hook(HookType.VALIDATION_PRE_CHECK)
async def log_validation_pre_check(payload: ValidationPreCheckPayload, ctx: Any) -> None:
    """Log the requirements about to be checked."""
    del ctx
    logger.debug("[VALIDATION-PRE-CHECK] %d requirement(s)", len(payload.requirements))
    for number, requirement in enumerate(payload.requirements, 1):
        logger.debug("     %d. [%s] %s", number, type(requirement).__name__, describe(requirement))


@hook(HookType.VALIDATION_POST_CHECK)
async def log_validation_post_check(payload: ValidationPostCheckPayload, ctx: Any) -> None:
    """Log the verdicts; failures (with their reasons) at INFO."""
    del ctx
    if payload.exception is not None:
        logger.info("[VALIDATION-POST-CHECK] ERROR: %r", payload.exception)
        return
    total = payload.passed_count + payload.failed_count
    if payload.all_validations_passed:
        logger.debug("[VALIDATION-POST-CHECK] all %d passed", total)
    else:
        logger.debug(
            "[VALIDATION-POST-CHECK] %d/%d passed",
            payload.passed_count,
            total or len(payload.results),
        )
    for requirement, result in zip(payload.requirements, payload.results, strict=False):
        log_verdict(logger, requirement, result, with_score=True)

"""Debug logging of a sampling strategy's loop: start, each attempt, repairs, the end."""

from __future__ import annotations

import logging
from typing import Any

from mellea.plugins.builtin_debug._text import describe, log_verdict, passed
from mellea.plugins.decorators import hook
from mellea.plugins.hooks.sampling import (
    SamplingIterationPayload,
    SamplingLoopEndPayload,
    SamplingLoopStartPayload,
    SamplingRepairPayload,
)
from mellea.plugins.types import HookType

logger = logging.getLogger(__name__)


@hook(HookType.SAMPLING_LOOP_START)
async def log_sampling_loop_start(payload: SamplingLoopStartPayload, ctx: Any) -> None:
    """Log the strategy, its budget and the requirements."""
    del ctx
    logger.debug(
        "[SAMPLING-START] strategy=%s | loop_budget=%d | requirements=%d",
        payload.strategy_name,
        payload.loop_budget,
        len(payload.requirements),
    )
    for number, requirement in enumerate(payload.requirements, 1):
        logger.debug("  %d. %s", number, describe(requirement))


@hook(HookType.SAMPLING_ITERATION)
async def log_sampling_iteration(payload: SamplingIterationPayload, ctx: Any) -> None:
    """Log one attempt's verdicts; a failed requirement (and its reason) at INFO."""
    del ctx
    verdict = "SUCCESS" if payload.all_validations_passed else "FAILED"
    logger.debug(
        "[SAMPLING-ITER %d] %s: %d/%d validations passed",
        payload.iteration,
        verdict,
        payload.valid_count,
        payload.total_count,
    )
    if payload.all_validations_passed:
        return
    for requirement, result in payload.validation_results:
        log_verdict(logger, requirement, result)


@hook(HookType.SAMPLING_REPAIR)
async def log_sampling_repair(payload: SamplingRepairPayload, ctx: Any) -> None:
    """Log that a repair was triggered and which requirements failed."""
    del ctx
    logger.info(
        "[REPAIR] at iteration %d (repair_type=%s)", payload.repair_iteration, payload.repair_type
    )
    for requirement, result in payload.failed_validations:
        if not passed(result):
            logger.info("     failed: %s", describe(requirement))


@hook(HookType.SAMPLING_LOOP_END)
async def log_sampling_loop_end(payload: SamplingLoopEndPayload, ctx: Any) -> None:
    """Log how the loop ended."""
    del ctx
    strategy = payload.strategy_name
    if payload.exception is not None:
        logger.info("[SAMPLING-END] ERROR using %s: %r", strategy, payload.exception)
    elif payload.success:
        logger.info(
            "[SAMPLING-END] SUCCESS in %d iteration(s) using %s", payload.iterations_used, strategy
        )
    else:
        logger.info(
            "[SAMPLING-END] FAILED after %d iteration(s) using %s: %s",
            payload.iterations_used,
            strategy,
            payload.failure_reason or "no attempt passed",
        )

"""Payloads of the sampling hooks (one run of a sampling strategy)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from mellea.plugins.base import MelleaBasePayload


class SamplingLoopStartPayload(MelleaBasePayload):
    """``sampling_loop_start``: a strategy starts. Writable: ``loop_budget``."""

    sampling_id: str = ""
    strategy_name: str = ""
    action: Any = None
    context: Any = None
    requirements: list[Any] = Field(default_factory=list)
    loop_budget: int = 0


class SamplingIterationPayload(MelleaBasePayload):
    """``sampling_iteration``: one attempt was generated and checked (1-based ``iteration``)."""

    sampling_id: str = ""
    strategy_name: str = ""
    iteration: int = 0
    action: Any = None
    result: Any = None
    validation_results: list[tuple[Any, Any]] = Field(default_factory=list)
    all_validations_passed: bool = False
    valid_count: int = 0
    total_count: int = 0


class SamplingRepairPayload(MelleaBasePayload):
    """``sampling_repair``: an attempt failed and the next one is being prepared."""

    sampling_id: str = ""
    repair_type: str = ""
    failed_action: Any = None
    failed_result: Any = None
    failed_validations: list[tuple[Any, Any]] = Field(default_factory=list)
    repair_action: Any = None
    repair_context: Any = None
    repair_iteration: int = 0


class SamplingLoopEndPayload(MelleaBasePayload):
    """``sampling_loop_end``: the strategy finished: success, budget spent, or ``exception``."""

    sampling_id: str = ""
    strategy_name: str = ""
    success: bool = False
    iterations_used: int = 0
    final_result: Any = None
    final_action: Any = None
    final_context: Any = None
    failure_reason: str | None = None
    exception: BaseException | None = None
    all_results: list[Any] = Field(default_factory=list)
    all_validations: list[list[tuple[Any, Any]]] = Field(default_factory=list)

"""Sampling strategies: how many attempts to make and which one to keep."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable

from mellea.core.requirement import Requirement, ValidationResult
from mellea.core.sampling import SamplingResult
from mellea.core.thunk import ModelOutputThunk

Generate = Callable[[int], Awaitable[ModelOutputThunk]]
Validate = Callable[
    [ModelOutputThunk, list[Requirement]], Awaitable[list[tuple[Requirement, ValidationResult]]]
]


class SamplingStrategy(ABC):
    """Decides how to turn one instruction into a validated result."""

    def __init__(self, *, loop_budget: int = 1, requirements: list[Requirement] | None = None):
        if loop_budget < 1:
            raise ValueError("loop_budget must be at least 1")
        self.loop_budget = loop_budget
        self.requirements = requirements

    @abstractmethod
    async def asample(
        self, generate: Generate, validate: Validate, requirements: list[Requirement]
    ) -> SamplingResult:
        """Run the strategy. ``generate(attempt)`` makes one computed generation."""


class RejectionSamplingStrategy(SamplingStrategy):
    """Generate, check every requirement, and retry up to ``loop_budget`` times.

    The first attempt that passes all requirements wins. If none passes, the
    result is the first attempt and ``success`` is ``False``.
    """

    async def asample(
        self, generate: Generate, validate: Validate, requirements: list[Requirement]
    ) -> SamplingResult:
        """Try up to ``loop_budget`` generations; keep the first that validates."""
        reqs = self.requirements if self.requirements is not None else requirements
        generations: list[ModelOutputThunk] = []
        validations: list[list[tuple[Requirement, ValidationResult]]] = []
        for attempt in range(self.loop_budget):
            thunk = await generate(attempt)
            await thunk.avalue()
            checks = await validate(thunk, reqs) if reqs else []
            generations.append(thunk)
            validations.append(checks)
            if all(result.as_bool() for _, result in checks):
                return SamplingResult(attempt, True, generations, validations)
        return SamplingResult(0, False, generations, validations)

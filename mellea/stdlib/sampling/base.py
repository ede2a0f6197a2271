"""Sampling strategies: how many attempts to make and which one to keep."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from mellea.core.requirement import Requirement, ValidationResult
from mellea.core.sampling import SamplingResult
from mellea.core.thunk import ModelOutputThunk

Checks = list[tuple[Requirement, ValidationResult]]
Validate = Callable[[ModelOutputThunk, list[Requirement]], Awaitable[Checks]]


@dataclass
class Retry:
    """How a retry's messages differ from the first attempt's.

    ``append`` is added to the last (instruction) message; ``turns`` follow it (the
    failed answer and a request to fix it, for a multi-turn repair).
    """

    append: str | None = None
    turns: list[dict[str, Any]] = field(default_factory=list)

    def apply(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The messages for the retry."""
        messages = [dict(m) for m in messages]
        if self.append:
            messages[-1]["content"] = f"{messages[-1].get('content') or ''}\n\n{self.append}"
        return messages + [dict(t) for t in self.turns]


class Generate(Protocol):
    """Makes one generation: ``await generate(attempt, retry=None)``."""

    def __call__(self, attempt: int, retry: Retry | None = None) -> Awaitable[ModelOutputThunk]:
        """Start attempt ``attempt``, changed as ``retry`` says."""
        ...


def failed_reasons(checks: Checks) -> list[str]:
    """One line per failed requirement: its validator's reason, else its description
    (a model judge's answer, a bare "no", would not help the retry)."""
    return [
        f"* {result.reason if result.reason and result.thunk is None else requirement.description}"
        for requirement, result in checks
        if not result.as_bool()
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
        retry: Retry | None = None
        for attempt in range(self.loop_budget):
            thunk = await generate(attempt, retry)
            await thunk.avalue()
            checks = await validate(thunk, reqs) if reqs else []
            generations.append(thunk)
            validations.append(checks)
            if all(result.as_bool() for _, result in checks):
                return SamplingResult(attempt, True, generations, validations)
            retry = self.repair(thunk, checks)
        return SamplingResult(0, False, generations, validations)

    def repair(self, failed: ModelOutputThunk, checks: Checks) -> Retry | None:
        """How the next attempt changes after ``failed``; rejection sampling just retries."""
        del failed, checks
        return None


class RepairTemplateStrategy(RejectionSamplingStrategy):
    """Rejection sampling whose retries list the requirements that failed before."""

    def repair(self, failed: ModelOutputThunk, checks: Checks) -> Retry | None:
        """Append the failed requirements to the instruction."""
        del failed
        lines = failed_reasons(checks)
        return Retry(append="The following requirements failed before:\n" + "\n".join(lines))


class MultiTurnStrategy(RejectionSamplingStrategy):
    """Rejection sampling whose retries continue the conversation: the failed answer,
    then a user turn naming the requirements it missed."""

    def repair(self, failed: ModelOutputThunk, checks: Checks) -> Retry | None:
        """Show the failed answer and ask for a fix."""
        request = (
            "The following requirements have not been met:\n"
            + "\n".join(failed_reasons(checks))
            + "\nPlease try again to fulfill the requirements."
        )
        return Retry(
            turns=[
                {"role": "assistant", "content": failed.value or ""},
                {"role": "user", "content": request},
            ]
        )

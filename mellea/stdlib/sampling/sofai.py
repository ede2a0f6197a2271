"""SOFAI ("slow and fast AI"): a fast model tries and repairs with targeted feedback;
if it has not succeeded within ``loop_budget`` attempts (or stops improving), a slow
model gets one attempt."""

from __future__ import annotations

from typing import Any, Literal

from mellea.core.backend import Backend
from mellea.core.requirement import Requirement, ValidationResult
from mellea.core.sampling import SamplingResult
from mellea.core.thunk import ModelOutputThunk
from mellea.stdlib.sampling.base import Checks, Generate, SamplingStrategy, Validate

S2Mode = Literal["fresh_start", "continue_chat", "best_attempt"]
Feedback = Literal["simple", "first_error", "all_errors"]


class SOFAISamplingStrategy(SamplingStrategy):
    """S1 (``s1_solver_backend``) in a repair loop, then S2 (``s2_solver_backend``) once.

    ``s2_solver_mode``: ``fresh_start`` (S2 sees the original request),
    ``continue_chat`` (S2 sees the whole S1 conversation and its feedback) or
    ``best_attempt`` (S2 sees the S1 attempt that passed most checks and what it
    missed). ``feedback_strategy``: ``simple`` (every failed requirement's
    description), ``first_error`` (only the first failure, with its reason) or
    ``all_errors`` (every failure with its reason). ``judge_backend`` judges the
    requirements without a validation function (default: the session's backend).
    S1 stops early when an attempt fails exactly as the one before did (the same
    requirements, reasons and scores).
    """

    samples_without_requirements = True

    def __init__(
        self,
        s1_solver_backend: Backend,
        s2_solver_backend: Backend,
        s2_solver_mode: S2Mode = "fresh_start",
        *,
        loop_budget: int = 3,
        judge_backend: Backend | None = None,
        feedback_strategy: Feedback = "simple",
    ) -> None:
        if loop_budget <= 0:
            raise ValueError("Loop budget must be at least 1.")
        for name, value in (
            ("s1_solver_backend", s1_solver_backend),
            ("s2_solver_backend", s2_solver_backend),
        ):
            if not isinstance(value, Backend):
                raise TypeError(f"{name} must be a Backend, got {type(value).__name__}")
        if judge_backend is not None and not isinstance(judge_backend, Backend):
            raise TypeError(
                f"judge_backend must be a Backend or None, got {type(judge_backend).__name__}"
            )
        super().__init__(loop_budget=loop_budget)
        self.s1_solver_backend = s1_solver_backend
        self.s2_solver_backend = s2_solver_backend
        self.s2_solver_mode = s2_solver_mode
        self.judge_backend = judge_backend
        self.feedback_strategy = feedback_strategy

    def feedback(self, checks: Checks) -> str:
        """The repair message for a failed attempt."""
        failed = [(r, v) for r, v in checks if not v.as_bool()]
        if self.feedback_strategy == "first_error":
            failed = failed[:1]
        lines = []
        for requirement, result in failed:
            if self.feedback_strategy == "simple" or not result.reason:
                lines.append(f"* {requirement.description or result.reason}")
            else:
                lines.append(f"* {requirement.description}: {result.reason}")
        return "The previous attempt failed. Please fix the following issues:\n" + "\n".join(lines)

    async def _check(
        self,
        thunk: ModelOutputThunk,
        validate: Validate,
        reqs: list[Requirement],
        messages: list[dict[str, Any]],
    ) -> Checks:
        if self.judge_backend is None:
            return await validate(thunk, reqs)
        from mellea.stdlib.components.chat import Message
        from mellea.stdlib.context import SimpleContext

        ctx = (
            SimpleContext().add(Message("user", str(messages[-1].get("content") or ""))).add(thunk)
        )
        checks: list[tuple[Requirement, ValidationResult]] = []
        for r in reqs:
            checks.append((r, await r.validate(self.judge_backend, ctx)))
        return checks

    async def asample(
        self, generate: Generate, validate: Validate, requirements: list[Requirement]
    ) -> SamplingResult:
        """Run S1's repair loop, then S2 if needed."""
        messages: list[dict[str, Any]] = list(getattr(generate, "messages", None) or [])
        options: dict[str, Any] = dict(getattr(generate, "options", None) or {})
        fmt = getattr(generate, "format", None)
        if not messages:
            raise ValueError("SOFAISamplingStrategy needs a session request to re-send")
        reqs = requirements
        generations: list[ModelOutputThunk] = []
        validations: list[Checks] = []
        conversation = list(messages)
        previous_failures: set[tuple[Any, Any, Any]] | None = None

        async def attempt(backend: Any, prompt: list[dict[str, Any]]) -> Checks:
            """One answer from ``backend``, checked; both kept."""
            thunk = await backend.generate(prompt, model_options=options, format=fmt)
            await thunk.avalue()
            checks = await self._check(thunk, validate, reqs, messages)
            generations.append(thunk)
            validations.append(checks)
            return checks

        for _ in range(self.loop_budget):
            checks = await attempt(self.s1_solver_backend, conversation)
            if all(v.as_bool() for _, v in checks):
                return SamplingResult(len(generations) - 1, True, generations, validations)
            failures = {(r.description, v.reason, v.score) for r, v in checks if not v.as_bool()}
            conversation += [
                {"role": "assistant", "content": generations[-1].value or ""},
                {"role": "user", "content": self.feedback(checks)},
            ]
            if failures == previous_failures:
                break  # no change since the attempt before: escalate now
            previous_failures = failures
        if self.s2_solver_mode == "continue_chat":
            s2_messages = conversation
        elif self.s2_solver_mode == "best_attempt":
            best = max(
                range(len(validations)),
                key=lambda i: (sum(v.as_bool() for _, v in validations[i]), i),
            )
            s2_messages = [
                *messages,
                {"role": "assistant", "content": generations[best].value or ""},
                {"role": "user", "content": self.feedback(validations[best])},
            ]
        else:
            s2_messages = list(messages)
        checks = await attempt(self.s2_solver_backend, s2_messages)
        success = all(v.as_bool() for _, v in checks)
        return SamplingResult(len(generations) - 1, success, generations, validations)


__all__ = ["SOFAISamplingStrategy"]

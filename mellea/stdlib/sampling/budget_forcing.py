"""Budget forcing: give a reasoning model a token budget for its thinking, push it to
think more (``think_more_suffix``) while budget remains, then ask for the answer.

Upstream continues a raw prompt; our backends take chat messages, so each
continuation is sent as the conversation plus an assistant turn holding the text so
far, and the model's next turn carries on from it. Each attempt is then checked as
in rejection sampling.
"""

from __future__ import annotations

from typing import Any

from mellea.core.model_options import ModelOption
from mellea.core.requirement import Requirement
from mellea.core.sampling import SamplingResult
from mellea.core.thunk import ModelOutputThunk
from mellea.stdlib.sampling.base import Generate, RejectionSamplingStrategy, Retry, Validate

MIN_STEP_CHARS = 10  # a thinking step shorter than this ends the forcing


class BudgetForcingSamplingStrategy(RejectionSamplingStrategy):
    """Rejection sampling whose every attempt is a budget-forced think-then-answer."""

    samples_without_requirements = True

    def __init__(
        self,
        *,
        think_max_tokens: int | None = 4096,
        answer_max_tokens: int | None = None,
        start_think_token: str | None = "<think>",
        end_think_token: str | None = "</think>",
        begin_response_token: str | None = "",
        end_response_token: str = "",
        think_more_suffix: str | None = "",
        answer_suffix: str | None = "",
        loop_budget: int = 1,
        requirements: list[Requirement] | None,
    ) -> None:
        super().__init__(loop_budget=loop_budget, requirements=requirements)
        self.think_max_tokens = think_max_tokens
        self.answer_max_tokens = answer_max_tokens
        self.start_think_token = start_think_token
        self.end_think_token = end_think_token
        self.begin_response_token = begin_response_token
        self.end_response_token = end_response_token
        self.think_more_suffix = think_more_suffix
        self.answer_suffix = answer_suffix

    async def _call(
        self, backend: Any, messages: list[dict[str, Any]], options: dict[str, Any], so_far: str
    ) -> tuple[str, dict[str, Any]]:
        sent = list(messages)
        if so_far:
            sent.append({"role": "assistant", "content": so_far})
        thunk = await backend.generate(sent, model_options=options)
        text = await thunk.avalue()
        return text, thunk.usage or {}

    async def think_budget_forcing(
        self, backend: Any, messages: list[dict[str, Any]], options: dict[str, Any]
    ) -> ModelOutputThunk:
        """One budget-forced generation: thinking within the budget, then the answer."""
        prefix = self.start_think_token or ""
        thinking = ""
        used = 0
        prompt_tokens: int | None = None
        budget = self.think_max_tokens or 0
        while budget - used > 0:
            opts = {**options, ModelOption.MAX_NEW_TOKENS: budget - used}
            if self.end_think_token:
                opts[ModelOption.STOP_SEQUENCES] = [self.end_think_token]
            step, usage = await self._call(backend, messages, opts, prefix + thinking)
            prompt_tokens = (
                prompt_tokens if prompt_tokens is not None else usage.get("prompt_tokens")
            )
            used += usage.get("completion_tokens") or max(1, len(step) // 4)
            if self.end_think_token:
                step = step.split(self.end_think_token)[0]
            if (
                not self.think_more_suffix
                or budget - used <= 0
                or len(step.strip()) <= MIN_STEP_CHARS
            ):
                thinking += step
                break
            thinking += f"{step} {self.think_more_suffix}"
        text = prefix + thinking
        if self.answer_suffix is not None:
            closing = "".join(
                t
                for t in (
                    f" {self.end_think_token}" if self.end_think_token else "",
                    f" {self.begin_response_token}" if self.begin_response_token else "",
                    f" {self.answer_suffix}" if self.answer_suffix else "",
                )
            )
            text += closing
            opts = dict(options)
            if self.answer_max_tokens is not None:
                opts[ModelOption.MAX_NEW_TOKENS] = self.answer_max_tokens
            answer, usage = await self._call(backend, messages, opts, text)
            used += usage.get("completion_tokens") or max(1, len(answer) // 4)
            prompt_tokens = (
                prompt_tokens if prompt_tokens is not None else usage.get("prompt_tokens")
            )
            text += answer + (self.end_response_token or "")
        result = ModelOutputThunk(text)
        result.usage = {
            "prompt_tokens": prompt_tokens or 0,
            "completion_tokens": used,
            "total_tokens": (prompt_tokens or 0) + used,
        }
        return result

    async def asample(
        self, generate: Generate, validate: Validate, requirements: list[Requirement]
    ) -> SamplingResult:
        """Rejection sampling over budget-forced attempts."""
        backend = getattr(generate, "backend", None)
        if backend is None:  # no request to re-send: plain rejection sampling
            return await super().asample(generate, validate, requirements)
        messages = getattr(generate, "messages", [])
        options = dict(getattr(generate, "options", {}) or {})

        async def forced(attempt: int, retry: Retry | None = None) -> ModelOutputThunk:
            sent = retry.apply(messages) if retry is not None else messages
            opts = dict(options)
            if attempt and opts.get(ModelOption.TEMPERATURE) is None:
                opts[ModelOption.TEMPERATURE] = 0.7
            return await self.think_budget_forcing(backend, sent, opts)

        return await super().asample(forced, validate, requirements)  # type: ignore[arg-type]


__all__ = ["BudgetForcingSamplingStrategy"]

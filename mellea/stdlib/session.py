"""MelleaSession: instruct a model, check its output against requirements, keep context."""

from __future__ import annotations

import time
from typing import Any

from mellea.backends.base import Backend
from mellea.backends.model_options import ModelOption
from mellea.core.requirement import Requirement, ValidationResult
from mellea.core.sampling import SamplingResult
from mellea.core.thunk import ModelOutputThunk
from mellea.core.trace import current_trace
from mellea.stdlib._sync import run_sync
from mellea.stdlib.context import Context, Message, SimpleContext
from mellea.stdlib.requirements import as_requirement
from mellea.stdlib.sampling import RejectionSamplingStrategy, SamplingStrategy


class _Default:
    """Marks an argument the caller did not pass."""

    def __repr__(self) -> str:
        return "<default>"


DEFAULT: Any = _Default()
RETRY_TEMPERATURE = 0.7
JUDGE_OPTIONS = {ModelOption.TEMPERATURE: 0.0, ModelOption.MAX_NEW_TOKENS: 8}


class MelleaSession:
    """A backend plus a context. Sync methods wrap their ``a``-prefixed async twins."""

    def __init__(
        self,
        backend: Backend,
        ctx: Context | None = None,
        model_options: dict[str, Any] | None = None,
    ) -> None:
        self.backend = backend
        self.ctx: Context = ctx if ctx is not None else SimpleContext()
        self.model_options: dict[str, Any] = dict(model_options or {})

    def __enter__(self) -> MelleaSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.reset()

    def reset(self) -> None:
        """Forget the conversation: an empty context of the same kind."""
        self.ctx = type(self.ctx)()

    # -- instruct --------------------------------------------------------------

    def instruct(self, description: str, **kwargs: Any) -> ModelOutputThunk | SamplingResult:
        """Run an instruction to completion; see :meth:`ainstruct` for the arguments."""
        kwargs["await_result"] = True
        return run_sync(self.ainstruct(description, **kwargs))

    async def ainstruct(
        self,
        description: str,
        *,
        requirements: list[Requirement | str] | None = None,
        strategy: SamplingStrategy | None = DEFAULT,
        format: type | None = None,
        model_options: dict[str, Any] | None = None,
        return_sampling_results: bool = False,
        user_variables: dict[str, str] | None = None,
        grounding_context: dict[str, str] | None = None,
        icl_examples: list[str] | None = None,
        prefix: str | None = None,
        output_prefix: str | None = None,
        images: list[Any] | None = None,
        tool_calls: bool = False,
        await_result: bool = True,
    ) -> ModelOutputThunk | SamplingResult:
        """Ask the model to follow ``description``, checking ``requirements``.

        The default strategy is rejection sampling with two attempts. With
        ``strategy=None`` (or no requirements) a single generation is made, and
        ``await_result=False`` then returns its thunk uncomputed so the caller can
        stream it. ``return_sampling_results=True`` returns the :class:`SamplingResult`.
        """
        del output_prefix, images  # accepted for upstream compatibility
        reqs = [as_requirement(r) for r in requirements or []]
        text = render_instruction(
            description, reqs, user_variables, grounding_context, icl_examples, prefix
        )
        options = ModelOption.merge_model_options(self.model_options, model_options)
        if strategy is DEFAULT:
            strategy = RejectionSamplingStrategy(loop_budget=2)
        messages = self._messages_for(text, options)
        trace = current_trace()
        sampling = strategy is not None and bool(reqs)
        run = trace.sampling_started() if trace is not None and sampling else None

        async def generate(attempt: int) -> ModelOutputThunk:
            thunk = await self.backend.generate(
                messages,
                model_options=_reseeded(options, attempt),
                format=format,
                tool_calls=tool_calls,
            )
            if trace is not None:
                model = getattr(self.backend, "model_id", None)
                if sampling:
                    trace.attempt_started(attempt, thunk, model, run)
                else:
                    trace.model_call(thunk, "generate", model=model)
            return thunk

        if not sampling:
            thunk = await generate(0)
            self._record(text, thunk)
            if await_result:
                await thunk.avalue()
            if return_sampling_results:
                await thunk.avalue()
                return SamplingResult(0, True, [thunk], [[]])
            return thunk

        async def validate(
            thunk: ModelOutputThunk, to_check: list[Requirement]
        ) -> list[tuple[Requirement, ValidationResult]]:
            ctx = self.ctx.add(Message("user", text)).add(Message("assistant", thunk=thunk))
            checks = []
            for r in to_check:
                began = time.time_ns() if trace is not None else None
                checks.append((r, await self._validate_one(r, ctx)))
                if trace is not None:
                    trace.requirement_checked(thunk, r, checks[-1][1], began)
            return checks

        assert strategy is not None
        result = await strategy.asample(generate, validate, reqs)
        if trace is not None:
            trace.sampled(result, run)
        self._record(text, result.result)
        return result if return_sampling_results else result.result

    # -- chat ------------------------------------------------------------------

    def chat(self, content: str, role: str = "user", **kwargs: Any) -> Message:
        """Send one chat turn and return the model's reply as a :class:`Message`."""
        return run_sync(self.achat(content, role, **kwargs))

    async def achat(
        self,
        content: str,
        role: str = "user",
        *,
        format: type | None = None,
        model_options: dict[str, Any] | None = None,
        user_variables: dict[str, str] | None = None,
        tool_calls: bool = False,
    ) -> Message:
        """Async :meth:`chat`."""
        if user_variables:
            content = _substitute(content, user_variables)
        options = ModelOption.merge_model_options(self.model_options, model_options)
        messages = self._messages_for(content, options, role=role)
        thunk = await self.backend.generate(
            messages, model_options=options, format=format, tool_calls=tool_calls
        )
        trace = current_trace()
        if trace is not None:
            trace.model_call(thunk, "chat", model=getattr(self.backend, "model_id", None))
        reply = await thunk.avalue()
        self.ctx = self.ctx.add(Message(role, content)).add(Message("assistant", thunk=thunk))
        return Message("assistant", reply, thunk)

    # -- validate --------------------------------------------------------------

    def validate(
        self, reqs: Requirement | str | list[Requirement | str], **kwargs: Any
    ) -> list[ValidationResult]:
        """Check requirements against ``output`` (default: the last output in context)."""
        return run_sync(self.avalidate(reqs, **kwargs))

    async def avalidate(
        self,
        reqs: Requirement | str | list[Requirement | str],
        *,
        output: ModelOutputThunk | str | None = None,
        format: type | None = None,
        model_options: dict[str, Any] | None = None,
    ) -> list[ValidationResult]:
        """Async :meth:`validate`."""
        del format, model_options
        items = reqs if isinstance(reqs, list) else [reqs]
        ctx = self.ctx
        if output is not None:
            thunk = output if isinstance(output, ModelOutputThunk) else ModelOutputThunk(output)
            ctx = ctx.add(Message("assistant", thunk=thunk))
        return [await self._validate_one(as_requirement(r), ctx) for r in items]

    async def _validate_one(self, requirement: Requirement, ctx: Context) -> ValidationResult:
        if requirement.validation_fn is not None:
            verdict = requirement.validation_fn(ctx)
            if isinstance(verdict, ValidationResult):
                return verdict
            return ValidationResult(bool(verdict))
        # No function: ask the model itself to judge the output.
        output = ctx.last_output()
        text = output.value if output is not None and output.value is not None else ""
        question = (
            f"Here is a text:\n\n{text}\n\n"
            f"Does this text satisfy the requirement: {requirement.description}\n"
            "Answer with yes or no."
        )
        judge = await self.backend.generate(
            [{"role": "user", "content": question}], model_options=dict(JUDGE_OPTIONS)
        )
        trace = current_trace()
        if trace is not None:
            trace.judged(judge, requirement, getattr(self.backend, "model_id", None), output)
        answer = await judge.avalue()
        return ValidationResult(requirement.output_to_bool(answer), reason=answer, thunk=judge)

    # -- helpers ---------------------------------------------------------------

    def _messages_for(
        self, text: str, options: dict[str, Any], role: str = "user"
    ) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = []
        system = options.get(ModelOption.SYSTEM_PROMPT)
        if system:
            messages.append({"role": "system", "content": system})
        messages.extend(m.as_dict() for m in self.ctx.view_for_generation())
        messages.append({"role": role, "content": text})
        return messages

    def _record(self, text: str, thunk: ModelOutputThunk) -> None:
        self.ctx = self.ctx.add(Message("user", text)).add(Message("assistant", thunk=thunk))


def render_instruction(
    description: str,
    requirements: list[Requirement],
    user_variables: dict[str, str] | None = None,
    grounding_context: dict[str, str] | None = None,
    icl_examples: list[str] | None = None,
    prefix: str | None = None,
) -> str:
    """The user message an instruction becomes."""
    parts = [_substitute(description, user_variables or {})]
    shown = [r.description for r in requirements if r.description and not r.check_only]
    if shown:
        parts.append("Requirements:\n" + "\n".join(f"- {d}" for d in shown))
    if grounding_context:
        parts.append("\n".join(f"[{k}]\n{v}" for k, v in grounding_context.items()))
    if icl_examples:
        parts.append("Examples:\n" + "\n".join(f"- {e}" for e in icl_examples))
    if prefix:
        parts.insert(0, prefix)
    return "\n\n".join(parts)


def _substitute(text: str, variables: dict[str, str]) -> str:
    for key, value in variables.items():
        text = text.replace("{{" + key + "}}", str(value)).replace("{{ " + key + " }}", str(value))
    return text


def _reseeded(options: dict[str, Any], attempt: int) -> dict[str, Any]:
    """Options for retry ``attempt``, made so a retry can differ from the attempts before.

    A seeded request gets seed + attempt; a request without a temperature samples
    retries at :data:`RETRY_TEMPERATURE` (a greedy retry would repeat itself).
    """
    if attempt == 0:
        return options
    options = dict(options)
    if options.get(ModelOption.SEED) is not None:
        options[ModelOption.SEED] = int(options[ModelOption.SEED]) + attempt
    if options.get(ModelOption.TEMPERATURE) is None:
        options[ModelOption.TEMPERATURE] = RETRY_TEMPERATURE
    return options

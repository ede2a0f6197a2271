"""Requirements on a model's output and the results of checking them."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from mellea.core.base import CBlock, Component, Span
from mellea.core.thunk import ModelOutputThunk

if TYPE_CHECKING:
    from mellea.core.backend import Backend
    from mellea.core.base import Context

JUDGE_OPTIONS = {"temperature": 0.0, "max_tokens": 8}


@dataclass
class ValidationResult:
    """Whether an output met a requirement, and optionally why and how well."""

    result: bool
    reason: str | None = None
    score: float | None = None
    thunk: ModelOutputThunk | None = None
    context: Context | None = None

    def as_bool(self) -> bool:
        """The verdict as a plain bool."""
        return self.result

    def __bool__(self) -> bool:
        return self.result


PartialState = Literal["pass", "fail", "unknown"]


class PartialValidationResult:
    """A verdict on part of an output while it streams: ``"pass"``, ``"fail"`` or
    ``"unknown"`` (not enough text yet). Only ``"pass"`` is truthy."""

    def __init__(
        self,
        success: PartialState,
        *,
        reason: str | None = None,
        score: float | None = None,
        thunk: ModelOutputThunk | None = None,
        context: Context | None = None,
    ) -> None:
        if success not in ("pass", "fail", "unknown"):
            raise ValueError(f"success must be 'pass', 'fail' or 'unknown', not {success!r}")
        self._success: PartialState = success
        self.reason = reason
        self.score = score
        self.thunk = thunk
        self.context = context

    @property
    def success(self) -> PartialState:
        """The three-way verdict."""
        return self._success

    def as_bool(self) -> bool:
        """True only for ``"pass"``; ``"unknown"`` is not a failure, but not a pass either."""
        return self._success == "pass"

    def __bool__(self) -> bool:
        return self.as_bool()

    def __repr__(self) -> str:
        return f"PartialValidationResult({self._success!r}, reason={self.reason!r})"


ValidationFn = Callable[[Any], ValidationResult | bool]


def default_output_to_bool(x: CBlock | ModelOutputThunk | str) -> bool:
    """Read a judge model's answer: ``yes``/``y``, or the word "yes" anywhere, means it holds."""
    text = x.value or "" if isinstance(x, CBlock | ModelOutputThunk) else str(x)
    if text.strip().upper() in ("YES", "Y"):
        return True
    return "YES" in (w.upper() for w in re.split(r"\W+", text))


class Requirement(Component[str]):
    """A requirement stated in words; checked by ``validation_fn`` or by asking the model.

    ``validation_fn`` receives the context whose last turn is the output to check
    (use :func:`mellea.stdlib.requirements.simple_validate` to wrap a ``str -> bool``).
    A ``check_only`` requirement is validated but not shown to the model in the prompt.
    Subclasses may override :meth:`validate` (the whole output) and
    :meth:`stream_validate` (one chunk at a time, for :func:`mellea.stdlib.streaming.stream`).
    """

    def __init__(
        self,
        description: str | None = None,
        validation_fn: ValidationFn | None = None,
        *,
        output_to_bool: Callable[[Any], bool] | None = default_output_to_bool,
        check_only: bool = False,
    ) -> None:
        self.description = description
        self.validation_fn = validation_fn
        self.output_to_bool = output_to_bool or default_output_to_bool
        self.check_only = check_only
        self._output: str | None = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.description!r})"

    def parts(self) -> list[Span]:
        """A requirement has no sub-parts."""
        return []

    def format_for_llm(self) -> str:
        """The requirement as the model is shown it (its description)."""
        return self.description or ""

    def _parse(self, computed: ModelOutputThunk) -> str:
        return computed.value or ""

    def judge_prompt(self, output: str) -> str:
        """The question a model judge is asked about ``output``."""
        return (
            f"Here is a text:\n\n{output}\n\n"
            f"Does this text satisfy the requirement: {self.format_for_llm()}\n"
            "Answer with yes or no."
        )

    async def validate(
        self,
        backend: Backend,
        ctx: Context,
        *,
        format: type | None = None,
        model_options: dict[str, Any] | None = None,
    ) -> ValidationResult:
        """Check the last output in ``ctx``: by ``validation_fn``, else by asking ``backend``."""
        if self.validation_fn is not None:
            verdict = self.validation_fn(ctx)
            return (
                verdict
                if isinstance(verdict, ValidationResult)
                else ValidationResult(bool(verdict))
            )
        output = ctx.last_output()
        text = output.value if output is not None and output.value is not None else ""
        options = dict(JUDGE_OPTIONS)
        options.update(model_options or {})
        judge = await backend.generate(
            [{"role": "user", "content": self.judge_prompt(text)}],
            model_options=options,
            format=format,
        )
        answer = await judge.avalue()
        reason = self.description if answer.strip().lower() in ("yes", "no") else answer
        return ValidationResult(
            self.output_to_bool(answer),
            reason=reason,
            thunk=judge,
            context=ctx.add(self).add(judge),
        )

    async def stream_validate(
        self, chunk: str, *, backend: Backend, ctx: Context
    ) -> PartialValidationResult:
        """A verdict on one streamed chunk; by default ``"unknown"`` (decided at the end).

        Overrides may keep state on ``self`` across chunks: :func:`stream` copies each
        requirement before a stream, so state does not leak between streams.
        """
        del chunk, backend, ctx
        return PartialValidationResult("unknown")


def as_requirement(item: Requirement | str) -> Requirement:
    """Accept a plain string wherever a requirement is expected."""
    return item if isinstance(item, Requirement) else Requirement(str(item))

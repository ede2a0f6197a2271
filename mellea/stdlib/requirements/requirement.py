"""Helpers to state requirements and to check them."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

from mellea.backends.adapters.results import AdapterSchemaMismatchError
from mellea.core.requirement import (
    Requirement,
    ValidationFn,
    ValidationResult,
    as_requirement,
    default_output_to_bool,
)
from mellea.stdlib.components.intrinsic.intrinsic import Intrinsic
from mellea.stdlib.context import Context


def req(description: str, validation_fn: ValidationFn | None = None, **kwargs: Any) -> Requirement:
    """A requirement shown to the model and checked after generation."""
    return Requirement(description, validation_fn, **kwargs)


def check(
    description: str, validation_fn: ValidationFn | None = None, **kwargs: Any
) -> Requirement:
    """A requirement that is checked but not shown to the model in the prompt."""
    return Requirement(description, validation_fn, check_only=True, **kwargs)


def simple_validate(
    fn: Callable[[str], bool | tuple[bool, str]], reason: str | None = None
) -> Callable[[Context], ValidationResult]:
    """Turn ``fn(output_text) -> bool`` into a ``validation_fn`` over a context."""

    def validate(ctx: Context) -> ValidationResult:
        text = _last_output_text(ctx)
        verdict = fn(text)
        if isinstance(verdict, tuple):
            ok, why = verdict
            return ValidationResult(bool(ok), reason=why)
        return ValidationResult(bool(verdict), reason=reason)

    return validate


def _last_output_text(ctx: Context) -> str:
    thunk = ctx.last_output()
    if thunk is not None and thunk.value is not None:
        return thunk.value
    return ctx.last_turn_text() or ""


reqify = as_requirement  # upstream's name


class LLMaJRequirement(Requirement):
    """A requirement always judged by the model (upstream: never by an aLoRA adapter)."""

    use_aloras: bool = False


def requirement_check_to_bool(x: Any) -> bool:
    """Read a requirement-check adapter's JSON (``{"requirement_check": {"score": s}}``):
    true when ``s`` is above 0.5. Another shape, or a score outside [0, 1], is an
    :class:`~mellea.backends.adapters.AdapterSchemaMismatchError`."""
    return requirement_score(json.loads(x.value if hasattr(x, "value") else str(x))) > 0.5


def requirement_score(result: Any) -> float:
    """The score of a requirement-check result, checked: a finite number in [0, 1]."""
    check = result.get("requirement_check") if isinstance(result, dict) else None
    if not isinstance(check, dict):
        keys = frozenset(result) if isinstance(result, dict) else frozenset()
        raise AdapterSchemaMismatchError(
            "requirement-check", keys, frozenset({"requirement_check"})
        )
    score = check.get("score")
    if (
        not isinstance(score, int | float)
        or isinstance(score, bool)
        or not math.isfinite(score)
        or not 0.0 <= score <= 1.0
    ):
        raise AdapterSchemaMismatchError(
            "requirement-check", frozenset(check), frozenset({"score"})
        )
    return float(score)


class ALoraRequirement(Requirement, Intrinsic):
    """A requirement checked by an adapter function (default ``requirement-check``).

    The check runs the backend's aLoRA for ``intrinsic_name`` on the output (its
    score above 0.5 passes); when the backend has no such aLoRA added, the model
    judges it as for any requirement, and a warning says so (upstream's rule).
    """

    def __init__(self, description: str, intrinsic_name: str | None = None) -> None:
        Requirement.__init__(self, description, None, output_to_bool=requirement_check_to_bool)
        self.use_aloras: bool = True
        # when no adapter checks it, a model judges it and answers in words
        self.judge_output_to_bool = default_output_to_bool
        Intrinsic.__init__(
            self,
            intrinsic_name or "requirement-check",
            intrinsic_kwargs={"requirement": f"{self.description}"},
        )


__all__ = [
    "ALoraRequirement",
    "LLMaJRequirement",
    "Requirement",
    "ValidationResult",
    "as_requirement",
    "check",
    "req",
    "reqify",
    "requirement_check_to_bool",
    "requirement_score",
    "simple_validate",
]

"""Helpers to state requirements and to check them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mellea.core.requirement import Requirement, ValidationFn, ValidationResult
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


def as_requirement(item: Requirement | str) -> Requirement:
    """Accept a plain string wherever a requirement is expected."""
    return item if isinstance(item, Requirement) else Requirement(str(item))


reqify = as_requirement  # upstream's name


class LLMaJRequirement(Requirement):
    """A requirement always judged by the model (upstream: never by an aLoRA adapter)."""

    use_aloras: bool = False


def requirement_check_to_bool(x: Any) -> bool:
    """Read a requirement-check adapter's JSON (``{"requirement_check": {"score": s}}``):
    true when ``s`` is above 0.5; a ValueError when the JSON has another shape."""
    import json
    import math

    data = json.loads(x.value if hasattr(x, "value") else str(x))
    score = (data.get("requirement_check") or {}).get("score") if isinstance(data, dict) else None
    if not isinstance(score, int | float) or not math.isfinite(score) or not 0 <= score <= 1:
        raise ValueError(f"not a requirement-check result: {data!r}")
    return score > 0.5


__all__ = [
    "LLMaJRequirement",
    "Requirement",
    "ValidationResult",
    "as_requirement",
    "check",
    "req",
    "reqify",
    "requirement_check_to_bool",
    "simple_validate",
]

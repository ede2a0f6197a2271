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


__all__ = [
    "Requirement",
    "ValidationResult",
    "as_requirement",
    "check",
    "req",
    "reqify",
    "simple_validate",
]

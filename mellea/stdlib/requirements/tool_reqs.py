"""Requirements on the tool calls in a model's output."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mellea.core.base import Context
from mellea.core.requirement import Requirement, ValidationResult


def _tool_name(tool: Any) -> str:
    """A tool's name from a string, a ``MelleaTool`` or a function."""
    if isinstance(tool, str):
        return tool
    name = getattr(tool, "name", None) or getattr(tool, "__name__", None)
    if not isinstance(name, str):
        raise TypeError(f"expected a tool name, a tool or a function, not {type(tool).__name__}")
    return name


def uses_tool(tool_name: str | Callable[..., Any], check_only: bool = False) -> Requirement:
    """The output must call the tool ``tool_name`` (a name, a tool or its function)."""
    name = _tool_name(tool_name)

    def validate(ctx: Context) -> ValidationResult:
        output = ctx.last_output()
        calls = output.tool_calls if output is not None else None
        if not calls:
            return ValidationResult(False, reason="There were no tool calls.")
        if any(call.name == name for call in calls):
            return ValidationResult(True)
        return ValidationResult(False, reason=f"The {name} tool was not called.")

    return Requirement(f"Use the {name} tool.", validate, check_only=check_only)


def tool_arg_validator(
    description: str,
    tool_name: str | Callable[..., Any] | None,
    arg_name: str,
    validation_fn: Callable[[Any], Any],
    check_only: bool = False,
) -> Requirement:
    """``validation_fn`` must hold for argument ``arg_name`` of the calls to ``tool_name``
    (of every call that passes that argument, when ``tool_name`` is ``None``)."""
    name = _tool_name(tool_name) if tool_name is not None else None

    def validate(ctx: Context) -> ValidationResult:
        output = ctx.last_output()
        calls = list(output.tool_calls or []) if output is not None else []
        if not calls:
            return ValidationResult(False, reason=f"No call of {name or 'any tool'} was made.")
        if name is not None:
            calls = [call for call in calls if call.name == name]
            if not calls:
                return ValidationResult(False, reason=f"The {name} tool was not called.")
            if arg_name not in calls[0].args:
                return ValidationResult(False, reason=f"{name} was called without {arg_name}.")
            calls = calls[:1]
        for call in calls:
            if arg_name in call.args and not validation_fn(call.args[arg_name]):
                return ValidationResult(
                    False, reason=f"{call.name}'s {arg_name}={call.args[arg_name]!r} is not valid."
                )
        return ValidationResult(True)

    return Requirement(description, validate, check_only=check_only)

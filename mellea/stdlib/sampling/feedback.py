"""Repair feedback a model can act on: each failed check of generated code becomes a
sentence that says what went wrong and what to try."""

from __future__ import annotations

import re
from typing import Any

from mellea.core.requirement import Requirement, ValidationResult
from mellea.core.thunk import ModelOutputThunk
from mellea.stdlib.sampling.base import Checks, RepairTemplateStrategy, Retry

_LINE = re.compile(r"at line (\d+)")
_NAME = re.compile(r"name '([^']+)' is not defined")
_SIZE = re.compile(r"(\d+)\s+chars?\)?\s+exceeds\s+limit\s+\((\d+)")
_FORBIDDEN = re.compile(r"Forbidden imports[^:]*:\s*([^.]+)", re.IGNORECASE)

_RUNTIME_HINTS = {
    "TypeError": "a value of the wrong type reached an operation or function; check the types you pass",
    "IndexError": "an index is past the end of a list; check the index ranges",
    "KeyError": "a dictionary key is missing; check that it exists before reading it",
    "ZeroDivisionError": "a division by zero; guard the divisor",
    "ModuleNotFoundError": "a module is not installed; use the standard library or an allowed module",
}


class ModelFriendlyFeedbackFormatter:
    """Turns a failed check's reason into a repair instruction (ours in wording)."""

    @staticmethod
    def format_python_syntax_error(validation_result: ValidationResult) -> str:
        """A syntax error, with its line when known."""
        reason = validation_result.reason or "syntax error"
        line = _LINE.search(reason)
        where = f" on line {line.group(1)}" if line else ""
        return (
            f"The code does not parse{where} ({reason}). Fix the statement so it is valid Python."
        )

    @staticmethod
    def format_import_error(validation_result: ValidationResult) -> str:
        """Imports outside the allowed list."""
        reason = validation_result.reason or "import error"
        found = _FORBIDDEN.search(reason)
        names = found.group(1).strip() if found else reason
        return f"The code imports modules that are not allowed ({names}). Remove them and use allowed modules only."

    @staticmethod
    def format_execution_error(validation_result: ValidationResult) -> str:
        """An error raised while the code ran, or a timeout."""
        reason = validation_result.reason or "execution failed"
        name = _NAME.search(reason)
        if name:
            return f"Running the code failed: '{name.group(1)}' is used before it is defined. Define it first or fix the name."
        if "timed out" in reason.lower() or "timeout" in reason.lower():
            return (
                "The code ran too long and was stopped. Look for endless loops or a slow algorithm."
            )
        for error, hint in _RUNTIME_HINTS.items():
            if error in reason:
                return f"Running the code raised {error}: {hint}. Details: {reason}"
        return f"Running the code failed. Read the error and fix its cause. Details: {reason}"

    @staticmethod
    def format_output_size_error(validation_result: ValidationResult) -> str:
        """Too much printed output."""
        reason = validation_result.reason or ""
        size = _SIZE.search(reason)
        numbers = f" ({size.group(1)} characters; the limit is {size.group(2)})" if size else ""
        return f"The code prints too much{numbers}. Print only the final result."

    @staticmethod
    def format_matplotlib_error(validation_result: ValidationResult) -> str:
        """A plotting check: backend, savefig path or dependencies."""
        reason = validation_result.reason or ""
        if "savefig" in reason:
            return f"The plot is not saved where expected. {reason}"
        if "backend" in reason.lower() or "matplotlib.use" in reason:
            return (
                "Call matplotlib.use('Agg') before importing pyplot, so the plot needs no display."
            )
        return f"A plotting requirement failed: {reason}"

    @staticmethod
    def format_extraction_error(validation_result: ValidationResult) -> str:
        """No code block in the answer."""
        del validation_result
        return "The answer has no Python code block. Put the code in a ```python ... ``` block."

    @classmethod
    def format_requirement_reason(
        cls, requirement: Requirement, validation_result: ValidationResult
    ) -> str:
        """The instruction for one failed requirement, chosen by its type."""
        from mellea.stdlib.requirements.python_tools import (
            ImportRestrictions,
            OutputSizeLimit,
            PythonCodeExtraction,
            PythonSyntaxValid,
        )

        by_type: dict[type, Any] = {
            PythonSyntaxValid: cls.format_python_syntax_error,
            ImportRestrictions: cls.format_import_error,
            OutputSizeLimit: cls.format_output_size_error,
            PythonCodeExtraction: cls.format_extraction_error,
        }
        formatter = by_type.get(type(requirement))
        if formatter is not None:
            return formatter(validation_result)
        name = type(requirement).__name__
        if "Matplotlib" in name or "Plot" in name:
            return cls.format_matplotlib_error(validation_result)
        if "Execution" in name:
            reason = validation_result.reason or ""
            if _SIZE.search(reason):
                return cls.format_output_size_error(validation_result)
            return cls.format_execution_error(validation_result)
        return f"{requirement.description} was not met. Details: {validation_result.reason}"


class ModelFriendlyRepairStrategy(RepairTemplateStrategy):
    """Repair sampling whose retries carry :class:`ModelFriendlyFeedbackFormatter`'s
    instructions instead of the bare failure reasons."""

    def repair(self, failed: ModelOutputThunk, checks: Checks) -> Retry | None:
        """The failed checks as repair instructions, appended to the instruction."""
        del failed
        lines = [
            "* " + ModelFriendlyFeedbackFormatter.format_requirement_reason(r, v)
            for r, v in checks
            if not v.as_bool()
        ]
        return Retry(append="The following requirements failed before:\n" + "\n".join(lines))


__all__ = ["ModelFriendlyFeedbackFormatter", "ModelFriendlyRepairStrategy"]

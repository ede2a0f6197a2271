"""Requirements helpers (upstream's module path; the code is in :mod:`.requirement`)."""

from mellea.stdlib.requirements.requirement import (
    Requirement,
    ValidationResult,
    as_requirement,
    check,
    req,
    reqify,
    simple_validate,
)
from mellea.stdlib.requirements.tool_reqs import tool_arg_validator, uses_tool

__all__ = [
    "Requirement",
    "ValidationResult",
    "as_requirement",
    "check",
    "req",
    "reqify",
    "simple_validate",
    "tool_arg_validator",
    "uses_tool",
]

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

__all__ = [
    "Requirement",
    "ValidationResult",
    "as_requirement",
    "check",
    "req",
    "reqify",
    "simple_validate",
]

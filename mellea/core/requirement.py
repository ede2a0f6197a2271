"""Requirements on a model's output and the results of checking them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mellea.core.thunk import ModelOutputThunk


@dataclass
class ValidationResult:
    """Whether an output met a requirement, and optionally why and how well."""

    result: bool
    reason: str | None = None
    score: float | None = None
    thunk: ModelOutputThunk | None = None

    def as_bool(self) -> bool:
        """The verdict as a plain bool."""
        return self.result

    def __bool__(self) -> bool:
        return self.result


ValidationFn = Callable[[Any], ValidationResult | bool]


class Requirement:
    """A requirement stated in words; checked by ``validation_fn`` or by asking the model.

    ``validation_fn`` receives the context whose last turn is the output to check
    (use :func:`mellea.stdlib.requirements.simple_validate` to wrap a ``str -> bool``).
    A ``check_only`` requirement is validated but not shown to the model in the prompt.
    """

    def __init__(
        self,
        description: str | None = None,
        validation_fn: ValidationFn | None = None,
        *,
        output_to_bool: Callable[[str], bool] | None = None,
        check_only: bool = False,
    ) -> None:
        self.description = description
        self.validation_fn = validation_fn
        self.output_to_bool = output_to_bool or _yes_no
        self.check_only = check_only

    def __repr__(self) -> str:
        return f"Requirement({self.description!r})"


def _yes_no(text: str) -> bool:
    """Read a judge model's answer: a leading 'yes' means the requirement holds."""
    return text.strip().lower().lstrip("*\"' ").startswith("yes")

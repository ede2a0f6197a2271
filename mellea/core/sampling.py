"""The outcome of a sampling strategy: every attempt, and which one won."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mellea.core.requirement import Requirement, ValidationResult
    from mellea.core.thunk import ModelOutputThunk


@dataclass
class SamplingResult:
    """Attempts made by a sampling strategy; ``result`` is the chosen one."""

    result_index: int
    success: bool
    sample_generations: list[ModelOutputThunk] = field(default_factory=list)
    sample_validations: list[list[tuple[Requirement, ValidationResult]]] = field(
        default_factory=list
    )
    sample_actions: list[Any] = field(default_factory=list)
    sample_contexts: list[Any] = field(default_factory=list)

    @property
    def result(self) -> ModelOutputThunk:
        """The chosen generation."""
        return self.sample_generations[self.result_index]

    @property
    def result_ctx(self) -> Any:
        """The context holding the chosen generation (the action, then the output)."""
        return self.sample_contexts[self.result_index]

    @property
    def result_action(self) -> Any:
        """The action that produced the chosen generation."""
        return self.sample_actions[self.result_index]

    @property
    def value(self) -> str | None:
        """The chosen generation's text."""
        return self.result.value

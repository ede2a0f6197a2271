"""Sampling presets: requirements and a strategy bundled for a common job."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from mellea.core.requirement import Requirement
from mellea.stdlib.requirements.plotting import (
    MatplotlibHeadlessBackend,
    PlotDependenciesAvailable,
    PlotFileSaved,
)
from mellea.stdlib.requirements.python_tools import python_code_generation_requirements
from mellea.stdlib.sampling.feedback import ModelFriendlyRepairStrategy

S = TypeVar("S")


@dataclass
class SamplingPreset(Generic[S]):
    """Requirements and the strategy to check them with; pass both to ``instruct``."""

    requirements: list[Requirement]
    strategy: Any
    feedback_strategy_name: str = "default"
    description: str | None = None
    example_usage: str | None = None


def _repair_preset(
    requirements: list[Requirement], loop_budget: int, *, name: str, description: str, made_by: str
) -> SamplingPreset:
    """A preset that repairs with model-friendly feedback; ``made_by`` is the call that
    makes it, for the usage example."""
    return SamplingPreset(
        requirements=requirements,
        strategy=ModelFriendlyRepairStrategy(loop_budget=loop_budget, requirements=requirements),
        feedback_strategy_name=name,
        description=f"{description} with model-friendly repair feedback",
        example_usage=(
            f"preset = {made_by}\n"
            "m.instruct(prompt, requirements=preset.requirements, strategy=preset.strategy)"
        ),
    )


def python_code_generation_sampling(
    loop_budget: int = 2,
    *,
    allowed_imports: list[str] | None = None,
    output_limit_chars: int = 10_000,
    timeout_seconds: int = 5,
    use_sandbox: bool = False,
) -> SamplingPreset:
    """Generated Python: extraction, syntax, execution and import checks, repaired with
    model-friendly feedback. ``use_sandbox`` runs the code in our sandbox."""
    if loop_budget < 1:
        raise ValueError("loop_budget must be at least 1")
    requirements = python_code_generation_requirements(
        allowed_imports=allowed_imports,
        output_limit_chars=output_limit_chars,
        timeout_seconds=timeout_seconds,
        use_sandbox=use_sandbox,
    )
    return _repair_preset(
        requirements,
        loop_budget,
        name="python_code_repair",
        description="Python code generation",
        made_by="python_code_generation_sampling()",
    )


def python_plotting_sampling(
    output_path: str | None = None,
    loop_budget: int = 3,
    *,
    allowed_imports: list[str] | None = None,
    timeout_seconds: int = 10,
    use_sandbox: bool = True,
) -> SamplingPreset:
    """Generated matplotlib code: the code checks plus a headless backend, the
    dependencies, and (with ``output_path``) the savefig path."""
    preset = python_code_generation_sampling(
        loop_budget,
        allowed_imports=allowed_imports,
        timeout_seconds=timeout_seconds,
        use_sandbox=use_sandbox,
    )
    requirements = [*preset.requirements, MatplotlibHeadlessBackend()]
    if output_path is not None:
        requirements.append(PlotFileSaved(output_path))
    requirements.append(PlotDependenciesAvailable())
    return _repair_preset(
        requirements,
        loop_budget,
        name="matplotlib_plotting_repair",
        description="matplotlib plotting",
        made_by="python_plotting_sampling(output_path='/tmp/plot.png')",
    )


__all__ = ["SamplingPreset", "python_code_generation_sampling", "python_plotting_sampling"]

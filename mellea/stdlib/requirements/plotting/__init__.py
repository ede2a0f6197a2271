"""Plotting requirements (matplotlib)."""

from mellea.stdlib.requirements.plotting.matplotlib import (
    MatplotlibHeadlessBackend,
    PlotDependenciesAvailable,
    PlotFileSaved,
    python_plotting_requirements,
)

__all__ = [
    "MatplotlibHeadlessBackend",
    "PlotDependenciesAvailable",
    "PlotFileSaved",
    "python_plotting_requirements",
]

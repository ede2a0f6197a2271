"""Sampling strategies (upstream's module path; the code is in :mod:`.base`)."""

from mellea.core.sampling import SamplingResult
from mellea.stdlib.sampling.base import (
    MultiTurnStrategy,
    RejectionSamplingStrategy,
    RepairTemplateStrategy,
    SamplingStrategy,
)

BaseSamplingStrategy = SamplingStrategy  # upstream's name for the shared base

__all__ = [
    "BaseSamplingStrategy",
    "MultiTurnStrategy",
    "RejectionSamplingStrategy",
    "RepairTemplateStrategy",
    "SamplingResult",
    "SamplingStrategy",
]

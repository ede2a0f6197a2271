"""Sampling strategies (upstream's module path; the code is in :mod:`.base`)."""

from mellea.core.sampling import SamplingResult
from mellea.stdlib.sampling.base import (
    MultiTurnStrategy,
    RejectionSamplingStrategy,
    RepairTemplateStrategy,
    SamplingStrategy,
)
from mellea.stdlib.sampling.budget_forcing import BudgetForcingSamplingStrategy
from mellea.stdlib.sampling.feedback import (
    ModelFriendlyFeedbackFormatter,
    ModelFriendlyRepairStrategy,
)
from mellea.stdlib.sampling.majority_voting import (
    MajorityVotingStrategyForMath,
    MBRDRougeLStrategy,
)
from mellea.stdlib.sampling.presets import (
    SamplingPreset,
    python_code_generation_sampling,
    python_plotting_sampling,
)
from mellea.stdlib.sampling.sofai import SOFAISamplingStrategy

BaseSamplingStrategy = SamplingStrategy  # upstream's name for the shared base

__all__ = [
    "BaseSamplingStrategy",
    "BudgetForcingSamplingStrategy",
    "MBRDRougeLStrategy",
    "MajorityVotingStrategyForMath",
    "ModelFriendlyFeedbackFormatter",
    "ModelFriendlyRepairStrategy",
    "MultiTurnStrategy",
    "RejectionSamplingStrategy",
    "RepairTemplateStrategy",
    "SOFAISamplingStrategy",
    "SamplingPreset",
    "SamplingResult",
    "SamplingStrategy",
    "python_code_generation_sampling",
    "python_plotting_sampling",
]

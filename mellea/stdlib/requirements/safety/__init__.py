"""Safety requirements: a guardian model's check of the conversation."""

from mellea.stdlib.requirements.safety.guardian import GuardianCheck, GuardianRisk

__all__ = ["GuardianCheck", "GuardianRisk"]

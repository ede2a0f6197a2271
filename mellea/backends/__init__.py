"""Backends: where generations come from (the local engine or an OpenAI-compatible server)."""

from mellea.backends.base import Backend
from mellea.backends.model_ids import ModelIdentifier
from mellea.backends.tools import MelleaTool, tool
from mellea.core.model_options import ModelOption

__all__ = ["Backend", "MelleaTool", "ModelIdentifier", "ModelOption", "tool"]

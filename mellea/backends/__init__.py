"""Backends: where generations come from (the local engine or an OpenAI-compatible server)."""

from mellea.backends.base import Backend
from mellea.backends.model_options import ModelOption

__all__ = ["Backend", "ModelOption"]

"""mellea: write generative programs, and serve them as an OpenAI-compatible API.

The names match upstream mellea's, so programs written for it run here.
``import mellea`` stays light: torch and transformers load only when a local
model is first used.
"""

from __future__ import annotations

from typing import Any

from mellea.backends import model_ids
from mellea.core import (
    CBlock,
    Component,
    Context,
    MelleaLogger,
    ModelOutputThunk,
    Requirement,
    SamplingResult,
    TemplateRepresentation,
    ValidationResult,
)
from mellea.core.model_options import ModelOption
from mellea.stdlib.components import Instruction, Message, SimpleComponent
from mellea.stdlib.components.genstub import generative
from mellea.stdlib.context import ChatContext, SimpleContext
from mellea.stdlib.requirements import check, req, simple_validate
from mellea.stdlib.sampling import RejectionSamplingStrategy
from mellea.stdlib.session import MelleaSession, start_session
from mellea.stdlib.start_backend import start_backend

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    # Upstream's top-level names that live in higher layers load on first use.
    if name == "Backend":
        from mellea.backends.base import Backend

        return Backend
    if name == "mfuncs":
        import mellea.stdlib.functional

        return mellea.stdlib.functional
    if name == "serve":
        import mellea.serve

        return mellea.serve
    raise AttributeError(f"module 'mellea' has no attribute {name!r}")


__all__ = [
    "CBlock",
    "ChatContext",
    "Component",
    "Context",
    "Instruction",
    "MelleaLogger",
    "MelleaSession",
    "Message",
    "ModelOption",
    "ModelOutputThunk",
    "RejectionSamplingStrategy",
    "Requirement",
    "SamplingResult",
    "SimpleComponent",
    "SimpleContext",
    "TemplateRepresentation",
    "ValidationResult",
    "__version__",
    "check",
    "generative",
    "model_ids",
    "req",
    "simple_validate",
    "start_backend",
    "start_session",
]

"""Core types a program works with: thunks, requirements, sampling results, tool calls,
image and audio blocks, and upstream's content blocks, components and contexts."""

from mellea.core.backend import Backend
from mellea.core.base import (
    AbstractMelleaTool,
    BaseModelSubclass,
    CBlock,
    Component,
    ComponentParseError,
    Context,
    ContextTurn,
    GenerateLog,
    Span,
    TemplateRepresentation,
    blockify,
)
from mellea.core.content import (
    AudioBlock,
    AudioUrlBlock,
    ImageBlock,
    ImageUrlBlock,
    make_image_block,
)
from mellea.core.errors import ContextLengthExceededError, RequestError
from mellea.core.logprobs import TokenLogprob
from mellea.core.requirement import Requirement, ValidationResult
from mellea.core.sampling import SamplingResult
from mellea.core.thunk import ComputedModelOutputThunk, GenerationChunk, ModelOutputThunk
from mellea.core.tool_call import ModelToolCall
from mellea.core.utils import MelleaLogger


def __getattr__(name: str) -> object:
    # Upstream exports this from mellea.core; it lives in the library layer here, so
    # it loads on first use (keeps the import graph pointing down).
    if name == "SamplingStrategy":
        from mellea.stdlib.sampling import SamplingStrategy

        return SamplingStrategy
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "AbstractMelleaTool",
    "AudioBlock",
    "AudioUrlBlock",
    "Backend",
    "BaseModelSubclass",
    "CBlock",
    "Component",
    "ComponentParseError",
    "ComputedModelOutputThunk",
    "Context",
    "ContextLengthExceededError",
    "ContextTurn",
    "GenerateLog",
    "GenerationChunk",
    "ImageBlock",
    "ImageUrlBlock",
    "MelleaLogger",
    "ModelOutputThunk",
    "ModelToolCall",
    "RequestError",
    "Requirement",
    "SamplingResult",
    "Span",
    "TemplateRepresentation",
    "TokenLogprob",
    "ValidationResult",
    "blockify",
    "make_image_block",
]

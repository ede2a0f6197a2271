"""Core types a program works with: thunks, requirements, sampling results, tool calls, media."""

from mellea.core.content import (
    AudioBlock,
    AudioUrlBlock,
    CBlock,
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

__all__ = [
    "AudioBlock",
    "AudioUrlBlock",
    "CBlock",
    "ComputedModelOutputThunk",
    "ContextLengthExceededError",
    "GenerationChunk",
    "ImageBlock",
    "ImageUrlBlock",
    "ModelOutputThunk",
    "ModelToolCall",
    "RequestError",
    "Requirement",
    "SamplingResult",
    "TokenLogprob",
    "ValidationResult",
    "make_image_block",
]

"""Core types a program works with: thunks, requirements, sampling results, tool calls."""

from mellea.core.errors import ContextLengthExceededError, RequestError
from mellea.core.logprobs import TokenLogprob
from mellea.core.requirement import Requirement, ValidationResult
from mellea.core.sampling import SamplingResult
from mellea.core.thunk import ComputedModelOutputThunk, GenerationChunk, ModelOutputThunk
from mellea.core.tool_call import ModelToolCall

__all__ = [
    "ComputedModelOutputThunk",
    "ContextLengthExceededError",
    "GenerationChunk",
    "ModelOutputThunk",
    "ModelToolCall",
    "RequestError",
    "Requirement",
    "SamplingResult",
    "TokenLogprob",
    "ValidationResult",
]

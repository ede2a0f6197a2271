"""The engine's public contract: what a request asks for and what it streams back."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

FinishReason = Literal["stop", "length", "abort"]


class PromptTooLongError(ValueError):
    """The prompt alone does not fit the model's context (a client error: HTTP 400)."""


class SamplingParamsError(ValueError):
    """A :class:`SamplingParams` value the engine refuses; ``field`` names it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass
class SamplingParams:
    """How to pick tokens and when to stop. Defaults mean greedy, no penalties."""

    max_tokens: int | None = None  # None: up to the model's context length
    temperature: float = 0.0  # 0 means greedy
    top_p: float = 1.0
    top_k: int = 0  # 0 means off
    min_p: float = 0.0
    seed: int | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    logit_bias: dict[int, float] = field(default_factory=dict)
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False
    # An llguidance grammar (see mellea.engine.constraints.json_schema_grammar): only
    # tokens it allows are sampled, so the output always matches it.
    grammar: str | None = None
    # Per-token log-probabilities: None for none (no extra cost), k in 0..20 for the
    # sampled token's logprob plus the k most likely tokens. They are the fp32
    # log-softmax of the model's raw next-token logits, taken before logit bias,
    # penalties, temperature, top-k/top-p/min-p and the grammar mask.
    logprobs: int | None = None
    # The prompt's own log-probabilities: None for none, k in 0..20 for each prompt
    # token after the first (its logprob given the tokens before it) plus the k most
    # likely tokens there, the same fp32 values as ``logprobs``, computed in the prompt
    # pass. Such a request reads no cached prefix (every position is computed), and
    # may set ``max_tokens=0`` to score its prompt without generating.
    prompt_logprobs: int | None = None
    # Partitions the prefix cache: only requests with the same salt share cached blocks
    # (the server salts each API key's requests, so no tenant can probe another's prompts).
    cache_salt: str | None = None
    # The name of a loaded LoRA/aLoRA adapter (Engine.load_adapter) to generate with;
    # None for the base model. Requests for different adapters share a batch.
    adapter: str | None = None


@dataclass
class TokenLogprobs:
    """The log-probabilities of one generated token (see ``SamplingParams.logprobs``)."""

    token_id: int  # the sampled token
    logprob: float  # its log-probability
    top: list[tuple[int, float]]  # the k most likely (token id, logprob), best first
    rank: int | None = None  # a prompt token's place among all tokens there (1: the best)


@dataclass
class RequestOutput:
    """One streamed step of a request: the new text since the previous step.

    The last output of a request has ``finished`` set and a ``finish_reason``.
    """

    request_id: str
    text: str  # new text since the previous output (never a broken UTF-8 sequence)
    token_ids: list[int]  # new token ids since the previous output
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0  # prompt tokens served from the prefix cache
    finished: bool = False
    finish_reason: FinishReason | None = None
    # When the request asked for logprobs: one entry per token of ``token_ids``, in
    # order, except a stop token (EOS or ``stop_token_ids``) that ends the request.
    logprobs: list[TokenLogprobs] | None = None
    # When the request asked for prompt_logprobs, on its first output only: one entry per
    # prompt token, None for the first (nothing comes before it).
    prompt_logprobs: list[TokenLogprobs | None] | None = None

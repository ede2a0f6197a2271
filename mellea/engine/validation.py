"""Request checks done in ``add_request``, before a request reaches the engine loop.

A value that would make sampling fail or overflow is refused here, so that a request
with it fails alone, as a client error naming the field, instead of failing the
batch it would have joined.
"""

from __future__ import annotations

import math
from typing import Any

from mellea.engine.sampler import build_sampling_batch
from mellea.engine.sequence import Sequence
from mellea.engine.types import PromptTooLongError, SamplingParams, SamplingParamsError

# Largest |logit bias| and |presence/frequency penalty|: far past any useful value, and
# small enough that float32 logits stay finite when it is added or multiplied by a count.
MAX_LOGIT_ADJUSTMENT = 1e6


def check_engine_sizes(block_size: int, max_num_seqs: int, max_num_batched_tokens: int) -> None:
    """Refuse engine settings that could never schedule a token."""
    if block_size < 1 or max_num_seqs < 1 or max_num_batched_tokens < 1:
        raise ValueError("block_size, max_num_seqs and max_num_batched_tokens must be >= 1")


def validate_request(
    ids: list[int], params: SamplingParams, vocab_size: int, max_model_len: int
) -> int:
    """Check a request's prompt and parameters; return its effective max_tokens.

    Raises :class:`PromptTooLongError` when the prompt leaves no room for a new token,
    :class:`SamplingParamsError` for a bad parameter and ``ValueError`` for a bad prompt.
    """
    if not ids:
        raise ValueError("the prompt is empty")
    if min(ids) < 0 or max(ids) >= vocab_size:
        raise ValueError(f"prompt token ids must be in [0, {vocab_size})")
    room = max_model_len - len(ids)
    if room < 1:
        raise PromptTooLongError(
            f"the prompt has {len(ids)} tokens, but the model's context holds "
            f"{max_model_len} tokens including at least one new token; "
            "shorten the prompt"
        )
    check_params(params, vocab_size)
    if params.max_tokens is None:
        return room
    return min(params.max_tokens, room)


def check_params(p: SamplingParams, vocab: int) -> None:
    """Refuse sampling values that would make sampling fail or overflow."""

    def bad(field: str, message: str) -> SamplingParamsError:
        return SamplingParamsError(field, f"{field} {message}")

    def number(value: Any) -> bool:
        return isinstance(value, (int, float)) and not isinstance(value, bool)

    for field in ("temperature", "top_p", "min_p", "presence_penalty", "frequency_penalty"):
        if not number(getattr(p, field)) or not math.isfinite(getattr(p, field)):
            raise bad(field, "must be a finite number")
    if not number(p.repetition_penalty) or not math.isfinite(p.repetition_penalty):
        raise bad("repetition_penalty", "must be a finite number")
    if p.temperature < 0:
        raise bad("temperature", "must be >= 0")
    if not 0 < p.top_p <= 1:
        raise bad("top_p", "must be in (0, 1]")
    if not isinstance(p.top_k, int) or p.top_k < 0:
        raise bad("top_k", "must be an integer >= 0 (0 turns it off)")
    if not 0 <= p.min_p <= 1:
        raise bad("min_p", "must be in [0, 1]")
    if p.repetition_penalty <= 0:
        raise bad("repetition_penalty", "must be > 0")
    for field in ("presence_penalty", "frequency_penalty"):
        if abs(getattr(p, field)) > MAX_LOGIT_ADJUSTMENT:
            raise bad(field, f"must be in [{-MAX_LOGIT_ADJUSTMENT:g}, {MAX_LOGIT_ADJUSTMENT:g}]")
    for token, value in p.logit_bias.items():
        if not isinstance(token, int) or isinstance(token, bool) or not 0 <= token < vocab:
            raise bad("logit_bias", f"token ids must be in [0, {vocab}), the model's vocabulary")
        if not number(value) or not math.isfinite(value) or abs(value) > MAX_LOGIT_ADJUSTMENT:
            raise bad(
                "logit_bias",
                f"values must be numbers in [{-MAX_LOGIT_ADJUSTMENT:g}, {MAX_LOGIT_ADJUSTMENT:g}]",
            )
    for field in ("logprobs", "prompt_logprobs"):
        k = getattr(p, field)
        if k is not None and (isinstance(k, bool) or not isinstance(k, int) or not 0 <= k <= 20):
            raise bad(field, "must be None or an integer in [0, 20]")
    if p.max_tokens is not None and (not isinstance(p.max_tokens, int) or p.max_tokens < 0):
        raise bad("max_tokens", "must be an integer >= 1 (0 with prompt_logprobs)")
    if p.max_tokens == 0 and p.prompt_logprobs is None:  # 0 scores a prompt, nothing else
        raise bad("max_tokens", "must be >= 1 (0 only with prompt_logprobs: a prompt scored)")
    if p.seed is not None and (not isinstance(p.seed, int) or not -(2**63) <= p.seed < 2**64):
        raise bad("seed", "must be a 64-bit integer")


def unsampleable(seqs: list[Sequence], vocab_size: int) -> list[Sequence]:
    """The sequences whose sampling settings cannot be built on their own (when building
    a step's inputs failed, these are the ones to blame)."""
    bad = []
    for seq in seqs:
        try:
            build_sampling_batch([seq], vocab_size)
        except Exception:
            bad.append(seq)
    return bad

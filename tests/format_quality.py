"""How far a weight format (see :mod:`mellea.engine.formats`) moves a model from fp32.

Over a fixed set of chat prompts, fp32 greedy continuations are the reference:

* ``mean_logprob``: the mean per-token log-probability a format's model gives the
  fp32 model's greedy continuation (teacher-forced, one forward pass per prompt);
  the bar is that it stays within :data:`LOGPROB_TOLERANCE` (relative) of fp32's own.
* ``exact_agreement``: the fraction of prompts whose greedy continuation, generated
  by the format's engine one request at a time, is token for token the fp32 one (up
  to ``max_tokens`` tokens or EOS). The bar is per format
  (:data:`MIN_EXACT_AGREEMENT`): at least half of the prompts for bfloat16 and int8,
  all for int4, on every CPU family.
* ``agreement`` (reported, not part of the bar): the same, but a continuation that
  first leaves fp32's at a near-tie also agrees: where fp32 itself rates the
  format's token within :data:`NEAR_TIE` nats of its own choice. A small model's
  greedy text often has such ties, and after one the texts go separate ways however
  close the weights are, so this tells a format's rounding from the model's ties.

Used by ``benchmarks/bench_dtypes.py`` and ``tests/engine/test_dtypes.py``.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import torch

from mellea.engine.cpu_attention import AttentionMetadata
from mellea.engine.types import SamplingParams

LOGPROB_TOLERANCE = 0.02  # relative to fp32's own mean logprob
# The least exact agreement each format must reach, on every CPU family. Identical
# greedy text measures the model's near-ties as much as the format (see ``agreement``),
# and a format's rounding falls differently on each family's kernels, so the bar sits at
# the lowest a sound format measured. Over the 12 prompts (identical / identical or
# near-tie), on the AVX512-BF16/VNNI CPU: bfloat16 8/12 (12/12), int8 7/12 (11/12),
# int4 12/12; under ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 on it: bfloat16
# 10/12 (12/12), int8 7/12 (11/12), int4 12/12; on an AVX2-only CPU (issue 21):
# bfloat16 6/12. int4 holds the default model's weights exactly: all 12 everywhere.
MIN_EXACT_AGREEMENT = {"bfloat16": 0.5, "int8": 0.5, "int4": 1.0, "kv-float16": 0.75}
# A float16 KV cache against a float32 one (the same weights), teacher-forced through
# the cache (``through_cache``): on the AVX512-VNNI CPU, float32 weights: 12/12
# identical, mean logprob -0.68104 against -0.68103 (a relative drop of 0.00001).
# Its own bars: identical text on 9 of 12 (room for a near-tie a CPU family's rounding
# may tip) and a logprob drop 10x under the formats' tolerance.
KV_LOGPROB_TOLERANCE = 0.002
NEAR_TIE = 0.25  # nats: fp32 gives the two tokens probabilities within a factor 1.28

QUALITY_PROMPTS = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "Explain photosynthesis in two sentences.",
    "List three prime numbers greater than 10.",
    "Translate 'good morning' into Spanish.",
    "What is 17 times 3?",
    "Give me a tip for learning to play the guitar.",
    "Write a Python function that reverses a string.",
    "Why is the sky blue?",
    "Summarize the plot of Romeo and Juliet in one sentence.",
    "What should I pack for a weekend camping trip?",
    "Describe a cat to someone who has never seen one.",
]


@dataclass
class Reference:
    """fp32's greedy continuations and its own log-probabilities along them."""

    prompts: list[list[int]]
    continuations: list[list[int]]
    logprobs: list[torch.Tensor]  # per prompt: [len(continuation), vocab] log-softmax
    through_cache: bool = False  # see teacher_forced_logprobs

    @property
    def mean_logprob(self) -> float:
        """Mean over prompts of the mean per-token logprob of fp32's continuations."""
        return _mean_picked(self.logprobs, self.continuations)


@dataclass
class FormatQuality:
    """One format's quality numbers against the fp32 reference."""

    fmt: str
    mean_logprob: float  # of fp32's greedy continuations under this format
    reference_logprob: float  # fp32's own
    exact_agreement: float  # fraction of prompts with the identical greedy continuation
    agreement: float  # identical, or first different at an fp32 near-tie
    mean_common_prefix: float  # tokens, averaged over prompts
    divergence_margins: list[float]  # fp32's logprob(own token) - logprob(format's token)

    @property
    def relative_logprob_drop(self) -> float:
        """How much worse than fp32, relative (0.01 = 1 % lower mean logprob)."""
        return (self.reference_logprob - self.mean_logprob) / abs(self.reference_logprob)

    @property
    def min_exact_agreement(self) -> float:
        """The format's bar for :attr:`exact_agreement` (:data:`MIN_EXACT_AGREEMENT`;
        half for a format not listed)."""
        return MIN_EXACT_AGREEMENT.get(self.fmt, 0.5)

    @property
    def passes(self) -> bool:
        """The quality bar: logprob within tolerance, and identical greedy text for at
        least the format's share of the prompts (the same bar on every CPU family)."""
        drop_ok = self.relative_logprob_drop <= LOGPROB_TOLERANCE
        return drop_ok and self.exact_agreement >= self.min_exact_agreement

    def summary(self) -> dict[str, Any]:
        """JSON-ready numbers."""
        return {
            "mean_logprob": round(self.mean_logprob, 5),
            "reference_logprob": round(self.reference_logprob, 5),
            "relative_logprob_drop": round(self.relative_logprob_drop, 5),
            "exact_agreement": round(self.exact_agreement, 3),
            "agreement": round(self.agreement, 3),
            "mean_common_prefix": round(self.mean_common_prefix, 2),
            "divergence_margins": [round(m, 3) for m in self.divergence_margins],
            "passes": self.passes,
        }


def chat_prompts(engine: Any) -> list[list[int]]:
    """The fixed prompts, rendered with the engine's chat template."""
    return [engine.apply_chat_template([{"role": "user", "content": p}]) for p in QUALITY_PROMPTS]


def greedy_continuations(engine: Any, prompts: list[list[int]], max_tokens: int) -> list[list[int]]:
    """Each prompt's greedy continuation (up to ``max_tokens`` or EOS), one request at
    a time: a batch's makeup varies from run to run, and with it the rounding."""

    async def one(prompt: list[int]) -> list[int]:
        tokens: list[int] = []
        async for out in engine.add_request(prompt, SamplingParams(max_tokens=max_tokens)):
            tokens += out.token_ids
        return tokens

    return [asyncio.run(one(p)) for p in prompts]


def _prefill_meta(
    start: int, end: int, blocks: int, dev: torch.device, has_context: bool
) -> AttentionMetadata:
    """One prefill chunk of positions [start, end) of a sequence in blocks 0..blocks-1."""
    length = end - start
    return AttentionMetadata(
        slot_mapping=torch.arange(start, end, device=dev),
        prefill_cu_seqlens=torch.tensor([0, length], dtype=torch.int32, device=dev),
        prefill_context_lens=torch.tensor([end], dtype=torch.int32, device=dev),
        prefill_block_tables=torch.arange(blocks, dtype=torch.int32, device=dev)[None],
        prefill_query_lens=(length,),
        prefill_total_lens=(end,),
        prefill_has_context=has_context,
    )


@torch.inference_mode()
def teacher_forced_logprobs(
    engine: Any, prompt: list[int], continuation: list[int], through_cache: bool = False
) -> torch.Tensor:
    """[len(continuation), vocab] fp32 log-softmax before each continuation token under
    the engine's model: one fresh prefill over a private KV cache (the engine's own
    cache and prefix blocks are not touched). ``through_cache``: the prompt first, then
    the continuation as a second chunk that reads every key and value back from the
    cache, as decoding does (what a KV cache's dtype changes; a fresh prefill attends
    over its own fp32 K/V)."""
    model, runner = engine.runner.model, engine.runner
    ids = prompt + continuation
    n, bs, dev = len(ids), runner.block_size, runner.device
    blocks = -(-n // bs)
    shape = (blocks, bs, *runner.k_cache.shape[3:])
    dtype = runner.k_cache.dtype
    caches = [
        (torch.zeros(shape, dtype=dtype, device=dev), torch.zeros(shape, dtype=dtype, device=dev))
        for _ in runner.kv_caches
    ]
    split = len(prompt) if through_cache else n
    hidden = model(
        torch.tensor(ids[:split], device=dev),
        torch.arange(split, device=dev),
        caches,
        _prefill_meta(0, split, blocks, dev, False),
    )
    if split < n - 1:
        rest = model(
            torch.tensor(ids[split : n - 1], device=dev),
            torch.arange(split, n - 1, device=dev),
            caches,
            _prefill_meta(split, n - 1, blocks, dev, True),
        )
        hidden = torch.cat([hidden, rest])
    logits = model.compute_logits(hidden[len(prompt) - 1 : n - 1]).float()
    return torch.log_softmax(logits, dim=-1).cpu()


def _mean_picked(rows: list[torch.Tensor], continuations: list[list[int]]) -> float:
    per_prompt = [
        r.gather(1, torch.tensor(c)[:, None]).mean().item()
        for r, c in zip(rows, continuations, strict=True)
    ]
    return sum(per_prompt) / len(per_prompt)


def reference(engine: Any, max_tokens: int = 32, through_cache: bool = False) -> Reference:
    """fp32's continuations of :data:`QUALITY_PROMPTS` (``engine`` loaded in float32;
    ``through_cache``: see :func:`teacher_forced_logprobs`)."""
    prompts = chat_prompts(engine)
    continuations = greedy_continuations(engine, prompts, max_tokens)
    rows = [
        teacher_forced_logprobs(engine, p, c, through_cache)
        for p, c in zip(prompts, continuations, strict=True)
    ]
    return Reference(prompts, continuations, rows, through_cache)


def common_prefix(a: list[int], b: list[int]) -> int:
    """How many leading tokens two sequences share."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def compare(fmt: str, engine: Any, ref: Reference) -> FormatQuality:
    """``engine`` (loaded in ``fmt``) against the fp32 reference."""
    max_tokens = max(map(len, ref.continuations))
    outputs = greedy_continuations(engine, ref.prompts, max_tokens)
    prefixes, margins, agree, same = [], [], 0, 0
    for out, want, rows in zip(outputs, ref.continuations, ref.logprobs, strict=True):
        k = common_prefix(out, want)
        prefixes.append(k)
        if out == want:
            same += 1
            agree += 1
            continue
        if k < len(out) and k < len(want):  # both go on, with different tokens
            margin = (rows[k, want[k]] - rows[k, out[k]]).item()
        else:  # one stopped (EOS) where the other did not: no tie to speak of
            margin = float("inf")
        margins.append(margin)
        agree += margin <= NEAR_TIE
    rows = [
        teacher_forced_logprobs(engine, p, c, ref.through_cache)
        for p, c in zip(ref.prompts, ref.continuations, strict=True)
    ]
    n = len(ref.prompts)
    return FormatQuality(
        fmt=fmt,
        mean_logprob=_mean_picked(rows, ref.continuations),
        reference_logprob=ref.mean_logprob,
        exact_agreement=same / n,
        agreement=agree / n,
        mean_common_prefix=sum(prefixes) / n,
        divergence_margins=margins,
    )

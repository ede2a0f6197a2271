"""The prompt's own log-probabilities (``SamplingParams.prompt_logprobs``), computed in the
prompt pass: against transformers (fp32), against our own forward (compact formats),
with a cached prefix, across prefill chunks, and with ``max_tokens=0``."""

from __future__ import annotations

import pytest
import torch

from mellea.engine.core import EngineCore
from mellea.engine.formats.head import RefinedHead
from mellea.engine.formats.linear import Bf16Linear, Int8Linear
from mellea.engine.model import AttentionMetadata
from mellea.engine.sequence import Sequence
from mellea.engine.types import SamplingParams, TokenLogprobs
from tests.engine.conftest import collect, hf_greedy, hf_logprobs

PROMPT = list(range(2000, 2037))  # 37 tokens: three blocks of 16 and a part
OTHER = list(range(500, 540, 2))


def add(core: EngineCore, request_id: str, prompt: list[int], **params) -> Sequence:
    seq = core.new_sequence(request_id, prompt, SamplingParams(**params))
    core.add(seq)
    return seq


def run(core: EngineCore) -> list:
    outputs = []
    for _ in range(500):
        if not core.has_work():
            return outputs
        outputs += core.step()
    raise AssertionError("the core never finished")


def assert_matches(entries: list[TokenLogprobs | None], prompt: list[int], reference, k: int):
    """``entries`` are ``prompt``'s: None first, then each token's value and top ``k``
    as in ``reference`` ([len(prompt) - 1, vocab] log-softmax before each token)."""
    assert entries[0] is None and len(entries) == len(prompt)
    for entry, token, row in zip(entries[1:], prompt[1:], reference, strict=True):
        assert entry is not None and entry.token_id == token
        assert entry.logprob == pytest.approx(float(row[token]), abs=1e-4)
        values, ids = row.topk(k)
        assert [t for t, _ in entry.top] == ids.tolist()
        assert [v for _, v in entry.top] == pytest.approx(values.tolist(), abs=1e-4)


def test_prompt_logprobs_equal_transformers_and_leave_generation_alone(
    tiny_model_dir, tiny_hf_model
):
    core = EngineCore(tiny_model_dir, eos_token_ids={2}, kv_cache_dtype="float32")
    scored = add(core, "scored", PROMPT, max_tokens=6, prompt_logprobs=4)
    plain = add(core, "plain", OTHER, max_tokens=6)
    run(core)
    reference = hf_logprobs(tiny_hf_model, PROMPT[:1], PROMPT[1:])
    assert_matches(scored.prompt_logprobs, PROMPT, reference, 4)
    assert scored.output_ids == hf_greedy(tiny_hf_model, PROMPT, 6)
    assert plain.output_ids == hf_greedy(tiny_hf_model, OTHER, 6)
    assert plain.prompt_logprobs == [None]  # nothing scored for a request that did not ask


def test_max_tokens_zero_scores_the_prompt_and_generates_nothing(tiny_model_dir, tiny_hf_model):
    core = EngineCore(tiny_model_dir, eos_token_ids={2}, kv_cache_dtype="float32")
    seq = add(core, "s", PROMPT, max_tokens=0, prompt_logprobs=0)
    outputs = run(core)
    assert [(o.seq, o.token, o.finish_reason) for o in outputs] == [(seq, None, "length")]
    assert seq.output_ids == [] and seq.finish_reason == "length"
    reference = hf_logprobs(tiny_hf_model, PROMPT[:1], PROMPT[1:])
    assert_matches(seq.prompt_logprobs, PROMPT, reference, 0)
    assert core.blocks.num_free == core.blocks.num_blocks  # its blocks went back


def test_a_cached_prefix_is_computed_again_for_a_scored_prompt(tiny_model_dir, tiny_hf_model):
    core = EngineCore(tiny_model_dir, eos_token_ids={2}, kv_cache_dtype="float32")
    add(core, "warm", PROMPT, max_tokens=1)
    run(core)
    scored = add(core, "scored", PROMPT, max_tokens=1, prompt_logprobs=2)
    again = add(core, "again", PROMPT, max_tokens=1)
    run(core)
    assert scored.num_cached == 0 and again.num_cached == 32  # the cache bypassed, and kept
    reference = hf_logprobs(tiny_hf_model, PROMPT[:1], PROMPT[1:])
    assert_matches(scored.prompt_logprobs, PROMPT, reference, 2)


@pytest.mark.parametrize("budget", [5, 16])
def test_a_prompt_prefilled_in_chunks_is_scored_whole(tiny_model_dir, tiny_hf_model, budget):
    core = EngineCore(
        tiny_model_dir, eos_token_ids={2}, max_num_batched_tokens=budget, kv_cache_dtype="float32"
    )
    busy = add(core, "busy", OTHER, max_tokens=12)  # decodes share the steps' budget
    scored = add(core, "scored", PROMPT, max_tokens=3, prompt_logprobs=3)
    run(core)
    reference = hf_logprobs(tiny_hf_model, PROMPT[:1], PROMPT[1:])
    assert_matches(scored.prompt_logprobs, PROMPT, reference, 3)
    assert scored.output_ids == hf_greedy(tiny_hf_model, PROMPT, 3)
    assert busy.output_ids == hf_greedy(tiny_hf_model, OTHER, 12)


def test_a_preempted_prompt_is_not_scored_twice(tiny_model_dir, tiny_hf_model):
    core = EngineCore(
        tiny_model_dir, eos_token_ids={2}, max_num_batched_tokens=16, kv_cache_dtype="float32"
    )
    scored = add(core, "scored", PROMPT, max_tokens=2, prompt_logprobs=1)
    core.step()  # the first chunk of 16 is scored
    assert len(scored.prompt_logprobs) == 17
    core.scheduler.running.remove(scored)
    core.scheduler._preempt(scored)  # as when the KV cache runs out
    run(core)
    reference = hf_logprobs(tiny_hf_model, PROMPT[:1], PROMPT[1:])
    assert_matches(scored.prompt_logprobs, PROMPT, reference, 1)


def own_forward_logprobs(core: EngineCore, prompt: list[int]) -> torch.Tensor:
    """[len(prompt) - 1, vocab] log-softmax before each prompt token from one fresh
    prefill of the core's model over a private KV cache, each prompt token's own logit
    recomputed in fp32 as the engine does."""
    runner = core.runner
    n, bs = len(prompt), runner.block_size
    blocks = -(-n // bs)
    shape = (blocks, bs, *runner.k_cache.shape[3:])
    caches = [
        (
            torch.zeros(shape, dtype=runner.k_cache.dtype),
            torch.zeros(shape, dtype=runner.k_cache.dtype),
        )
        for _ in runner.kv_caches
    ]
    meta = AttentionMetadata(
        slot_mapping=torch.arange(n),
        prefill_cu_seqlens=torch.tensor([0, n], dtype=torch.int32),
        prefill_context_lens=torch.tensor([n], dtype=torch.int32),
        prefill_block_tables=torch.arange(blocks, dtype=torch.int32)[None],
        prefill_query_lens=(n,),
        prefill_total_lens=(n,),
    )
    model = runner.model
    with torch.inference_mode():
        hidden = model(torch.tensor(prompt), torch.arange(n), caches, meta)
        exact = torch.tensor(prompt[1:]).unsqueeze(1)
        return torch.log_softmax(model.compute_logits(hidden[:-1], exact), dim=-1)


@pytest.mark.parametrize("fmt", ["bfloat16", "int8", "int4"])
def test_compact_formats_score_the_prompt_as_their_own_forward(tiny_model_dir, fmt):
    # One prefill of the whole prompt, as the reference (the int8 kernels' activation
    # rounding depends on how many rows a chunk has: chunking is checked in fp32 above).
    core = EngineCore(tiny_model_dir, eos_token_ids={2}, dtype=fmt)
    scored = add(core, "scored", PROMPT, max_tokens=0, prompt_logprobs=5)
    run(core)
    reference = own_forward_logprobs(core, PROMPT)
    assert_matches(scored.prompt_logprobs, PROMPT, reference, 5)


async def test_the_first_output_carries_the_prompt_logprobs(make_engine):
    engine = make_engine()
    stream = engine.add_request(PROMPT, SamplingParams(max_tokens=4, prompt_logprobs=2))
    outs = [out async for out in stream]
    assert len(outs[0].prompt_logprobs) == len(PROMPT)
    assert all(out.prompt_logprobs is None for out in outs[1:])
    tokens, _, last = await collect(
        engine.add_request(PROMPT, SamplingParams(max_tokens=0, prompt_logprobs=2))
    )
    assert tokens == [] and last.finish_reason == "length" and last.completion_tokens == 0
    assert [e.logprob for e in last.prompt_logprobs[1:]] == [
        e.logprob for e in outs[0].prompt_logprobs[1:]
    ]


async def test_outputs_merged_while_the_reader_was_busy_keep_the_prompt_logprobs(make_engine):
    engine = make_engine()
    params = SamplingParams(max_tokens=4, prompt_logprobs=1, ignore_eos=True)
    late = engine.add_request(PROMPT, params)  # read only once everything is queued
    await collect(engine.add_request(list(PROMPT), params))  # same steps, delivered after
    outs = [out async for out in late]
    assert len(outs) == 1 and outs[0].token_ids and len(outs[0].prompt_logprobs) == len(PROMPT)


async def test_bad_prompt_logprobs_and_max_tokens_are_refused(make_engine):
    engine = make_engine()
    for bad, field in (
        (SamplingParams(prompt_logprobs=21), "prompt_logprobs"),
        (SamplingParams(prompt_logprobs=-1), "prompt_logprobs"),
        (SamplingParams(prompt_logprobs=True), "prompt_logprobs"),
        (SamplingParams(max_tokens=0), "max_tokens"),
    ):
        with pytest.raises(ValueError, match=field):
            engine.add_request(PROMPT, bad)


@pytest.mark.parametrize("fmt", ["bfloat16", "int8"])
def test_the_refined_head_recomputes_the_asked_columns_in_fp32(fmt: str):
    torch.manual_seed(0)
    weight = torch.randn(500, 48)
    inner = Bf16Linear(weight, None) if fmt == "bfloat16" else Int8Linear(weight, None)
    hidden = 4 * torch.randn(3, 48)
    exact = hidden @ weight.T
    worst = exact.argsort(dim=-1)[:, :1]  # far from the best 32: not refined on its own
    logits = RefinedHead(inner, weight)(hidden, worst)
    assert torch.allclose(logits.gather(1, worst), exact.gather(1, worst), atol=1e-4)
    rounded = RefinedHead(inner, weight)(hidden)
    assert (rounded.gather(1, worst) - exact.gather(1, worst)).abs().max() > 1e-3


@pytest.mark.model
def test_the_bundled_gguf_in_its_default_format_scores_as_its_own_forward():
    from mellea.engine.loader import resolve_model

    core = EngineCore(resolve_model(None), eos_token_ids={2}, dtype="auto")
    assert isinstance(core.runner.model.lm_head, RefinedHead)  # a compact head over the GGUF's
    prompt = list(range(1000, 1200, 3))
    scored = add(core, "scored", prompt, max_tokens=0, prompt_logprobs=4)
    run(core)
    assert_matches(scored.prompt_logprobs, prompt, own_forward_logprobs(core, prompt), 4)

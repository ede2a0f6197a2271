"""The engine on the real default model (SmolLM2-135M-Instruct): greedy equals HF."""

from __future__ import annotations

import pytest

from mellea.engine.types import SamplingParams
from tests.engine.conftest import generate, hf_greedy, hf_logprobs

pytestmark = pytest.mark.model

QUESTIONS = [
    "What is the capital of France?",
    "Write a haiku about the sea, with waves and sand and a setting sun over the water.",
    "hi",
    "Explain gravity to a five year old child in two short sentences, please.",
]


async def test_batched_greedy_equals_hf_generate(real_engine, real_hf_model):
    prompts = [real_engine.apply_chat_template([{"role": "user", "content": q}]) for q in QUESTIONS]
    assert len({len(p) for p in prompts}) == len(prompts)  # different lengths
    results = await generate(real_engine, prompts, SamplingParams(max_tokens=24))
    for prompt, (tokens, text, last) in zip(prompts, results, strict=True):
        expected = hf_greedy(real_hf_model, prompt, 24)
        assert tokens == expected
        assert text == real_engine.tokenizer.decode(expected, skip_special_tokens=True)
        assert last.finish_reason == ("stop" if expected[-1] == 2 else "length")


async def test_shared_system_prompt_is_reused(real_engine, real_hf_model):
    system = {"role": "system", "content": "You are a terse assistant. " * 8}
    prompts = [
        real_engine.apply_chat_template([system, {"role": "user", "content": q}])
        for q in ("Name a color.", "Name a fruit.")
    ]
    (first,) = await generate(real_engine, prompts[:1], SamplingParams(max_tokens=8))
    (second,) = await generate(real_engine, prompts[1:], SamplingParams(max_tokens=8))
    assert second[2].cached_tokens >= 64
    assert second[0] == hf_greedy(real_hf_model, prompts[1], 8)
    assert first[0] == hf_greedy(real_hf_model, prompts[0], 8)


async def test_model_facts(real_engine):
    assert real_engine.model_id == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert real_engine.max_model_len == 8192
    assert 2 in real_engine.eos_token_ids
    stats = real_engine.stats()
    assert stats["kv_cache_bytes"] <= 1 << 30


async def test_logprobs_equal_hf(real_engine, real_hf_model):
    prompt = real_engine.apply_chat_template([{"role": "user", "content": QUESTIONS[0]}])
    stream = real_engine.add_request(prompt, SamplingParams(max_tokens=16, logprobs=5))
    tokens, entries = [], []
    async for out in stream:
        tokens += out.token_ids
        entries += out.logprobs
    assert tokens == hf_greedy(real_hf_model, prompt, 16)
    assert len(entries) == len(tokens) - (tokens[-1] == 2)  # a final EOS has no entry
    reference = hf_logprobs(real_hf_model, prompt, tokens)
    for row, token, entry in zip(reference, tokens, entries, strict=False):
        assert entry.token_id == token and entry.top[0] == (token, entry.logprob)
        assert entry.logprob == pytest.approx(row[token].item(), abs=1e-4)
        assert [t for t, _ in entry.top] == row.topk(5).indices.tolist()
        assert [v for _, v in entry.top] == pytest.approx(row.topk(5).values.tolist(), abs=1e-4)


async def test_prompt_logprobs_equal_hf(real_engine, real_hf_model):
    prompt = real_engine.apply_chat_template([{"role": "user", "content": QUESTIONS[1]}])
    params = SamplingParams(max_tokens=0, prompt_logprobs=3)
    (out,) = [out async for out in real_engine.add_request(prompt, params)]
    reference = hf_logprobs(real_hf_model, prompt[:1], prompt[1:])
    assert out.prompt_logprobs[0] is None and len(out.prompt_logprobs) == len(prompt)
    for entry, token, row in zip(out.prompt_logprobs[1:], prompt[1:], reference, strict=True):
        assert entry.token_id == token
        assert entry.logprob == pytest.approx(row[token].item(), abs=1e-4)
        assert [t for t, _ in entry.top] == row.topk(3).indices.tolist()

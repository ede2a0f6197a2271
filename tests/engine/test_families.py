"""Every family the fast engine runs, against transformers, on tiny random models.

Each model has its family's quirks switched on (sliding windows shorter than the
prompts, RoPE scaling, biases, multipliers, q/k norms, soft-capping, partial rotary).
Prompts of different lengths run as one batch with small prefill chunks and a small
KV block, then a second round reuses their prefixes from the cache. The engine's
greedy tokens must equal ``generate``'s, and at every step the log-softmax of its
logits must equal transformers' within ``LOGPROB_ATOL``, on the CPU fast path and on
the kernels' reference path.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest
import torch

from mellea.engine.types import SamplingParams
from tests.engine.conftest import collect, hf_greedy, hf_logprobs

# fp32 on both sides; the models' logits are peaked (large init), so logprobs of the
# top tokens are tens of nats apart and this bound is far from any greedy tie.
LOGPROB_ATOL = 2e-3
TOP_K = 5
NEW_TOKENS = 6
BLOCK_SIZE = 4
CHUNK = 16  # max_num_batched_tokens: the longer prompts are prefilled in several steps

FIRST = [list(range(300, 305)), list(range(7000, 7019)), list(range(1200, 1274, 2))]
# Second round: the first prompts' beginnings (cached blocks) with new endings.
SECOND = [FIRST[2][:29] + [44, 45, 46], FIRST[1][:12] + [9, 8, 7, 6, 5]]

COMMON = dict(
    vocab_size=49152,
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=128,
    initializer_range=0.5,
    bos_token_id=1,
    eos_token_id=2,
    pad_token_id=0,
)

FAMILY_CONFIGS: dict[str, dict] = {
    "llama3": dict(
        model_type="llama",
        head_dim=16,
        attention_bias=True,
        mlp_bias=True,
        tie_word_embeddings=True,
        rope_parameters={
            "rope_type": "llama3",
            "rope_theta": 500000.0,
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 32,
        },
    ),
    "qwen2": dict(model_type="qwen2", tie_word_embeddings=False),
    "qwen3": dict(model_type="qwen3", head_dim=16, tie_word_embeddings=True),
    "mistral": dict(model_type="mistral", head_dim=16, sliding_window=8),
    "granite": dict(
        model_type="granite",
        embedding_multiplier=3.0,
        residual_multiplier=0.4,
        attention_multiplier=0.05,
        logits_scaling=2.5,
        attention_bias=True,
    ),
    "granite4-dense": dict(
        model_type="granitemoehybrid",
        layer_types=["attention"] * 3,
        num_local_experts=0,
        position_embedding_type="rope",
        shared_intermediate_size=80,
        embedding_multiplier=2.0,
        residual_multiplier=0.5,
        attention_multiplier=0.1,
        logits_scaling=3.0,
    ),
    "gemma3": dict(
        model_type="gemma3_text",
        head_dim=16,
        sliding_window=8,
        layer_types=["sliding_attention", "full_attention", "sliding_attention"],
        query_pre_attn_scalar=24,
        final_logit_softcapping=20.0,
        rope_parameters={
            "full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e6},
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
        },
    ),
    "phi3": dict(
        model_type="phi3",
        sliding_window=12,
        original_max_position_embeddings=64,
        rope_parameters={
            "rope_type": "longrope",
            "rope_theta": 10000.0,
            "partial_rotary_factor": 0.5,
            "short_factor": [1.0, 1.5, 2.0, 3.0],
            "long_factor": [4.0, 4.0, 8.0, 8.0],
            "original_max_position_embeddings": 64,
        },
    ),
    "olmo2": dict(model_type="olmo2"),
}


def build_family(name: str, path: Path, tokenizer_dir: Path, **overrides):
    """Save a tiny random model of family ``name`` (norms, biases perturbed) to ``path``;
    ``overrides`` replace :data:`COMMON`'s shape keys."""
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(sum(map(ord, name)))
    extra = dict(FAMILY_CONFIGS[name])
    config = AutoConfig.for_model(extra.pop("model_type"), **{**COMMON, **overrides}, **extra)
    hf = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    with torch.no_grad():  # norms start at 1 (or 0) and biases at 0: make them matter
        for pname, param in hf.named_parameters():
            if "norm" in pname or pname.endswith("bias"):
                param.add_(torch.randn_like(param) * 0.3)
    hf.save_pretrained(path)
    for file in tokenizer_dir.iterdir():
        if file.name.startswith("tokenizer"):
            shutil.copy(file, path / file.name)
    return hf


@pytest.fixture(scope="module", params=list(FAMILY_CONFIGS))
def family(request, tmp_path_factory, tiny_model_dir):
    """(name, model dir, transformers model) of each family in turn."""
    path = tmp_path_factory.mktemp(request.param)
    return request.param, path, build_family(request.param, path, tiny_model_dir)


def check_logprobs(hf, prompt: list[int], tokens: list[int], entries) -> None:
    reference = hf_logprobs(hf, prompt, tokens)
    assert len(entries) == len(tokens)
    for row, token, entry in zip(reference, tokens, entries, strict=True):
        assert entry.token_id == token
        values, ids = row.topk(TOP_K)
        assert [t for t, _ in entry.top] == ids.tolist()
        got = torch.tensor([v for _, v in entry.top])
        torch.testing.assert_close(got, values, atol=LOGPROB_ATOL, rtol=0)


async def run_rounds(engine, hf) -> None:
    params = SamplingParams(max_tokens=NEW_TOKENS, logprobs=TOP_K, ignore_eos=True)
    for round_prompts in (FIRST, SECOND):
        streams = [engine.add_request(p, params) for p in round_prompts]
        results = await asyncio.gather(*(collect_entries(s) for s in streams))
        for prompt, (tokens, entries, last) in zip(round_prompts, results, strict=True):
            assert tokens == hf_greedy(hf, prompt, NEW_TOKENS), prompt[:3]
            check_logprobs(hf, prompt, tokens, entries)
            if round_prompts is SECOND:
                assert last.cached_tokens >= BLOCK_SIZE  # the prefix came from the cache


async def collect_entries(stream):
    tokens, entries, last = [], [], None
    async for out in stream:
        tokens += out.token_ids
        entries += out.logprobs or []
        last = out
    return tokens, entries, last


@pytest.mark.parametrize("path", ["cpu-cpp", "cpu-torch", "reference"])
async def test_family_matches_transformers(family, path, monkeypatch):
    from mellea.engine.engine import Engine

    name, path_dir, hf = family
    if path == "reference":
        monkeypatch.setenv("MELLEA_ENGINE_REFERENCE", "1")
    elif path == "cpu-torch":  # the CPU path without its C++ ops
        monkeypatch.setenv("MELLEA_CPU_KERNEL", "0")
    # A float32 KV cache: the families are held to transformers' fp32 logprobs.
    engine = Engine(
        str(path_dir),
        block_size=BLOCK_SIZE,
        max_num_batched_tokens=CHUNK,
        kv_cache_dtype="float32",
    )
    try:
        expected = {"cpu-cpp": "cpp", "cpu-torch": "torch", "reference": "reference"}[path]
        assert engine.stats()["compute_path"] == expected
        expected_len = 64 if name == "phi3" else 128  # longrope: the short-factor range
        assert engine.max_model_len == expected_len
        await run_rounds(engine, hf)
    finally:
        engine.shutdown()


async def test_window_shorter_than_prompt_changes_the_output(tmp_path, tiny_model_dir):
    """The sliding window is applied, not just accepted: without it tokens differ."""
    from mellea.engine.engine import Engine

    hf = build_family("mistral", tmp_path, tiny_model_dir)
    engine = Engine(str(tmp_path), kv_cache_dtype="float32")
    try:
        prompt = FIRST[2]
        tokens, _, _ = await collect(engine.add_request(prompt, SamplingParams(max_tokens=8)))
    finally:
        engine.shutdown()
    hf.config.sliding_window = None
    hf.model.config.sliding_window = None
    assert tokens != hf_greedy(hf, prompt, 8)


@pytest.mark.parametrize("kv_heads", [1, 2])
@pytest.mark.parametrize("name", list(FAMILY_CONFIGS))
async def test_family_with_fewer_kv_heads_than_heads(name, kv_heads, tmp_path, tiny_model_dir):
    """Grouped-query (2 KV heads for 4) and multi-query (1) attention in every family,
    on the default CPU path: q/k norms over the whole projection (OLMo 2) must take
    the KV heads' width, not the query heads' (issue 21)."""
    from mellea.engine.engine import Engine

    assert COMMON["num_attention_heads"] > kv_heads
    hf = build_family(name, tmp_path, tiny_model_dir, num_key_value_heads=kv_heads)
    assert hf.config.num_key_value_heads == kv_heads
    engine = Engine(str(tmp_path), kv_cache_dtype="float32")
    try:
        assert engine.model_config.num_kv_heads == kv_heads
        params = SamplingParams(max_tokens=NEW_TOKENS, logprobs=TOP_K, ignore_eos=True)
        for prompt in FIRST:
            tokens, entries, _ = await collect_entries(engine.add_request(prompt, params))
            assert tokens == hf_greedy(hf, prompt, NEW_TOKENS)
            check_logprobs(hf, prompt, tokens, entries)
    finally:
        engine.shutdown()

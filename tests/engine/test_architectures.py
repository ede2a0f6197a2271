"""The model is a config away from Qwen2 (q/k/v bias), Mistral and scaled RoPE."""

from __future__ import annotations

import shutil

import pytest
import torch

from mellea.engine.types import SamplingParams
from tests.engine.conftest import generate, hf_greedy

PROMPTS = [list(range(300, 311)), list(range(7000, 7029))]


def _tiny(kind: str):
    from transformers import LlamaConfig, MistralConfig, Qwen2Config

    common = dict(
        vocab_size=49152,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        initializer_range=0.5,
        bos_token_id=1,
        eos_token_id=2,
    )
    if kind == "qwen2":
        return Qwen2Config(**common, tie_word_embeddings=False)
    if kind == "mistral":
        return MistralConfig(**common, head_dim=16, sliding_window=96)
    return LlamaConfig(
        **common,
        head_dim=16,
        rope_parameters={
            "rope_type": "llama3",
            "rope_theta": 500000.0,
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 32,
        },
    )


@pytest.mark.parametrize("kind", ["qwen2", "mistral", "llama3-rope"])
async def test_variant_matches_hf(kind, tmp_path, tiny_model_dir):
    from transformers import AutoModelForCausalLM

    from mellea.engine.engine import Engine

    torch.manual_seed(1)
    config = _tiny(kind)
    hf = AutoModelForCausalLM.from_config(config).eval()
    if kind == "qwen2":  # make the q/k/v biases matter
        for layer in hf.model.layers:
            torch.nn.init.normal_(layer.self_attn.q_proj.bias, std=0.5)
            torch.nn.init.normal_(layer.self_attn.k_proj.bias, std=0.5)
            torch.nn.init.normal_(layer.self_attn.v_proj.bias, std=0.5)
    hf.save_pretrained(tmp_path)
    for file in tiny_model_dir.iterdir():
        if file.name.startswith("tokenizer"):
            shutil.copy(file, tmp_path / file.name)
    engine = Engine(str(tmp_path))
    try:
        if kind == "mistral":
            assert engine.max_model_len == 96
        results = await generate(engine, PROMPTS, SamplingParams(max_tokens=10))
        for prompt, (tokens, _, _) in zip(PROMPTS, results, strict=True):
            assert tokens == hf_greedy(hf, prompt, 10)
    finally:
        engine.shutdown()

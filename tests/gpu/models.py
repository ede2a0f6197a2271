"""Random-weight checkpoints with the shapes of real models, for the GPU tests and benchmarks.

No model hub is reachable where the GPU tests run, so the models are built from their
configs with transformers and saved, with the default model's tokenizer beside them
(from ``$MELLEA_GPU_TOKENIZER``, a folder holding its tokenizer files, else from the
default model's local copy).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import torch

# SmolLM2-135M-Instruct, the default model: 30 layers, 9 query heads over 3 KV heads x 64.
SMOLLM2_135M: dict[str, Any] = {
    "vocab_size": 49152,
    "hidden_size": 576,
    "intermediate_size": 1536,
    "num_hidden_layers": 30,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "head_dim": 64,
    "max_position_embeddings": 8192,
    "rope_theta": 100000.0,
    "rms_norm_eps": 1e-5,
    "tie_word_embeddings": True,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pad_token_id": 2,
}

# Llama 3.2 1B: 16 layers, 32 query heads over 8 KV heads x 64, llama3-scaled RoPE.
LLAMA32_1B: dict[str, Any] = {
    "vocab_size": 128256,
    "hidden_size": 2048,
    "intermediate_size": 8192,
    "num_hidden_layers": 16,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 64,
    "max_position_embeddings": 131072,
    "rope_theta": 500000.0,
    "rope_scaling": {
        "factor": 32.0,
        "high_freq_factor": 4.0,
        "low_freq_factor": 1.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    },
    "rms_norm_eps": 1e-5,
    "tie_word_embeddings": True,
    "bos_token_id": 128000,
    "eos_token_id": 128001,
    "pad_token_id": 128001,
}


def tokenizer_dir() -> Path | None:
    """Where the default model's tokenizer files are, or None if nowhere here."""
    env = os.environ.get("MELLEA_GPU_TOKENIZER")
    if env:
        return Path(env)
    try:
        from mellea.engine.loader import resolve_model

        return Path(resolve_model(None, report=lambda _: None))
    except Exception:
        return None


def make_random_model(
    path: Path,
    shape: dict[str, Any],
    *,
    dtype: torch.dtype = torch.float32,
    init_range: float = 0.2,
    seed: int = 0,
    with_tokenizer: bool = True,
) -> Path:
    """Save a random Llama-family checkpoint of ``shape`` (a LlamaConfig's fields) to ``path``.

    A wider init range than training's 0.02 makes the logits peaked, so greedy picks
    sit far from ties and agree across kernels. The weights are drawn on the GPU when
    there is one (a 1B model draws in seconds there).
    """
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(**shape, initializer_range=init_range)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    with torch.device(device):
        model = LlamaForCausalLM(config).to(dtype)
    model.save_pretrained(path)
    source = tokenizer_dir() if with_tokenizer else None
    if source is not None:
        for file in source.iterdir():
            if file.name.startswith("tokenizer") or file.suffix == ".jinja":
                shutil.copy(file, path / file.name)
    return path

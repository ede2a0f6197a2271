"""Engine settings and the model shape read from a Hugging Face ``config.json``."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import torch

DEFAULT_CPU_KV_BYTES = 1 << 30  # 1 GiB
DEFAULT_GPU_KV_FRACTION = 0.5  # of free device memory


@dataclass
class ModelConfig:
    """The shape of a Llama-family decoder (Llama, SmolLM, Mistral, Qwen2)."""

    model_type: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    max_position_embeddings: int  # capped at the sliding window, if any (see Engine)
    tie_word_embeddings: bool
    qkv_bias: bool
    o_bias: bool
    mlp_bias: bool
    rope_theta: float
    rope_type: str
    sliding_window: int | None = None
    hf_config: dict = field(repr=False, default_factory=dict)

    @classmethod
    def from_dir(cls, path: str | Path) -> ModelConfig:
        """Read ``config.json`` of a Hugging Face model directory."""
        raw = json.loads((Path(path) / "config.json").read_text())
        return cls.from_dict(raw)

    @classmethod
    def from_dict(cls, raw: dict) -> ModelConfig:
        """Build from a Hugging Face config dictionary."""
        model_type = raw.get("model_type", "llama")
        heads = raw["num_attention_heads"]
        rope = raw.get("rope_parameters") or raw.get("rope_scaling") or {}
        theta = rope.get("rope_theta", raw.get("rope_theta", 10000.0))
        rope_type = rope.get("rope_type", rope.get("type", "default"))
        attention_bias = bool(raw.get("attention_bias", False))
        # Qwen2 puts a bias on q/k/v only; Llama's ``attention_bias`` covers o_proj too.
        qkv_bias = model_type in ("qwen2",) or attention_bias
        window = raw.get("sliding_window")
        if model_type == "qwen2" and not raw.get("use_sliding_window"):
            window = None
        return cls(
            model_type=model_type,
            vocab_size=raw["vocab_size"],
            hidden_size=raw["hidden_size"],
            intermediate_size=raw["intermediate_size"],
            num_layers=raw["num_hidden_layers"],
            num_heads=heads,
            num_kv_heads=raw.get("num_key_value_heads") or heads,
            head_dim=raw.get("head_dim") or raw["hidden_size"] // heads,
            rms_norm_eps=raw.get("rms_norm_eps", 1e-6),
            max_position_embeddings=raw.get("max_position_embeddings", 2048),
            tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
            qkv_bias=qkv_bias,
            o_bias=attention_bias and model_type != "qwen2",
            mlp_bias=bool(raw.get("mlp_bias", False)),
            rope_theta=float(theta),
            rope_type=rope_type,
            sliding_window=window,
            hf_config=raw,
        )

    def kv_bytes_per_token(self, dtype: torch.dtype) -> int:
        """Bytes of K and V cache one token takes over all layers."""
        item = torch.empty((), dtype=dtype).element_size()
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * item


@dataclass
class EngineConfig:
    """How the engine runs: where, in what precision, and within what limits."""

    model_path: Path
    block_size: int = 16
    max_num_seqs: int = 64
    max_num_batched_tokens: int = 2048
    dtype: torch.dtype = torch.float32
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    max_model_len: int = 0  # 0: the model's max_position_embeddings


def resolve_device(device: str | torch.device | None) -> torch.device:
    """``None`` picks CUDA when present, else CPU."""
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def resolve_dtype(dtype: str | torch.dtype | None, device: torch.device) -> torch.dtype:
    """``None`` picks fp32 on CPU (bf16 matmuls are slower there) and bf16 on GPU."""
    if dtype is None:
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if isinstance(dtype, torch.dtype):
        return dtype
    names = {
        "float32": torch.float32,
        "fp32": torch.float32,
        "float": torch.float32,
        "bfloat16": torch.bfloat16,
        "bf16": torch.bfloat16,
        "float16": torch.float16,
        "fp16": torch.float16,
        "half": torch.float16,
    }
    if dtype not in names:
        raise ValueError(f"unknown dtype {dtype!r}; use one of {sorted(names)}")
    return names[dtype]


def total_memory_bytes(device: torch.device) -> int:
    """Physical memory of the device: RAM on CPU, device memory on CUDA."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def kv_cache_budget(requested: int | float | None, device: torch.device, needed_bytes: int) -> int:
    """Bytes for the KV cache.

    ``requested`` is bytes (int), a fraction of the device's memory (float in (0, 1]),
    or ``None`` for the default: 1 GiB on CPU, half the free memory on GPU. The default
    is capped by ``needed_bytes`` (what the longest requests could ever use), so tiny
    models do not reserve a gigabyte for nothing; an explicit budget is taken as given.
    """
    if requested is None:
        if device.type == "cuda":
            free, _ = torch.cuda.mem_get_info(device)
            budget = int(free * DEFAULT_GPU_KV_FRACTION)
        else:
            budget = DEFAULT_CPU_KV_BYTES
        return min(budget, needed_bytes)
    if isinstance(requested, float):
        if not 0.0 < requested <= 1.0:
            raise ValueError(f"kv_cache_memory as a fraction must be in (0, 1], got {requested}")
        return int(total_memory_bytes(device) * requested)
    if requested <= 0:
        raise ValueError(f"kv_cache_memory must be positive, got {requested}")
    return int(requested)

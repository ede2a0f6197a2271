"""Engine settings and the model shape read from a Hugging Face ``config.json``."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import torch

from mellea.engine.compute_path import ComputePath
from mellea.engine.families import (
    STATIC_ROPE_TYPES,
    Family,
    UnsupportedModelError,
    family_of,
)
from mellea.engine.formats.resolve import compute_dtype, resolve_format

DEFAULT_CPU_KV_BYTES = 1 << 30  # 1 GiB
DEFAULT_GPU_KV_FRACTION = 0.5  # of free device memory
# What a KV-cache dtype setting may be (``auto``: see resolve_kv_dtype).
KV_CACHE_DTYPES = {
    "auto": None,
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}


@dataclass
class ModelConfig:
    """The shape of a decoder of one of the :data:`~mellea.engine.families.FAMILIES`.

    Built by :meth:`from_dict`, which refuses (``UnsupportedModelError``) any config
    key the family does not understand, so a config is never half-read.
    """

    model_type: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    max_position_embeddings: int  # the longest context the engine serves
    tie_word_embeddings: bool
    qkv_bias: bool
    o_bias: bool
    mlp_bias: bool
    family: Family = field(default_factory=Family)
    activation: str = "silu"  # or "gelu_tanh"
    rotary_dim: int = 0  # leading dims of each head that RoPE rotates (0: all)
    # RoPE parameters ("rope_type", "rope_theta", scaling keys) per layer kind, and the
    # kind and attention window (None: global) of each layer.
    rope: dict[str, dict] = field(default_factory=dict)
    layer_kinds: tuple[str, ...] = ()
    layer_windows: tuple[int | None, ...] = ()
    embed_scale: float = 1.0
    residual_multiplier: float = 1.0
    attn_scale: float = 0.0  # 0: head_dim ** -0.5
    logits_multiplier: float = 1.0
    final_softcap: float | None = None
    hf_config: dict = field(repr=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.rotary_dim = self.rotary_dim or self.head_dim
        self.attn_scale = self.attn_scale or self.head_dim**-0.5
        if not self.rope:
            self.rope = {FULL: {"rope_type": "default", "rope_theta": 10000.0}}
        self.layer_kinds = self.layer_kinds or (FULL,) * self.num_layers
        self.layer_windows = self.layer_windows or (None,) * self.num_layers

    @classmethod
    def from_dir(cls, path: str | Path) -> ModelConfig:
        """Read ``config.json`` of a Hugging Face model directory."""
        raw = json.loads((Path(path) / "config.json").read_text())
        return cls.from_dict(raw)

    @classmethod
    def from_dict(cls, raw: dict) -> ModelConfig:
        """Build from a Hugging Face config dictionary (UnsupportedModelError if it can't)."""
        family = family_of(raw)
        model_type = raw.get("model_type", "llama")
        heads = raw["num_attention_heads"]
        head_dim = raw.get("head_dim") or raw["hidden_size"] // heads
        layers = raw["num_hidden_layers"]
        rope = _rope_by_kind(raw)
        for params in rope.values():
            if params.get("rope_type", "default") not in STATIC_ROPE_TYPES:
                raise UnsupportedModelError(f"{model_type} rope type {params['rope_type']!r}")
        max_len = raw.get("max_position_embeddings", 2048)
        if any(p.get("rope_type") == "longrope" for p in rope.values()):
            # Transformers switches to the long factors for a whole forward pass once a
            # sequence passes the original length; within it the short ones apply always.
            original = next(p for p in rope.values()).get("original_max_position_embeddings")
            max_len = min(max_len, original or raw.get("original_max_position_embeddings", max_len))
        kinds, windows = _layer_windows(raw, model_type, layers, max_len)
        if set(kinds) - set(rope):
            rope = {kind: rope.get(kind, next(iter(rope.values()))) for kind in set(kinds)}
        partial = next(iter(rope.values())).get(
            "partial_rotary_factor", raw.get("partial_rotary_factor", 1.0)
        )
        attention_bias = bool(raw.get("attention_bias", False))
        scale = raw.get("attention_multiplier")
        if "query_pre_attn_scalar" in raw:
            scale = raw["query_pre_attn_scalar"] ** -0.5
        embed_scale = raw.get("embedding_multiplier", 1.0)
        if family.norm_offset:  # Gemma scales embeddings by sqrt(hidden_size)
            embed_scale = raw["hidden_size"] ** 0.5
        activation = raw.get(family.activation_key, "silu")
        return cls(
            model_type=model_type,
            vocab_size=raw["vocab_size"],
            hidden_size=raw["hidden_size"],
            intermediate_size=raw[family.intermediate_key],
            num_layers=layers,
            num_heads=heads,
            num_kv_heads=raw.get("num_key_value_heads") or heads,
            head_dim=head_dim,
            rms_norm_eps=raw.get("rms_norm_eps", 1e-6),
            max_position_embeddings=max_len,
            tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
            qkv_bias=family.qkv_bias or attention_bias,
            o_bias=attention_bias and not family.qkv_bias,
            mlp_bias=bool(raw.get("mlp_bias", False)),
            family=family,
            activation="silu" if activation == "silu" else "gelu_tanh",
            rotary_dim=int(head_dim * partial),
            rope=rope,
            layer_kinds=kinds,
            layer_windows=windows,
            embed_scale=float(embed_scale),
            residual_multiplier=float(raw.get("residual_multiplier", 1.0)),
            attn_scale=float(scale or 0.0),
            logits_multiplier=1.0 / float(raw.get("logits_scaling", 1.0)),
            final_softcap=raw.get("final_logit_softcapping"),
            hf_config=raw,
        )

    def kv_bytes_per_token(self, dtype: torch.dtype) -> int:
        """Bytes of K and V cache one token takes over all layers."""
        item = torch.empty((), dtype=dtype).element_size()
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * item


FULL, SLIDING = "full_attention", "sliding_attention"


def _rope_by_kind(raw: dict) -> dict[str, dict]:
    """RoPE parameters per layer kind, from the v5 ``rope_parameters`` or older keys."""
    params = raw.get("rope_parameters")
    if isinstance(params, dict) and params and all(isinstance(v, dict) for v in params.values()):
        return {kind: _rope_entry(p, raw) for kind, p in params.items()}
    base = dict(params or raw.get("rope_scaling") or {})
    rope = {FULL: _rope_entry(base, raw)}
    if "rope_local_base_freq" in raw:  # older Gemma 3 configs: local layers, plain RoPE
        rope[SLIDING] = {"rope_type": "default", "rope_theta": raw["rope_local_base_freq"]}
    return rope


def _rope_entry(params: dict, raw: dict) -> dict:
    entry = dict(params)
    entry["rope_type"] = entry.pop("type", None) or entry.get("rope_type") or "default"
    if entry["rope_type"] in ("su", "yarn") and "long_factor" in entry:
        entry["rope_type"] = "longrope"  # Phi-3's old name
    entry.setdefault("rope_theta", raw.get("rope_theta", 10000.0))
    return entry


def _layer_windows(
    raw: dict, model_type: str, layers: int, max_len: int
) -> tuple[tuple[str, ...], tuple[int | None, ...]]:
    """Each layer's kind and attention window; a window as long as the context is none."""
    window = raw.get("sliding_window")
    kinds = raw.get("layer_types")
    if kinds is not None:  # Granite 4 names full attention "attention"
        kinds = [FULL if kind == "attention" else kind for kind in kinds]
    if model_type == "gemma3_text":
        if kinds is None:
            pattern = raw.get("sliding_window_pattern") or raw.get("_sliding_window_pattern") or 6
            kinds = [FULL if (i + 1) % pattern == 0 else SLIDING for i in range(layers)]
    elif kinds is not None and any(kind != FULL for kind in kinds):
        raise UnsupportedModelError(f"{model_type} layer_types {sorted(set(kinds))}")
    elif model_type in ("mistral", "phi3") and window:
        kinds = [SLIDING] * layers
    else:
        kinds = [FULL] * layers
    if len(kinds) != layers or set(kinds) - {FULL, SLIDING}:
        raise UnsupportedModelError(f"{model_type} layer_types {kinds}")
    if window is not None and window >= max_len:
        window = None
    return tuple(kinds), tuple(window if kind == SLIDING else None for kind in kinds)


@dataclass
class EngineConfig:
    """How the engine runs: where, in what precision, and within what limits."""

    model_path: Path
    block_size: int = 16
    max_num_seqs: int = 64
    max_num_batched_tokens: int = 2048
    dtype: torch.dtype = torch.float32  # of the forward pass
    kv_cache_dtype: torch.dtype | None = None  # of the KV cache; None: dtype's
    weights: str = "float32"  # weight format (mellea.engine.formats): float32, bfloat16, int8
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    max_model_len: int = 0  # 0: the model's max_position_embeddings
    # How the forward pass computes (mellea.engine.compute_path); None: chosen from the
    # device, dtype and environment switches, then set to what the built model runs.
    compute_path: ComputePath | None = None


def resolve_device(device: str | torch.device | None) -> torch.device:
    """``None`` picks CUDA when present, else CPU."""
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def resolve_dtype(dtype: str | torch.dtype | None, device: torch.device) -> torch.dtype:
    """The dtype of the forward pass and KV cache for a ``dtype`` setting (a weight
    format, see :mod:`mellea.engine.formats`): fp32 on CPU for every format but float16,
    the format's own dtype on GPU (``None``: bf16)."""
    return compute_dtype(resolve_format(dtype, device), device)


def resolve_kv_dtype(
    kv_dtype: str | torch.dtype | None, device: torch.device, dtype: torch.dtype
) -> torch.dtype:
    """The KV cache's dtype for a setting of :data:`KV_CACHE_DTYPES` (or a dtype):
    ``auto`` or ``None`` is float16 on CPU (half float32's bytes a token, as llama.cpp's
    default f16 cache; the attention reads it back as fp32) and the forward pass's
    ``dtype`` on GPU."""
    if isinstance(kv_dtype, torch.dtype):
        chosen: torch.dtype | None = kv_dtype
    elif kv_dtype is None or kv_dtype in KV_CACHE_DTYPES:
        chosen = KV_CACHE_DTYPES[kv_dtype or "auto"]
    else:
        names = ", ".join(KV_CACHE_DTYPES)
        raise ValueError(f"kv_cache_dtype must be one of {names}, got {kv_dtype!r}")
    if chosen is None:
        return torch.float16 if device.type == "cpu" else dtype
    if chosen not in KV_CACHE_DTYPES.values():
        raise ValueError(f"kv_cache_dtype {chosen} is not a cache dtype")
    return chosen


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

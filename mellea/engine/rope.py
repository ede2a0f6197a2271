"""Rotary tables of a model: one cos|sin table per layer kind, with partial rotary.

Plain RoPE is computed here; scaled types (linear, llama3, yarn, longrope) take their
frequencies from transformers' own functions, so they match the checkpoints' maths.
"""

from __future__ import annotations

import torch

from mellea.engine import kernels
from mellea.engine.config import ModelConfig


def rope_tables(cfg: ModelConfig, max_positions: int) -> dict[str, torch.Tensor]:
    """[max_positions, rotary_dim] fp32 cos|sin table per layer kind the model uses."""
    return {kind: _table(cfg, kind, max_positions) for kind in sorted(set(cfg.layer_kinds))}


def uses_transformers(cfg: ModelConfig) -> bool:
    """Whether a layer kind's RoPE is a scaled type, whose frequencies come from
    transformers (see :func:`import_transformers_rope`)."""
    return any(params["rope_type"] != "default" for params in cfg.rope.values())


def import_transformers_rope(cfg: ModelConfig) -> None:
    """Import all that :func:`rope_tables` will import from transformers for ``cfg``
    (the config class of its model type too). The engine does it before its thread
    starts building the model, as its own thread then imports the tokenizer from
    transformers: two threads importing a package's modules at once can find one
    half-initialized (``ImportError``)."""
    from transformers import AutoConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS  # noqa: F401

    AutoConfig.for_model(**cfg.hf_config)


def _table(cfg: ModelConfig, kind: str, max_positions: int) -> torch.Tensor:
    params = cfg.rope[kind]
    if params["rope_type"] == "default":
        return kernels.build_cos_sin_cache(cfg.rotary_dim, max_positions, params["rope_theta"])
    from transformers import AutoConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    hf = AutoConfig.for_model(**cfg.hf_config)
    nested = isinstance((getattr(hf, "rope_parameters", None) or {}).get(kind), dict)
    init = ROPE_INIT_FUNCTIONS[params["rope_type"]]
    if nested:
        inv_freq, factor = init(hf, torch.device("cpu"), layer_type=kind)
    else:
        inv_freq, factor = init(hf, torch.device("cpu"))
    freqs = torch.outer(torch.arange(max_positions, dtype=torch.float64), inv_freq.double())
    return (torch.cat([freqs.cos(), freqs.sin()], dim=-1) * factor).float()


def rotations(cos_sin: torch.Tensor, head_dim: int) -> torch.Tensor:
    """A cos|sin table as complex rotations [P, head_dim / 2] for the CPU path.

    Pairs past the rotary part (partial rotary) get the rotation 1: they pass through.
    """
    half = cos_sin.shape[1] // 2
    rot = torch.ones(cos_sin.shape[0], head_dim // 2, dtype=torch.complex64)
    rot[:, :half] = torch.complex(cos_sin[:, :half], cos_sin[:, half:])
    return rot


def interleaved_order(head_dim: int, rotary_dim: int) -> torch.Tensor:
    """Order of a head's dims that puts each rotary pair side by side.

    Rotate-half RoPE pairs dim i with i + rotary_dim / 2; the CPU path stores q/k in
    this order so RoPE is one complex multiply. Dims past ``rotary_dim`` keep theirs.
    """
    half = rotary_dim // 2
    pairs = torch.stack([torch.arange(half), torch.arange(half) + half], dim=1).flatten()
    return torch.cat([pairs, torch.arange(rotary_dim, head_dim)])

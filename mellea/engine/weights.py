"""Load a Hugging Face checkpoint (``*.safetensors``) into a :class:`DecoderModel`.

Separate q/k/v and gate/up projections are copied into our fused ones as they come
in; checkpoints that are fused already (Phi-3) load as they are. Every parameter must
be filled completely. A checkpoint that does not fit the family (an unexpected or
missing tensor, a wrong shape) raises ``UnsupportedModelError``, which sends the
model to the transformers fallback.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from mellea.engine.config import ModelConfig
from mellea.engine.families import UnsupportedModelError


def _our_name(hf_name: str, renames: dict[str, str]) -> str:
    """Our parameter name for a checkpoint tensor; norms are bare parameters."""
    name = hf_name.removeprefix("model.")
    for theirs, ours in renames.items():
        name = name.replace(f".{theirs}.", f".{ours}.")
    if name.endswith("norm.weight"):
        return name.removesuffix(".weight")
    return name


def _fused_pieces(cfg: ModelConfig) -> dict[str, tuple[str, int, int]]:
    """Checkpoint module -> (our fused module, first row, rows)."""
    q, kv = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
    inter = cfg.intermediate_size
    return {
        "self_attn.q_proj": ("self_attn.qkv_proj", 0, q),
        "self_attn.k_proj": ("self_attn.qkv_proj", q, kv),
        "self_attn.v_proj": ("self_attn.qkv_proj", q + kv, kv),
        "mlp.gate_proj": ("mlp.gate_up_proj", 0, inter),
        "mlp.up_proj": ("mlp.gate_up_proj", inter, inter),
    }


def load_weights(model: nn.Module, cfg: ModelConfig, model_dir: str | Path) -> None:
    """Copy the checkpoint in ``model_dir`` into ``model``'s parameters."""
    from safetensors import safe_open

    files = sorted(Path(model_dir).glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors files in {model_dir}")
    params = dict(model.named_parameters())
    fused = _fused_pieces(cfg)
    filled = dict.fromkeys(params, 0)  # rows loaded per parameter
    with torch.no_grad():
        for file in files:
            with safe_open(str(file), framework="pt") as handle:
                for hf_name in handle.keys():  # noqa: SIM118 (not a dict)
                    target, first, rows = _our_name(hf_name, cfg.family.renames), 0, None
                    for piece, (ours, offset, count) in fused.items():
                        if f".{piece}." in target:
                            target, first, rows = target.replace(piece, ours), offset, count
                            break
                    if target not in params:
                        if "rotary_emb" in target or target == "lm_head.weight":
                            continue  # recomputed / tied to the embedding
                        raise UnsupportedModelError(f"unexpected weight {hf_name}")
                    dest = params[target]
                    if rows is not None:
                        dest = dest.narrow(0, first, rows)
                    tensor = handle.get_tensor(hf_name)
                    if dest.shape != tensor.shape:
                        raise UnsupportedModelError(
                            f"{hf_name}: shape {tuple(tensor.shape)}, expected {tuple(dest.shape)}"
                        )
                    dest.copy_(tensor)
                    filled[target] += dest.shape[0]
    missing = [name for name, rows in filled.items() if rows != params[name].shape[0]]
    if missing:
        raise UnsupportedModelError(f"weights missing from the checkpoint: {missing[:5]}")

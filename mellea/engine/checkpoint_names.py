"""How a Hugging Face checkpoint's tensor names map onto our parameters: the family's
renames, norms as bare parameters, and the separate q/k/v and gate/up projections
that our fused ones gather. The weights loader and the LoRA loader both read them."""

from __future__ import annotations

from mellea.engine.config import ModelConfig


def our_name(hf_name: str, renames: dict[str, str]) -> str:
    """Our parameter name for the checkpoint tensor ``hf_name`` (``renames``: the
    family's module renames, theirs -> ours); norms are bare parameters."""
    name = hf_name.removeprefix("model.")
    for theirs, ours in renames.items():
        name = name.replace(f".{theirs}.", f".{ours}.")
    if name.endswith("norm.weight"):
        return name.removesuffix(".weight")
    return name


def fused_pieces(cfg: ModelConfig) -> dict[str, tuple[str, int, int]]:
    """Each checkpoint projection our fused ones gather, as (our fused module, first
    row, rows): q/k/v into ``self_attn.qkv_proj``, gate/up into ``mlp.gate_up_proj``."""
    q, kv = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
    inter = cfg.intermediate_size
    return {
        "self_attn.q_proj": ("self_attn.qkv_proj", 0, q),
        "self_attn.k_proj": ("self_attn.qkv_proj", q, kv),
        "self_attn.v_proj": ("self_attn.qkv_proj", q + kv, kv),
        "mlp.gate_proj": ("mlp.gate_up_proj", 0, inter),
        "mlp.up_proj": ("mlp.gate_up_proj", inter, inter),
    }


def checkpoint_names(ours: list[str], cfg: ModelConfig) -> list[str]:
    """The checkpoint names that may hold our parameters ``ours`` (both a fused
    module's own name and its pieces'), for mapping a GGUF's tensor names."""
    back = {ours_: theirs for theirs, ours_ in cfg.family.renames.items()}
    names = []
    for name in ours:
        if not name.endswith((".weight", ".bias")):
            name += ".weight"  # a bare norm parameter
        for ours_, theirs in back.items():
            name = name.replace(f".{ours_}.", f".{theirs}.")
        hf = name if name.startswith("lm_head.") else f"model.{name}"
        names.append(hf)
        for piece, (fused, _, _) in fused_pieces(cfg).items():
            if f".{fused}." in hf:
                names.append(hf.replace(fused, piece))
    return names

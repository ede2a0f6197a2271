"""The decoder families the fast engine runs, each a small set of switches.

A family is picked by ``model_type`` in ``config.json``. Every key of that config
must be one the family understands, with a value it handles; anything else raises
:class:`UnsupportedModelError`, so a model the fast engine would run wrongly goes to
the transformers fallback instead (see :func:`mellea.engine.build_engine`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


class UnsupportedModelError(ValueError):
    """The fast engine does not cover this model's architecture or configuration."""


Check = Callable[[Any], bool]


def _any(_: Any) -> bool:
    return True


def _one_of(*values: Any) -> Check:
    return lambda value: value in values


def _off(value: Any) -> bool:
    return not value


@dataclass(frozen=True)
class Family:
    """How one family's decoder layer differs from Llama's.

    The four norms are named as in the family's checkpoints (``None``: absent). Pre-norm
    families normalise what goes into attention and the MLP; Gemma 3 also normalises
    what comes out of each, and OLMo 2 only what comes out.
    """

    attn_in_norm: str | None = "input_layernorm"
    attn_out_norm: str | None = None
    mlp_in_norm: str | None = "post_attention_layernorm"
    mlp_out_norm: str | None = None
    qk_norm: str | None = None  # "head": RMSNorm per head; "proj": over the whole q / k
    norm_offset: float = 0.0  # Gemma stores RMSNorm weights as (w - 1)
    qkv_bias: bool = False  # q/k/v carry a bias whatever ``attention_bias`` says (Qwen2)
    activation_key: str = "hidden_act"
    intermediate_key: str = "intermediate_size"  # the config key of the MLP width
    # Checkpoint module names that differ from ours (ours: mlp.gate_up_proj, ...).
    renames: dict[str, str] = field(default_factory=dict)
    # Keys whose transformers default the engine does not handle, so they must be set.
    required: tuple[str, ...] = ()
    # Keys this family reads beyond the common ones, with the values it handles.
    keys: dict[str, Check] = field(default_factory=dict)


# Keys that describe the checkpoint or training and do not change inference, and the
# shape keys every family reads.
_READ_ANY = [
    "architectures",
    "model_type",
    "dtype",
    "torch_dtype",
    "transformers_version",
    "_name_or_path",
    "_model_name_or_path",
    "bos_token_id",
    "eos_token_id",
    "pad_token_id",
    "unk_token_id",
    "sep_token_id",
    "initializer_range",
    "use_cache",
    "attention_dropout",
    "hidden_dropout",
    "embedding_dropout",
    "resid_pdrop",
    "embd_pdrop",
    "output_attentions",
    "output_hidden_states",
    "return_dict",
    "id2label",
    "label2id",
    "tokenizer_class",
    "auto_map",
    "unsloth_version",
    "cache_implementation",
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "rms_norm_eps",
    "max_position_embeddings",
    "tie_word_embeddings",
    "rope_parameters",
    "rope_scaling",
    "rope_theta",
    "attention_bias",
    "mlp_bias",
    "layer_types",
]

COMMON_KEYS: dict[str, Check] = {
    **dict.fromkeys(_READ_ANY, _any),
    "pretraining_tp": _one_of(1),
    "sliding_window": _one_of(None),
    "use_sliding_window": _off,
    "max_window_layers": _any,  # only read with use_sliding_window, which must be off
}

_SILU: dict[str, Check] = {"hidden_act": _one_of("silu")}
_WINDOWED: dict[str, Check] = {"sliding_window": _any}
_GRANITE_MULTIPLIERS: dict[str, Check] = dict.fromkeys(
    ("embedding_multiplier", "residual_multiplier", "attention_multiplier", "logits_scaling"), _any
)

FAMILIES: dict[str, Family] = {
    "llama": Family(keys=_SILU),
    "mistral": Family(keys={**_SILU, **_WINDOWED}),
    # Qwen configs name a window even when ``use_sliding_window`` (checked off) unsets it.
    "qwen2": Family(qkv_bias=True, keys={**_SILU, **_WINDOWED}),
    "qwen3": Family(qk_norm="head", keys={**_SILU, **_WINDOWED}),
    "granite": Family(keys={**_SILU, **_GRANITE_MULTIPLIERS}),
    # Granite 4 dense checkpoints (granite-4.0-micro) are "hybrids" of attention layers
    # only, without experts; any Mamba layer, expert or NoPE sends them to the fallback.
    "granitemoehybrid": Family(
        intermediate_key="shared_intermediate_size",
        required=("layer_types", "num_local_experts", "position_embedding_type"),
        renames={
            "shared_mlp.input_linear": "mlp.gate_up_proj",
            "shared_mlp.output_linear": "mlp.down_proj",
        },
        keys={
            **_SILU,
            **_GRANITE_MULTIPLIERS,
            "shared_intermediate_size": _any,
            "num_local_experts": _one_of(0),
            "position_embedding_type": _one_of("rope"),
            "layer_types": lambda kinds: all(k in ("attention", "full_attention") for k in kinds),
            # Read only by Mamba layers and experts, which must be absent.
            **dict.fromkeys(
                (
                    "num_experts_per_tok",
                    "output_router_logits",
                    "router_aux_loss_coef",
                    "mamba_chunk_size",
                    "mamba_conv_bias",
                    "mamba_d_conv",
                    "mamba_d_head",
                    "mamba_d_state",
                    "mamba_expand",
                    "mamba_n_groups",
                    "mamba_n_heads",
                    "mamba_proj_bias",
                    "time_step_limit",
                    "init_method",
                ),
                _any,
            ),
        },
    ),
    "gemma3_text": Family(
        attn_out_norm="post_attention_layernorm",
        mlp_in_norm="pre_feedforward_layernorm",
        mlp_out_norm="post_feedforward_layernorm",
        qk_norm="head",
        norm_offset=1.0,
        activation_key="hidden_activation",
        keys={
            **_WINDOWED,
            "hidden_activation": _one_of("gelu_pytorch_tanh", "gelu_tanh"),
            "hidden_act": _one_of("gelu_pytorch_tanh", "gelu_tanh"),
            "query_pre_attn_scalar": _any,
            "final_logit_softcapping": _any,
            "attn_logit_softcapping": _one_of(None),
            "use_bidirectional_attention": _off,
            "rope_local_base_freq": _any,
            "_sliding_window_pattern": _any,
            "sliding_window_pattern": _any,
        },
    ),
    "phi3": Family(
        keys={
            **_SILU,
            **_WINDOWED,
            "original_max_position_embeddings": _any,
            "partial_rotary_factor": _any,
            "lm_head_bias": _off,
            "full_attn_mod": _one_of(1),
            "interpolate_factor": _one_of(1, 1.0),
        }
    ),
    "olmo2": Family(
        attn_in_norm=None,
        attn_out_norm="post_attention_layernorm",
        mlp_in_norm=None,
        mlp_out_norm="post_feedforward_layernorm",
        qk_norm="proj",
        keys=_SILU,
    ),
}

# RoPE types whose frequencies do not depend on the sequence length.
STATIC_ROPE_TYPES = {"default", "linear", "llama3", "yarn", "longrope"}


def family_of(raw: dict) -> Family:
    """The family of a config dictionary, after checking every key it holds.

    Raises :class:`UnsupportedModelError` naming the first key the family does not
    handle, or the architecture when no family covers it.
    """
    model_type = raw.get("model_type", "llama")
    family = FAMILIES.get(model_type)
    if family is None:
        raise UnsupportedModelError(f"architecture {model_type!r}")
    missing = [key for key in family.required if key not in raw]
    if missing:
        raise UnsupportedModelError(f"{model_type} config without {missing[0]!r}")
    checks = {**COMMON_KEYS, **family.keys}
    for key, value in raw.items():
        check = checks.get(key)
        if check is None:
            raise UnsupportedModelError(f"{model_type} config key {key!r}")
        if not check(value):
            raise UnsupportedModelError(f"{model_type} config {key}={value!r}")
    return family

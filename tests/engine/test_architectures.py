"""Reading config.json: a key or value the fast engine does not handle is refused, never ignored."""

from __future__ import annotations

import pytest

from mellea.engine.config import FULL, SLIDING, ModelConfig
from mellea.engine.families import UnsupportedModelError

BASE = dict(
    vocab_size=1000,
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=4096,
    rms_norm_eps=1e-6,
    hidden_act="silu",
)


def config(model_type: str, **extra) -> dict:
    raw = {"model_type": model_type, **BASE, **extra}
    if model_type == "gemma3_text":  # Gemma names its activation differently
        raw["hidden_activation"] = raw.pop("hidden_act")
    return raw


def granite4(**changes) -> dict:
    """A Granite 4 dense config (granitemoehybrid of attention layers), with ``changes``;
    a change to None removes the key."""
    raw = config(
        "granitemoehybrid",
        layer_types=["attention"] * 4,
        num_local_experts=0,
        position_embedding_type="rope",
        shared_intermediate_size=128,
    )
    raw.update(changes)
    return {k: v for k, v in raw.items() if v is not None or k not in changes}


@pytest.mark.parametrize(
    ("raw", "named"),
    [
        (config("granite", mup_scale=2.0), "mup_scale"),  # a multiplier we do not know
        (config("llama", sliding_window=128), "sliding_window"),  # Llama has no window
        (config("llama", hidden_act="gelu"), "hidden_act"),
        (config("llama", quantization_config={"quant_method": "awq"}), "quantization_config"),
        (config("llama", pretraining_tp=2), "pretraining_tp"),
        (config("qwen3", use_sliding_window=True, sliding_window=64), "use_sliding_window"),
        (config("llama", rope_scaling={"type": "dynamic", "factor": 2.0}), "dynamic"),
        (config("qwen2", layer_types=["sliding_attention"] * 4), "layer_types"),
        (config("gemma3_text", attn_logit_softcapping=50.0), "attn_logit_softcapping"),
        (config("gemma3_text", use_bidirectional_attention=True), "use_bidirectional"),
        (config("phi3", lm_head_bias=True), "lm_head_bias"),
        (granite4(layer_types=["mamba", "attention"] * 2), "layer_types"),
        (granite4(num_local_experts=8), "num_local_experts"),
        (granite4(position_embedding_type=None), "position_embedding_type"),  # NoPE
        (granite4(layer_types=None), "layer_types"),  # transformers' default: all Mamba
        (config("falcon_h1"), "falcon_h1"),
    ],
)
def test_unhandled_config_is_refused(raw: dict, named: str) -> None:
    with pytest.raises(UnsupportedModelError, match=named):
        ModelConfig.from_dict(raw)


def test_granite_multipliers_are_read() -> None:
    cfg = ModelConfig.from_dict(
        config(
            "granite",
            embedding_multiplier=12.0,
            residual_multiplier=0.22,
            attention_multiplier=0.0078125,
            logits_scaling=8.0,
        )
    )
    assert cfg.embed_scale == 12.0 and cfg.residual_multiplier == 0.22
    assert cfg.attn_scale == 0.0078125 and cfg.logits_multiplier == 1 / 8


def test_granite4_dense_runs_on_the_fast_engine() -> None:
    cfg = ModelConfig.from_dict(granite4(residual_multiplier=0.22))
    assert cfg.intermediate_size == 128 and cfg.residual_multiplier == 0.22
    assert cfg.layer_kinds == (FULL,) * 4


def test_qwen_window_is_ignored_while_use_sliding_window_is_off() -> None:
    cfg = ModelConfig.from_dict(config("qwen2", sliding_window=32768, use_sliding_window=False))
    assert cfg.layer_windows == (None,) * 4 and cfg.qkv_bias and not cfg.o_bias


def test_mistral_window_covers_all_layers_and_not_the_context() -> None:
    cfg = ModelConfig.from_dict(config("mistral", sliding_window=1024))
    assert cfg.layer_windows == (1024,) * 4 and cfg.max_position_embeddings == 4096
    # A window as long as the context is no window at all.
    assert (
        ModelConfig.from_dict(config("mistral", sliding_window=4096)).layer_windows == (None,) * 4
    )


def test_older_gemma3_config_keys() -> None:
    """Configs written before rope_parameters: local base frequency and a window pattern."""
    cfg = ModelConfig.from_dict(
        config(
            "gemma3_text",
            hidden_act="gelu_pytorch_tanh",
            num_hidden_layers=6,
            head_dim=32,
            rope_theta=1e6,
            rope_local_base_freq=1e4,
            rope_scaling={"rope_type": "linear", "factor": 8.0},
            sliding_window=512,
            sliding_window_pattern=3,
            query_pre_attn_scalar=256,
            final_logit_softcapping=None,
            attn_logit_softcapping=None,
        )
    )
    assert cfg.layer_kinds == (SLIDING, SLIDING, FULL) * 2
    assert cfg.layer_windows == (512, 512, None) * 2
    assert cfg.rope[FULL] == {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6}
    assert cfg.rope[SLIDING] == {"rope_type": "default", "rope_theta": 1e4}
    assert cfg.activation == "gelu_tanh" and cfg.attn_scale == 256**-0.5
    assert cfg.embed_scale == 64**0.5 and cfg.family.norm_offset == 1.0


def test_phi3_longrope_caps_the_context_and_reads_partial_rotary() -> None:
    cfg = ModelConfig.from_dict(
        config(
            "phi3",
            max_position_embeddings=131072,
            original_max_position_embeddings=4096,
            partial_rotary_factor=0.75,
            rope_scaling={"type": "longrope", "short_factor": [1.0], "long_factor": [2.0]},
            sliding_window=262144,
        )
    )
    assert cfg.max_position_embeddings == 4096
    assert cfg.rotary_dim == 12 and cfg.head_dim == 16
    assert cfg.layer_windows == (None,) * 4

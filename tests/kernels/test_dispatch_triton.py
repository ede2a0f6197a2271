"""With CPU tensors sent to Triton (conftest.py), every dispatching op takes its Triton path."""

from __future__ import annotations

import importlib

import pytest
import torch

from mellea.engine import kernels
from mellea.engine.kernels._dispatch import use_triton


class Called(Exception):
    pass


def _raise(*args: object) -> None:
    raise Called


@pytest.mark.parametrize(
    ("module", "fn", "call"),
    [
        ("rms_norm_triton", "rms_norm_triton", lambda x: kernels.rms_norm(x, x[0], 1e-5)),
        ("activation_triton", "silu_and_mul_triton", lambda x: kernels.silu_and_mul(x)),
        ("activation_triton", "gelu_tanh_and_mul_triton", lambda x: kernels.gelu_tanh_and_mul(x)),
        ("rotary_triton", "rotary_embedding_triton",
         lambda x: kernels.rotary_embedding(x[0].long(), x[None], x[None], x)),
        ("kv_cache_triton", "store_kv_cache_triton",
         lambda x: kernels.store_kv_cache(x, x, x, x, x[0].long())),
        ("attention_triton", "paged_attention_decode_triton",
         lambda x: kernels.paged_attention_decode(x, x, x, x, x, 1.0)),
        ("attention_triton", "paged_attention_prefill_triton",
         lambda x: kernels.paged_attention_prefill(x, x, x, x, x, x, 1.0)),
    ],
)  # fmt: skip
def test_dispatch_takes_triton_path(
    module: str, fn: str, call: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert use_triton(torch.zeros(1))
    mod = importlib.import_module(f"mellea.engine.kernels.{module}")
    monkeypatch.setattr(mod, fn, _raise)
    with pytest.raises(Called):
        call(torch.zeros(4, 4))  # type: ignore[operator]


def test_disable_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MELLEA_DISABLE_TRITON", "1")
    assert not use_triton(torch.zeros(1))

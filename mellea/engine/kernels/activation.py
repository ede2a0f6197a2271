"""Gated MLP activations over a fused [gate | up] projection: SiLU (Llama) and GELU-tanh (Gemma)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from mellea.engine.kernels._dispatch import use_triton


def silu_and_mul_ref(x: torch.Tensor) -> torch.Tensor:
    """PyTorch reference. ``x``: [T, 2I] -> [T, I]."""
    gate, up = x.chunk(2, dim=-1)
    return F.silu(gate) * up


def gelu_tanh_and_mul_ref(x: torch.Tensor) -> torch.Tensor:
    """PyTorch reference of GELU (tanh approximation) of the gate times up: [T, 2I] -> [T, I]."""
    gate, up = x.chunk(2, dim=-1)
    return F.gelu(gate, approximate="tanh") * up


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """SiLU-and-multiply; Triton on CUDA, reference elsewhere."""
    if use_triton(x):
        from mellea.engine.kernels.activation_triton import silu_and_mul_triton

        return silu_and_mul_triton(x)
    return silu_and_mul_ref(x)


def gelu_tanh_and_mul(x: torch.Tensor) -> torch.Tensor:
    """GELU-tanh-and-multiply; Triton on CUDA, reference elsewhere."""
    if use_triton(x):
        from mellea.engine.kernels.activation_triton import gelu_tanh_and_mul_triton

        return gelu_tanh_and_mul_triton(x)
    return gelu_tanh_and_mul_ref(x)

"""SiLU(gate) * up, the Llama MLP activation, over a fused [gate | up] projection."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from mellea.engine.kernels._dispatch import use_triton


def silu_and_mul_ref(x: torch.Tensor) -> torch.Tensor:
    """PyTorch reference. ``x``: [T, 2I] -> [T, I]."""
    gate, up = x.chunk(2, dim=-1)
    return F.silu(gate) * up


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """SiLU-and-multiply; Triton on CUDA, reference elsewhere."""
    if use_triton(x):
        from mellea.engine.kernels.activation_triton import silu_and_mul_triton

        return silu_and_mul_triton(x)
    return silu_and_mul_ref(x)

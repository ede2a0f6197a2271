"""RMSNorm, optionally fused with the residual add that precedes it."""

from __future__ import annotations

import torch

from mellea.engine.kernels._dispatch import use_triton


def rms_norm_ref(
    x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """PyTorch reference. ``x``: [T, H]. With ``residual`` returns (norm(x + residual), x + residual)."""
    if residual is not None:
        x = x + residual
        residual = x
    xf = x.float()
    out = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (out.to(x.dtype) * weight), residual


def rms_norm(
    x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """RMSNorm over the last dim of a 2-D ``x``; Triton on CUDA, reference elsewhere."""
    if use_triton(x):
        from mellea.engine.kernels.rms_norm_triton import rms_norm_triton

        return rms_norm_triton(x, weight, eps, residual)
    return rms_norm_ref(x, weight, eps, residual)

"""Rotary position embedding (the rotate-half / NeoX layout Llama checkpoints use)."""

from __future__ import annotations

import torch

from mellea.engine.kernels._dispatch import use_triton


def build_cos_sin_cache(
    head_dim: int, max_positions: int, theta: float, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """[max_positions, head_dim]: cos in the first half of each row, sin in the second."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    freqs = torch.outer(torch.arange(max_positions, dtype=torch.float64), inv_freq)
    return torch.cat([freqs.cos(), freqs.sin()], dim=-1).to(dtype)


def rotary_embedding_ref(
    positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, cos_sin_cache: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """PyTorch reference. ``positions``: [T]; ``q``: [T, Hq, D]; ``k``: [T, Hk, D].

    A table narrower than D ([P, R]) rotates the first R dims of each head (partial
    rotary) and passes the rest through.
    """
    rot = cos_sin_cache.shape[-1]
    half = rot // 2
    cos_sin = cos_sin_cache[positions]
    cos = cos_sin[:, None, :half].to(q.dtype)
    sin = cos_sin[:, None, half:].to(q.dtype)

    def rotate(x: torch.Tensor) -> torch.Tensor:
        x1, x2, rest = x[..., :half], x[..., half:rot], x[..., rot:]
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin, rest], dim=-1)

    return rotate(q), rotate(k)


def rotary_embedding(
    positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, cos_sin_cache: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Apply rotary embedding to q and k; Triton on CUDA, reference elsewhere."""
    if use_triton(q):
        from mellea.engine.kernels.rotary_triton import rotary_embedding_triton

        return rotary_embedding_triton(positions, q, k, cos_sin_cache)
    return rotary_embedding_ref(positions, q, k, cos_sin_cache)

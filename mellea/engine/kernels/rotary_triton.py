"""Triton rotary position embedding (rotate-half / NeoX layout)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _rotate_heads(
    src_ptr,
    dst_ptr,
    token,
    stride_src_t,
    stride_src_h,
    stride_dst_t,
    stride_dst_h,
    n_heads,
    cos,
    sin,
    half,
    BLOCK_H: tl.constexpr,
    BLOCK_HALF: tl.constexpr,
):
    heads = tl.arange(0, BLOCK_H)[:, None]
    cols = tl.arange(0, BLOCK_HALF)[None, :]
    mask = (heads < n_heads) & (cols < half)
    src = src_ptr + token * stride_src_t + heads * stride_src_h + cols
    x1 = tl.load(src, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(src + half, mask=mask, other=0.0).to(tl.float32)
    dst = dst_ptr + token * stride_dst_t + heads * stride_dst_h + cols
    out_ty = dst_ptr.dtype.element_ty
    tl.store(dst, (x1 * cos - x2 * sin).to(out_ty), mask=mask)
    tl.store(dst + half, (x2 * cos + x1 * sin).to(out_ty), mask=mask)


@triton.jit
def _rotary_kernel(
    pos_ptr,
    q_ptr,
    k_ptr,
    q_out_ptr,
    k_out_ptr,
    cache_ptr,
    stride_q_t,
    stride_q_h,
    stride_k_t,
    stride_k_h,
    stride_qo_t,
    stride_qo_h,
    stride_ko_t,
    stride_ko_h,
    stride_cache,
    n_q_heads,
    n_k_heads,
    half,
    BLOCK_HQ: tl.constexpr,
    BLOCK_HK: tl.constexpr,
    BLOCK_HALF: tl.constexpr,
):
    token = tl.program_id(0).to(tl.int64)
    pos = tl.load(pos_ptr + token).to(tl.int64)
    cols = tl.arange(0, BLOCK_HALF)[None, :]
    row = cache_ptr + pos * stride_cache + cols
    # The reference rounds cos/sin to q's dtype before using them; do the same.
    cos = tl.load(row, mask=cols < half, other=0.0).to(q_ptr.dtype.element_ty).to(tl.float32)
    sin = tl.load(row + half, mask=cols < half, other=0.0).to(q_ptr.dtype.element_ty)
    sin = sin.to(tl.float32)
    _rotate_heads(
        q_ptr, q_out_ptr, token, stride_q_t, stride_q_h, stride_qo_t, stride_qo_h,
        n_q_heads, cos, sin, half, BLOCK_HQ, BLOCK_HALF,
    )  # fmt: skip
    _rotate_heads(
        k_ptr, k_out_ptr, token, stride_k_t, stride_k_h, stride_ko_t, stride_ko_h,
        n_k_heads, cos, sin, half, BLOCK_HK, BLOCK_HALF,
    )  # fmt: skip


def _unit_last(t: torch.Tensor) -> torch.Tensor:
    return t if t.stride(-1) == 1 else t.contiguous()


def rotary_embedding_triton(
    positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, cos_sin_cache: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Triton twin of ``rotary_embedding_ref``; returns new (q, k), inputs untouched.

    ``positions``: [T]; ``q``: [T, Hq, D]; ``k``: [T, Hk, D]; ``cos_sin_cache``: [P, R],
    R <= D (the first R dims rotate; the rest are copied). One program per token
    rotates all its q and k heads.
    """
    n_tokens, n_q_heads, head_dim = q.shape
    n_k_heads = k.shape[1]
    half = cos_sin_cache.shape[-1] // 2
    q_in, k_in = _unit_last(q), _unit_last(k)
    cache = _unit_last(cos_sin_cache)
    pos = positions.contiguous()
    q_out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    k_out = torch.empty(k.shape, dtype=k.dtype, device=k.device)
    if 2 * half < head_dim:  # partial rotary: the kernel writes only the rotated dims
        q_out[..., 2 * half :] = q[..., 2 * half :]
        k_out[..., 2 * half :] = k[..., 2 * half :]
    if n_tokens > 0:
        _rotary_kernel[(n_tokens,)](
            pos,
            q_in,
            k_in,
            q_out,
            k_out,
            cache,
            q_in.stride(0),
            q_in.stride(1),
            k_in.stride(0),
            k_in.stride(1),
            q_out.stride(0),
            q_out.stride(1),
            k_out.stride(0),
            k_out.stride(1),
            cache.stride(0),
            n_q_heads,
            n_k_heads,
            half,
            BLOCK_HQ=triton.next_power_of_2(n_q_heads),
            BLOCK_HK=triton.next_power_of_2(n_k_heads),
            BLOCK_HALF=triton.next_power_of_2(half),
            num_warps=4,
        )
    return q_out, k_out

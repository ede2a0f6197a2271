"""Triton scatter of new keys and values into the paged KV cache."""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _store_kv_kernel(
    k_ptr,
    v_ptr,
    k_cache_ptr,
    v_cache_ptr,
    slot_ptr,
    stride_k_t,
    stride_k_h,
    stride_v_t,
    stride_v_h,
    stride_kc_b,
    stride_kc_s,
    stride_kc_h,
    stride_vc_b,
    stride_vc_s,
    stride_vc_h,
    block_size,
    head_dim,
    n_elems,
    BLOCK: tl.constexpr,
):
    token = tl.program_id(0).to(tl.int64)
    slot = tl.load(slot_ptr + token).to(tl.int64)
    # Hk * D flattened into one power-of-2 block; slot -1 masks the whole row. (The
    # interpreter mishandles `tensor_mask & scalar_mask`, hence the where.)
    offs = tl.arange(0, BLOCK)
    mask = offs < tl.where(slot >= 0, n_elems, 0)
    head = offs // head_dim
    dim = offs % head_dim
    block = slot // block_size
    within = slot % block_size
    k = tl.load(k_ptr + token * stride_k_t + head * stride_k_h + dim, mask=mask)
    v = tl.load(v_ptr + token * stride_v_t + head * stride_v_h + dim, mask=mask)
    k_dst = k_cache_ptr + block * stride_kc_b + within * stride_kc_s + head * stride_kc_h + dim
    v_dst = v_cache_ptr + block * stride_vc_b + within * stride_vc_s + head * stride_vc_h + dim
    tl.store(k_dst, k.to(k_cache_ptr.dtype.element_ty), mask=mask)
    tl.store(v_dst, v.to(v_cache_ptr.dtype.element_ty), mask=mask)


def store_kv_cache_triton(
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    """Triton twin of ``store_kv_cache_ref``, in place; slots equal to -1 are skipped.

    ``k``, ``v``: [T, Hk, D]; caches: [num_blocks, block_size, Hk, D] with unit stride
    along D; ``slot_mapping``: [T]. One program per token.
    """
    if k_cache.stride(-1) != 1 or v_cache.stride(-1) != 1:
        raise ValueError("KV caches need unit stride along the head dim")
    n_tokens, n_heads, head_dim = k.shape
    if n_tokens == 0:
        return
    if k.stride(-1) != 1:
        k = k.contiguous()
    if v.stride(-1) != 1:
        v = v.contiguous()
    slots = slot_mapping.contiguous()
    n_elems = n_heads * head_dim
    _store_kv_kernel[(n_tokens,)](
        k,
        v,
        k_cache,
        v_cache,
        slots,
        k.stride(0),
        k.stride(1),
        v.stride(0),
        v.stride(1),
        k_cache.stride(0),
        k_cache.stride(1),
        k_cache.stride(2),
        v_cache.stride(0),
        v_cache.stride(1),
        v_cache.stride(2),
        k_cache.shape[1],
        head_dim,
        n_elems,
        BLOCK=triton.next_power_of_2(n_elems),
        num_warps=4,
    )

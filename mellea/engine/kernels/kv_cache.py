"""Write new keys and values into the paged KV cache."""

from __future__ import annotations

import torch

from mellea.engine.kernels._dispatch import use_triton


def store_kv_cache_ref(
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    """PyTorch reference, in place.

    ``k``, ``v``: [T, Hk, D]; caches: [num_blocks, block_size, Hk, D];
    ``slot_mapping``: [T] int64, slot = block * block_size + offset, -1 = skip. k/v
    are rounded to the caches' dtype where it differs (a half-width cache).
    """
    keep = slot_mapping >= 0
    slots = slot_mapping[keep]
    k_cache.view(-1, *k_cache.shape[2:])[slots] = k[keep].to(k_cache.dtype)
    v_cache.view(-1, *v_cache.shape[2:])[slots] = v[keep].to(v_cache.dtype)


def store_kv_cache(
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    """Scatter k/v into their cache slots; Triton on CUDA, reference elsewhere."""
    if use_triton(k):
        from mellea.engine.kernels.kv_cache_triton import store_kv_cache_triton

        store_kv_cache_triton(k, v, k_cache, v_cache, slot_mapping)
        return
    store_kv_cache_ref(k, v, k_cache, v_cache, slot_mapping)

"""Triton KV-cache store against its PyTorch reference, in the interpreter."""

from __future__ import annotations

import pytest
import torch

from mellea.engine.kernels.kv_cache import store_kv_cache, store_kv_cache_ref
from tests.kernels.helpers import DTYPES


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("n_kv", "head_dim"), [(3, 64), (2, 16)])
def test_matches_reference(dtype: torch.dtype, n_kv: int, head_dim: int) -> None:
    from mellea.engine.kernels.kv_cache_triton import store_kv_cache_triton

    num_blocks, block_size = 4, 4
    k_cache = torch.randn(num_blocks, block_size, n_kv, head_dim, dtype=dtype)
    v_cache = torch.randn(num_blocks, block_size, n_kv, head_dim, dtype=dtype)
    # First and last slot, both sides of block boundaries, and skipped tokens.
    slots = torch.tensor([0, -1, 3, 4, 11, -1, 15], dtype=torch.int64)
    k = torch.randn(len(slots), n_kv, head_dim, dtype=dtype)
    v = torch.randn(len(slots), n_kv, head_dim, dtype=dtype)
    k_ref, v_ref = k_cache.clone(), v_cache.clone()
    store_kv_cache_triton(k, v, k_cache, v_cache, slots)
    store_kv_cache_ref(k, v, k_ref, v_ref, slots)
    torch.testing.assert_close(k_cache, k_ref, atol=0, rtol=0)
    torch.testing.assert_close(v_cache, v_ref, atol=0, rtol=0)


def test_views_of_fused_qkv_and_dispatch() -> None:
    n_q, n_kv, head_dim, tokens = 9, 3, 64, 3
    qkv = torch.randn(tokens, (n_q + 2 * n_kv) * head_dim)
    k = qkv[:, n_q * head_dim : (n_q + n_kv) * head_dim].view(tokens, n_kv, head_dim)
    v = qkv[:, (n_q + n_kv) * head_dim :].view(tokens, n_kv, head_dim)
    k_cache = torch.zeros(2, 8, n_kv, head_dim)
    v_cache = torch.zeros(2, 8, n_kv, head_dim)
    k_ref, v_ref = k_cache.clone(), v_cache.clone()
    slots = torch.tensor([7, 8, -1])
    store_kv_cache(k, v, k_cache, v_cache, slots)
    store_kv_cache_ref(k, v, k_ref, v_ref, slots)
    torch.testing.assert_close(k_cache, k_ref, atol=0, rtol=0)
    torch.testing.assert_close(v_cache, v_ref, atol=0, rtol=0)


def test_all_skipped_leaves_cache_untouched() -> None:
    from mellea.engine.kernels.kv_cache_triton import store_kv_cache_triton

    k_cache = torch.randn(2, 4, 3, 64)
    v_cache = torch.randn(2, 4, 3, 64)
    before = k_cache.clone(), v_cache.clone()
    kv = torch.randn(2, 3, 64)
    store_kv_cache_triton(kv, kv, k_cache, v_cache, torch.tensor([-1, -1]))
    torch.testing.assert_close(k_cache, before[0], atol=0, rtol=0)
    torch.testing.assert_close(v_cache, before[1], atol=0, rtol=0)

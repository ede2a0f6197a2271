"""Triton rotary embedding against its PyTorch reference, in the interpreter."""

from __future__ import annotations

import pytest
import torch

from mellea.engine.kernels.rotary import build_cos_sin_cache, rotary_embedding, rotary_embedding_ref
from tests.kernels.helpers import DTYPES, tolerance


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("n_q", "n_k", "head_dim"), [(9, 3, 64), (4, 4, 96)])
def test_matches_reference(dtype: torch.dtype, n_q: int, n_k: int, head_dim: int) -> None:
    from mellea.engine.kernels.rotary_triton import rotary_embedding_triton

    cache = build_cos_sin_cache(head_dim, 2048, 10000.0)
    positions = torch.tensor([0, 1, 15, 16, 1999])
    q = torch.randn(5, n_q, head_dim, dtype=dtype)
    k = torch.randn(5, n_k, head_dim, dtype=dtype)
    q_before, k_before = q.clone(), k.clone()
    out_q, out_k = rotary_embedding_triton(positions, q, k, cache)
    ref_q, ref_k = rotary_embedding_ref(positions, q, k, cache)
    assert out_q.dtype == ref_q.dtype and out_q.shape == ref_q.shape
    assert out_k.dtype == ref_k.dtype and out_k.shape == ref_k.shape
    torch.testing.assert_close(out_q, ref_q, **tolerance(dtype))
    torch.testing.assert_close(out_k, ref_k, **tolerance(dtype))
    torch.testing.assert_close(q, q_before, atol=0, rtol=0)
    torch.testing.assert_close(k, k_before, atol=0, rtol=0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_views_of_fused_qkv(dtype: torch.dtype) -> None:
    """q and k as strided views into one [T, (Hq + 2 Hk) * D] projection, as the model makes them."""
    n_q, n_k, head_dim, tokens = 9, 3, 64, 4
    qkv = torch.randn(tokens, (n_q + 2 * n_k) * head_dim, dtype=dtype)
    q = qkv[:, : n_q * head_dim].view(tokens, n_q, head_dim)
    k = qkv[:, n_q * head_dim : (n_q + n_k) * head_dim].view(tokens, n_k, head_dim)
    assert not q.is_contiguous() and not k.is_contiguous()
    cache = build_cos_sin_cache(head_dim, 64, 10000.0)
    positions = torch.tensor([3, 4, 5, 63])
    out_q, out_k = rotary_embedding(positions, q, k, cache)
    ref_q, ref_k = rotary_embedding_ref(positions, q.contiguous(), k.contiguous(), cache)
    torch.testing.assert_close(out_q, ref_q, **tolerance(dtype))
    torch.testing.assert_close(out_k, ref_k, **tolerance(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_partial_rotary(dtype: torch.dtype) -> None:
    """A table for the first 48 of 64 dims (Phi's partial rotary): the rest pass through."""
    from mellea.engine.kernels.rotary_triton import rotary_embedding_triton

    cache = build_cos_sin_cache(48, 256, 10000.0)
    positions = torch.tensor([0, 7, 255])
    q = torch.randn(3, 4, 64, dtype=dtype)
    k = torch.randn(3, 2, 64, dtype=dtype)
    out_q, out_k = rotary_embedding_triton(positions, q, k, cache)
    ref_q, ref_k = rotary_embedding_ref(positions, q, k, cache)
    torch.testing.assert_close(out_q, ref_q, **tolerance(dtype))
    torch.testing.assert_close(out_k, ref_k, **tolerance(dtype))
    torch.testing.assert_close(ref_q[..., 48:], q[..., 48:], atol=0, rtol=0)
    full_q, _ = rotary_embedding_ref(positions, q[..., :48], k[..., :48], cache)
    torch.testing.assert_close(ref_q[..., :48], full_q, atol=0, rtol=0)
    assert not torch.allclose(ref_q[1:, :, :48], q[1:, :, :48])

"""Triton paged attention (decode and prefill) against the PyTorch references, in the interpreter.

Cache slots no sequence owns, and block-table entries past a sequence's blocks, point
at large "poison" values: a kernel that reads outside what it should changes results.
"""

from __future__ import annotations

import math

import pytest
import torch

from mellea.engine.kernels.attention import (
    paged_attention_decode,
    paged_attention_decode_ref,
    paged_attention_prefill,
    paged_attention_prefill_ref,
)
from tests.kernels.helpers import DTYPES, tolerance

POISON = 30.0
GQA_SHAPES = [(9, 3, 64), (4, 4, 96)]  # (Hq, Hk, D): SmolLM2-like, and MHA with odd head_dim


def make_cache(
    context_lens: list[int], block_size: int, n_kv: int, head_dim: int, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Shuffled paged caches holding ``context_lens`` tokens per sequence, and the block tables."""
    owned = [math.ceil(n / block_size) for n in context_lens]
    n_blocks = sum(owned) + 2  # two blocks nobody owns
    shape = (n_blocks, block_size, n_kv, head_dim)
    k_cache = torch.full(shape, POISON, dtype=dtype)
    v_cache = torch.full(shape, -POISON, dtype=dtype)
    spare = n_blocks - 1
    tables = torch.full((len(context_lens), max(owned) + 2), spare, dtype=torch.int32)
    physical = torch.randperm(n_blocks - 2).tolist()
    for b, (n, n_own) in enumerate(zip(context_lens, owned, strict=True)):
        blocks = [physical.pop() for _ in range(n_own)]
        tables[b, :n_own] = torch.tensor(blocks, dtype=torch.int32)
        flat_k = k_cache[blocks].flatten(0, 1)
        flat_v = v_cache[blocks].flatten(0, 1)
        flat_k[:n] = torch.randn(n, n_kv, head_dim, dtype=dtype)
        flat_v[:n] = torch.randn(n, n_kv, head_dim, dtype=dtype)
        k_cache[blocks] = flat_k.view(n_own, block_size, n_kv, head_dim)
        v_cache[blocks] = flat_v.view(n_own, block_size, n_kv, head_dim)
    return k_cache, v_cache, tables


def small_tiles(monkeypatch: pytest.MonkeyPatch) -> None:
    """Shrink the kernels' tiles so short sequences span several of them."""
    from mellea.engine.kernels import attention_triton as at

    def decode(dtype: torch.dtype, head_dim: int, group: int) -> at.LaunchConfig:
        return at.LaunchConfig(16, 16, max(16, 1 << (head_dim - 1).bit_length()), 4)

    def prefill(dtype: torch.dtype, head_dim: int) -> at.LaunchConfig:
        return at.LaunchConfig(16, 16, max(16, 1 << (head_dim - 1).bit_length()), 4)

    monkeypatch.setattr(at, "decode_config", decode)
    monkeypatch.setattr(at, "prefill_config", prefill)


def run_decode(
    n_q: int, n_kv: int, head_dim: int, dtype: torch.dtype, lens: list[int], block_size: int
) -> None:
    from mellea.engine.kernels.attention_triton import paged_attention_decode_triton

    k_cache, v_cache, tables = make_cache(lens, block_size, n_kv, head_dim, dtype)
    q = torch.randn(len(lens), n_q, head_dim, dtype=dtype)
    context_lens = torch.tensor(lens, dtype=torch.int32)
    scale = head_dim**-0.5
    out = paged_attention_decode_triton(q, k_cache, v_cache, tables, context_lens, scale)
    ref = paged_attention_decode_ref(q, k_cache, v_cache, tables, context_lens, scale)
    assert out.dtype == ref.dtype and out.shape == ref.shape
    torch.testing.assert_close(out, ref, **tolerance(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("n_q", "n_kv", "head_dim"), GQA_SHAPES)
def test_decode_ragged(dtype: torch.dtype, n_q: int, n_kv: int, head_dim: int) -> None:
    # 8/9 and 32/33 sit at and one past cache-block and key-tile boundaries.
    run_decode(n_q, n_kv, head_dim, dtype, [1, 8, 9, 32, 33, 47], block_size=8)


def test_decode_small_tiles_block16(monkeypatch: pytest.MonkeyPatch) -> None:
    small_tiles(monkeypatch)
    run_decode(9, 3, 64, torch.float16, [16, 17, 5, 40], block_size=16)


@pytest.mark.parametrize("dtype", DTYPES)
def test_decode_strided_query_and_dispatch(dtype: torch.dtype) -> None:
    n_q, n_kv, head_dim, lens = 9, 3, 64, [3, 20]
    k_cache, v_cache, tables = make_cache(lens, 8, n_kv, head_dim, dtype)
    qkv = torch.randn(len(lens), (n_q + 2 * n_kv) * head_dim, dtype=dtype)
    q = qkv[:, : n_q * head_dim].view(len(lens), n_q, head_dim)
    context_lens = torch.tensor(lens, dtype=torch.int32)
    out = paged_attention_decode(q, k_cache, v_cache, tables, context_lens, 0.125)
    ref = paged_attention_decode_ref(q.contiguous(), k_cache, v_cache, tables, context_lens, 0.125)
    torch.testing.assert_close(out, ref, **tolerance(dtype))


def run_prefill(
    n_q: int,
    n_kv: int,
    head_dim: int,
    dtype: torch.dtype,
    seqs: list[tuple[int, int]],
    block_size: int,
    strided: bool = False,
) -> None:
    """``seqs``: (new tokens, total tokens in the cache) per sequence."""
    lens = [total for _, total in seqs]
    k_cache, v_cache, tables = make_cache(lens, block_size, n_kv, head_dim, dtype)
    q_lens = torch.tensor([0] + [n for n, _ in seqs])
    cu_seqlens = q_lens.cumsum(0).to(torch.int32)
    n_tokens = int(cu_seqlens[-1])
    if strided:
        qkv = torch.randn(n_tokens, (n_q + 2 * n_kv) * head_dim, dtype=dtype)
        q = qkv[:, : n_q * head_dim].view(n_tokens, n_q, head_dim)
    else:
        q = torch.randn(n_tokens, n_q, head_dim, dtype=dtype)
    context_lens = torch.tensor(lens, dtype=torch.int32)
    scale = head_dim**-0.5
    args = (k_cache, v_cache, tables, cu_seqlens, context_lens, scale)
    out = paged_attention_prefill(q, *args)
    ref = paged_attention_prefill_ref(q.contiguous(), *args)
    assert out.dtype == ref.dtype and out.shape == ref.shape
    torch.testing.assert_close(out, ref, **tolerance(dtype))


# (new tokens, total tokens): no prefix, prefix across a block boundary, one new token,
# exactly one block, a sequence with nothing new, and a long cached prefix.
RAGGED = [(5, 5), (3, 17), (1, 9), (8, 8), (0, 4), (7, 40)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("n_q", "n_kv", "head_dim"), GQA_SHAPES)
def test_prefill_ragged_with_cached_prefix(
    dtype: torch.dtype, n_q: int, n_kv: int, head_dim: int
) -> None:
    run_prefill(n_q, n_kv, head_dim, dtype, RAGGED, block_size=8)


@pytest.mark.parametrize("dtype", DTYPES)
def test_prefill_small_tiles(dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch) -> None:
    # With 16-row/16-key tiles these span several query and key tiles, and 16/17, 32/33
    # sit at and one past the tile and block boundaries.
    small_tiles(monkeypatch)
    seqs = [(16, 16), (17, 17), (33, 33), (17, 32), (2, 33)]
    run_prefill(9, 3, 64, dtype, seqs, block_size=16, strided=True)


def test_prefill_default_tiles_span_two_query_tiles() -> None:
    run_prefill(2, 1, 64, torch.float32, [(40, 40), (70, 75)], block_size=16)


def windowed_reference_check(window: int, lens: list[int], seqs: list[tuple[int, int]]) -> None:
    """Both kernels with a sliding window against their references, and the references
    against a dense masked attention written out here."""
    from mellea.engine.kernels.attention_triton import (
        paged_attention_decode_triton,
        paged_attention_prefill_triton,
    )

    n_q, n_kv, head_dim, scale = 4, 2, 16, 0.25
    k_cache, v_cache, tables = make_cache(lens, 8, n_kv, head_dim, torch.float32)
    context_lens = torch.tensor(lens, dtype=torch.int32)
    q = torch.randn(len(lens), n_q, head_dim)
    args = (k_cache, v_cache, tables, context_lens, scale, window)
    ref = paged_attention_decode_ref(q, *args)
    torch.testing.assert_close(paged_attention_decode_triton(q, *args), ref, atol=1e-5, rtol=1e-5)
    for b, n in enumerate(lens):  # the reference sees exactly the last `window` keys
        blocks = tables[b, : math.ceil(n / 8)].long()
        keys = k_cache[blocks].flatten(0, 1)[max(0, n - window) : n].repeat_interleave(2, 1)
        values = v_cache[blocks].flatten(0, 1)[max(0, n - window) : n].repeat_interleave(2, 1)
        probs = (torch.einsum("hd,thd->ht", q[b], keys) * scale).softmax(-1)
        torch.testing.assert_close(ref[b], torch.einsum("ht,thd->hd", probs, values))

    totals = [total for _, total in seqs]
    k_cache, v_cache, tables = make_cache(totals, 8, n_kv, head_dim, torch.float32)
    cu = torch.tensor([0] + [n for n, _ in seqs]).cumsum(0).to(torch.int32)
    q = torch.randn(int(cu[-1]), n_q, head_dim)
    args = (k_cache, v_cache, tables, cu, torch.tensor(totals, dtype=torch.int32), scale, window)
    ref = paged_attention_prefill_ref(q, *args)
    out = paged_attention_prefill_triton(q, *args)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    full = paged_attention_prefill_ref(q, *args[:-1])
    # Rows whose whole causal past fits the window equal full attention; later ones differ.
    for b, (n, total) in enumerate(seqs):
        for i in range(n):
            row = int(cu[b]) + i
            same = total - n + i < window
            assert torch.allclose(ref[row], full[row], atol=1e-6) == same


@pytest.mark.parametrize("window", [1, 5, 16])
def test_sliding_window(window: int) -> None:
    windowed_reference_check(window, [1, 5, 9, 33, 47], [(5, 5), (3, 17), (1, 9), (20, 40)])


def test_sliding_window_small_tiles(monkeypatch: pytest.MonkeyPatch) -> None:
    # Query tiles of 16 rows whose windows start in different key tiles.
    small_tiles(monkeypatch)
    windowed_reference_check(7, [16, 17, 40], [(33, 33), (17, 40), (2, 33)])


def test_head_dim_256_tiles() -> None:
    """Gemma 3's head size takes its own prefill tiles (16 keys per step)."""
    run_prefill(4, 1, 256, torch.bfloat16, [(20, 20), (5, 40)], block_size=16)
    run_decode(4, 1, 256, torch.bfloat16, [20, 40], block_size=16)

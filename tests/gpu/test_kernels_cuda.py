"""Each Triton kernel against its PyTorch reference on a GPU.

Fresh random inputs per case; the reference runs on inputs upcast to float64 (the
attention references compute in fp32 inside), and the error is ||out - ref|| / ||ref||
with the bounds of the device notes: far under 1e-3 for fp32 (1e-5 here), 2e-3 for
fp16 and 1e-2 for bf16. Every output is allocated poisoned (NaN) and must come back
finite, so an element a kernel never wrote fails. Shapes include the default model's
(9 query heads over 3 KV heads x 64), ragged batches, lengths on and next to cache
block borders, and a large batch.
"""

from __future__ import annotations

import math

import pytest
import torch

from mellea.engine.kernels.activation import gelu_tanh_and_mul_ref, silu_and_mul_ref
from mellea.engine.kernels.attention import (
    paged_attention_decode_ref,
    paged_attention_prefill_ref,
)
from mellea.engine.kernels.kv_cache import store_kv_cache_ref
from mellea.engine.kernels.rms_norm import rms_norm_ref
from mellea.engine.kernels.rotary import build_cos_sin_cache, rotary_embedding_ref

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
BOUND = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}
CUDA = torch.device("cuda")
# (query heads, KV heads, head dim): the default model, Llama 3.2 1B, Qwen-like 128, Gemma 3's 256.
HEADS = [(9, 3, 64), (32, 8, 64), (16, 8, 128), (8, 4, 256)]


@pytest.fixture(autouse=True)
def _poisoned_outputs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every float tensor torch.empty hands out (the kernels' outputs) starts as NaN."""
    empty = torch.empty

    def poisoned(*args, **kwargs):
        t = empty(*args, **kwargs)
        if t.is_floating_point():
            t.fill_(float("nan"))
        return t

    monkeypatch.setattr(torch, "empty", poisoned)
    monkeypatch.delenv("MELLEA_DISABLE_TRITON", raising=False)
    torch.manual_seed(torch.seed() % 2**31)  # fresh inputs each run


def rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref|| / ||ref|| in float64; NaN anywhere fails."""
    assert torch.isfinite(out).all(), "an output element is NaN/inf: unwritten or overflowed"
    out, ref = out.double(), ref.double()
    return float((out - ref).norm() / ref.norm().clamp(min=1e-30))


def check(out: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype) -> None:
    assert out.shape == ref.shape and out.device.type == "cuda"
    err = rel_error(out, ref)
    assert err < BOUND[dtype], f"relative error {err:.2e} over {BOUND[dtype]:.0e} ({dtype})"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("rows", "cols"), [(1, 576), (37, 2048), (4096, 576), (5, 1000)])
@pytest.mark.parametrize("with_residual", [False, True])
def test_rms_norm(dtype, rows, cols, with_residual):
    from mellea.engine.kernels.rms_norm_triton import rms_norm_triton

    x = torch.randn(rows, cols, device=CUDA, dtype=dtype)
    w = (1 + 0.1 * torch.randn(cols, device=CUDA)).to(dtype)
    res = torch.randn(rows, cols, device=CUDA, dtype=dtype) if with_residual else None
    out, new_res = rms_norm_triton(x, w, 1e-5, res)
    ref, ref_res = rms_norm_ref(x.double(), w.double(), 1e-5, None if res is None else res.double())
    check(out, ref, dtype)
    if with_residual:
        check(new_res, ref_res, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("rows", "inter"), [(1, 1536), (33, 8192), (2048, 1536), (3, 1000)])
@pytest.mark.parametrize("gelu", [False, True])
def test_gated_activation(dtype, rows, inter, gelu):
    from mellea.engine.kernels.activation_triton import (
        gelu_tanh_and_mul_triton,
        silu_and_mul_triton,
    )

    x = torch.randn(rows, 2 * inter, device=CUDA, dtype=dtype) * 3
    triton_fn, ref_fn = (
        (gelu_tanh_and_mul_triton, gelu_tanh_and_mul_ref)
        if gelu
        else (silu_and_mul_triton, silu_and_mul_ref)
    )
    check(triton_fn(x), ref_fn(x.double()), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("n_q", "n_kv", "head_dim"), HEADS)
@pytest.mark.parametrize("tokens", [1, 37, 2048])
@pytest.mark.parametrize("partial", [False, True])
def test_rotary(dtype, n_q, n_kv, head_dim, tokens, partial):
    from mellea.engine.kernels.rotary_triton import rotary_embedding_triton

    rot = head_dim // 2 if partial else head_dim
    cache = build_cos_sin_cache(rot, 8192, 10000.0).to(CUDA)
    positions = torch.randint(0, 8192, (tokens,), device=CUDA)
    q = torch.randn(tokens, n_q, head_dim, device=CUDA, dtype=dtype)
    k = torch.randn(tokens, n_kv, head_dim, device=CUDA, dtype=dtype)
    q_out, k_out = rotary_embedding_triton(positions, q, k, cache)
    # The reference rounds cos/sin to the input dtype, as the kernel does.
    q_ref, k_ref = rotary_embedding_ref(positions, q, k, cache)
    check(q_out, q_ref, dtype)
    check(k_out, k_ref, dtype)
    q64, k64 = rotary_embedding_ref(positions, q.double(), k.double(), cache.double())
    check(q_out, q64, dtype)  # and it is close to the exact rotation
    check(k_out, k64, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("n_kv", "head_dim"), [(3, 64), (8, 128), (1, 256)])
@pytest.mark.parametrize("tokens", [1, 50, 3000])
def test_store_kv_cache(dtype, n_kv, head_dim, tokens):
    from mellea.engine.kernels.kv_cache_triton import store_kv_cache_triton

    block_size = 16
    n_blocks = tokens // block_size + 8
    shape = (n_blocks, block_size, n_kv, head_dim)
    k_cache = torch.full(shape, float("nan"), device=CUDA, dtype=dtype)
    v_cache = torch.full(shape, float("nan"), device=CUDA, dtype=dtype)
    slots = torch.randperm(n_blocks * block_size, device=CUDA)[:tokens]
    if tokens > 1:
        slots[::7] = -1  # skipped tokens (padding)
    k = torch.randn(tokens, n_kv, head_dim, device=CUDA, dtype=dtype)
    v = torch.randn(tokens, n_kv, head_dim, device=CUDA, dtype=dtype)
    k_ref, v_ref = k_cache.clone(), v_cache.clone()
    store_kv_cache_triton(k, v, k_cache, v_cache, slots)
    store_kv_cache_ref(k, v, k_ref, v_ref, slots)
    # Written slots equal exactly; every other slot is still NaN (nothing else written).
    assert torch.equal(k_cache.isnan(), k_ref.isnan()) and torch.equal(
        v_cache.isnan(), v_ref.isnan()
    )
    kept = ~k_ref.isnan()
    assert torch.equal(k_cache[kept], k_ref[kept]) and torch.equal(v_cache[kept], v_ref[kept])


def paged_cache(
    lens: list[int], block_size: int, n_kv: int, head_dim: int, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Shuffled paged caches holding ``lens`` tokens per sequence, and the block tables.

    Slots nobody owns and table entries past a sequence's blocks hold NaN, so a kernel
    that reads beyond what it should returns NaN.
    """
    owned = [math.ceil(n / block_size) for n in lens]
    n_blocks = sum(owned) + 1
    shape = (n_blocks, block_size, n_kv, head_dim)
    k_cache = torch.full(shape, float("nan"), device=CUDA, dtype=dtype)
    v_cache = torch.full(shape, float("nan"), device=CUDA, dtype=dtype)
    spare = n_blocks - 1
    tables = torch.full((len(lens), max(owned) + 2), spare, dtype=torch.int32)
    physical = torch.randperm(n_blocks - 1).tolist()
    for b, (n, n_own) in enumerate(zip(lens, owned, strict=True)):
        blocks = [physical.pop() for _ in range(n_own)]
        tables[b, :n_own] = torch.tensor(blocks, dtype=torch.int32)
        flat_k = k_cache[blocks].flatten(0, 1)
        flat_v = v_cache[blocks].flatten(0, 1)
        flat_k[:n] = torch.randn(n, n_kv, head_dim, device=CUDA, dtype=dtype)
        flat_v[:n] = torch.randn(n, n_kv, head_dim, device=CUDA, dtype=dtype)
        k_cache[blocks] = flat_k.view(n_own, block_size, n_kv, head_dim)
        v_cache[blocks] = flat_v.view(n_own, block_size, n_kv, head_dim)
    return k_cache, v_cache, tables.to(CUDA)


def clean(cache: torch.Tensor) -> torch.Tensor:
    """The cache for the reference: float64, poison zeroed (its padded maths would spread
    a NaN that the kernel, which never loads those slots, does not see)."""
    return cache.double().nan_to_num(0.0)


# Lengths on, before and after block borders (16), one token, and a long one.
RAGGED = [1, 15, 16, 17, 31, 32, 33, 100, 1000]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("n_q", "n_kv", "head_dim"), HEADS)
@pytest.mark.parametrize("block_size", [16, 32])
@pytest.mark.parametrize("window", [0, 24])
@pytest.mark.parametrize("num_splits", [None, 1])  # None: split to fill the GPU (9 seqs do)
def test_decode_attention_ragged(dtype, n_q, n_kv, head_dim, block_size, window, num_splits):
    from mellea.engine.kernels.attention_triton import paged_attention_decode_triton

    lens = RAGGED
    k_cache, v_cache, tables = paged_cache(lens, block_size, n_kv, head_dim, dtype)
    q = torch.randn(len(lens), n_q, head_dim, device=CUDA, dtype=dtype)
    ctx = torch.tensor(lens, dtype=torch.int32, device=CUDA)
    scale = head_dim**-0.5
    out = paged_attention_decode_triton(q, k_cache, v_cache, tables, ctx, scale, window, num_splits)
    ref = paged_attention_decode_ref(
        q.double(), clean(k_cache), clean(v_cache), tables, ctx, scale, window
    )
    check(out, ref, dtype)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_decode_attention_large_batch(dtype):
    from mellea.engine.kernels.attention_triton import paged_attention_decode_triton

    lens = torch.randint(1, 600, (512,)).tolist()
    k_cache, v_cache, tables = paged_cache(lens, 16, 3, 64, dtype)
    q = torch.randn(len(lens), 9, 64, device=CUDA, dtype=dtype)
    ctx = torch.tensor(lens, dtype=torch.int32, device=CUDA)
    out = paged_attention_decode_triton(q, k_cache, v_cache, tables, ctx, 0.125)
    ref = paged_attention_decode_ref(q.double(), clean(k_cache), clean(v_cache), tables, ctx, 0.125)
    check(out, ref, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("n_q", "n_kv", "head_dim"), HEADS)
@pytest.mark.parametrize("window", [0, 24])
def test_prefill_attention_ragged_with_cached_prefixes(dtype, n_q, n_kv, head_dim, window):
    from mellea.engine.kernels.attention_triton import paged_attention_prefill_triton

    # (cached prefix, new tokens): whole prompts, chunks after a prefix, block borders.
    parts = [(0, 1), (0, 16), (0, 17), (16, 16), (5, 60), (32, 1), (100, 150), (0, 300)]
    lens = [p + n for p, n in parts]
    k_cache, v_cache, tables = paged_cache(lens, 16, n_kv, head_dim, dtype)
    q_lens = [n for _, n in parts]
    cu = torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()], dtype=torch.int32, device=CUDA)
    q = torch.randn(sum(q_lens), n_q, head_dim, device=CUDA, dtype=dtype)
    ctx = torch.tensor(lens, dtype=torch.int32, device=CUDA)
    scale = head_dim**-0.5
    out = paged_attention_prefill_triton(q, k_cache, v_cache, tables, cu, ctx, scale, window)
    ref = paged_attention_prefill_ref(
        q.double(), clean(k_cache), clean(v_cache), tables, cu, ctx, scale, window
    )
    check(out, ref, dtype)

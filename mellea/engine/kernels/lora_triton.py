"""Triton twin of :func:`mellea.engine.kernels.lora.lora_gathered_ref`, in two kernels.

*Shrink*: one program per (row, chunk of the inputs) forms that chunk's share of
``h = x @ A[s]^T`` (C values) into a small fp32 buffer. *Expand*: one program per
(row, block of output columns) sums the row's shares (in a fixed order: the result
does not depend on scheduling) and adds ``h @ B[s]^T`` to its block. Each program
makes one round of loads: a decode step's rows are few, so a program that looped over
all of K (2048-8192 inputs) would wait on one load after another, some 50 us a
projection on an H200, where these take a few.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

TILE = 8192  # fp32 values a program's A or B tile holds (4 warps: 64 registers each)


@triton.jit
def _lora_shrink_kernel(
    x_ptr,
    a_ptr,
    slot_ptr,
    part_ptr,
    K,
    C,
    stride_x,
    stride_as,
    stride_ac,
    CHUNKS: tl.constexpr,
    BLOCK_C: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    chunk = tl.program_id(1)
    slot = tl.load(slot_ptr + row)
    s = tl.maximum(slot, 0).to(tl.int64)
    k_end = tl.where(slot >= 0, K, 0)  # a base row (slot -1) reads nothing: h = 0
    cs = tl.arange(0, BLOCK_C)
    ks = chunk * BLOCK_K + tl.arange(0, BLOCK_K)
    k_in = ks < k_end
    x = tl.load(x_ptr + row * stride_x + ks, mask=k_in, other=0.0).to(tl.float32)
    a = tl.load(
        a_ptr + s * stride_as + cs[:, None] * stride_ac + ks[None, :],
        mask=(cs < C)[:, None] & k_in[None, :],
        other=0.0,
    )
    h = tl.sum(a * x[None, :], axis=1)
    tl.store(part_ptr + (row * CHUNKS + chunk) * BLOCK_C + cs, h)


@triton.jit
def _lora_expand_kernel(
    part_ptr,
    b_ptr,
    slot_ptr,
    out_ptr,
    N,
    C,
    stride_out,
    stride_bs,
    stride_bn,
    CHUNKS: tl.constexpr,
    BLOCK_S: tl.constexpr,
    BLOCK_C: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    slot = tl.load(slot_ptr + row)
    s = tl.maximum(slot, 0).to(tl.int64)
    n_end = tl.where(slot >= 0, N, 0)  # a base row writes nothing
    ss = tl.arange(0, BLOCK_S)
    cs = tl.arange(0, BLOCK_C)
    shares = tl.load(
        part_ptr + (row * CHUNKS + ss[:, None]) * BLOCK_C + cs[None, :],
        mask=(ss < CHUNKS)[:, None],
        other=0.0,
    )
    h = tl.sum(shares, axis=0)
    ns = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    n_in = ns < n_end
    b = tl.load(
        b_ptr + s * stride_bs + ns[:, None] * stride_bn + cs[None, :],
        mask=n_in[:, None] & (cs < C)[None, :],
        other=0.0,
    )
    delta = tl.sum(b * h[None, :], axis=1)
    where = out_ptr + row * stride_out + ns
    old = tl.load(where, mask=n_in, other=0.0).to(tl.float32)
    tl.store(where, (old + delta).to(out_ptr.dtype.element_ty), mask=n_in)


def lora_gathered_triton(
    out: torch.Tensor, x: torch.Tensor, a: torch.Tensor, b: torch.Tensor, slots: torch.Tensor
) -> torch.Tensor:
    """``out`` [T, >=N] += each row's ``(x @ A[s]^T) @ B[s]^T`` in place; returns ``out``.

    ``x`` [T, K]; ``a`` [S, C, K] and ``b`` [S, N, C] fp32 with unit stride in their last
    dim; ``slots`` [T] (-1: the row is left alone)."""
    t, k = x.shape
    _, c, _ = a.shape
    n = b.shape[1]
    if t == 0 or n == 0 or c == 0:
        return out
    if x.stride(-1) != 1:
        x = x.contiguous()
    assert out.stride(-1) == 1 and a.stride(-1) == 1 and b.stride(-1) == 1
    block_c = triton.next_power_of_2(c)
    block_k = max(16, min(1024, TILE // block_c, triton.next_power_of_2(k)))
    chunks = triton.cdiv(k, block_k)
    block_n = max(16, min(256, TILE // block_c, triton.next_power_of_2(n)))
    part = torch.empty((t, chunks, block_c), dtype=torch.float32, device=x.device)
    _lora_shrink_kernel[(t, chunks)](
        x,
        a,
        slots,
        part,
        k,
        c,
        x.stride(0),
        a.stride(0),
        a.stride(1),
        CHUNKS=chunks,
        BLOCK_C=block_c,
        BLOCK_K=block_k,
        num_warps=4,
    )
    _lora_expand_kernel[(t, triton.cdiv(n, block_n))](
        part,
        b,
        slots,
        out,
        n,
        c,
        out.stride(0),
        b.stride(0),
        b.stride(1),
        CHUNKS=chunks,
        BLOCK_S=triton.next_power_of_2(chunks),
        BLOCK_C=block_c,
        BLOCK_N=block_n,
        num_warps=4,
    )
    return out

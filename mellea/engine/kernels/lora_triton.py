"""Triton twin of :func:`mellea.engine.kernels.lora.lora_gathered_ref`.

One program per (row, span of output columns): it reads its row's slot, forms
``h = x @ A[s]^T`` (C values, kept in registers) and adds ``h @ B[s]^T`` to its span.
A row's spans each form ``h`` again; their number is chosen so that a batch gives the
GPU about :data:`TARGET_PROGRAMS` programs, since a decode step's rows are few and each
product is small (the rank C is 8-64 per piece).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

TARGET_PROGRAMS = 256  # about two per multiprocessor on an H100/H200


@triton.jit
def _lora_gathered_kernel(
    x_ptr,
    a_ptr,
    b_ptr,
    slot_ptr,
    out_ptr,
    K,
    N,
    C,
    stride_x,
    stride_out,
    stride_as,
    stride_ac,
    stride_bs,
    stride_bn,
    span,
    BLOCK_C: tl.constexpr,
    BLOCK_K: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    first = tl.program_id(1) * span
    slot = tl.load(slot_ptr + row)
    s = tl.maximum(slot, 0).to(tl.int64)
    # A base row (slot -1) reads and writes nothing: its bounds are zero.
    k_end = tl.where(slot >= 0, K, 0)
    n_end = tl.where(slot >= 0, N, 0)
    cs = tl.arange(0, BLOCK_C)
    c_in = cs < C
    h = tl.zeros([BLOCK_C], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        k_in = ks < k_end
        x = tl.load(x_ptr + row * stride_x + ks, mask=k_in, other=0.0).to(tl.float32)
        a = tl.load(
            a_ptr + s * stride_as + cs[:, None] * stride_ac + ks[None, :],
            mask=c_in[:, None] & k_in[None, :],
            other=0.0,
        )
        h += tl.sum(a * x[None, :], axis=1)
    for n0 in range(0, span, BLOCK_N):
        ns = first + n0 + tl.arange(0, BLOCK_N)
        n_in = (ns < n_end) & (n0 + tl.arange(0, BLOCK_N) < span)
        b = tl.load(
            b_ptr + s * stride_bs + ns[:, None] * stride_bn + cs[None, :],
            mask=n_in[:, None] & c_in[None, :],
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
    assert out.stride(-1) == 1
    assert a.stride(-1) == 1 and b.stride(-1) == 1
    block_c = triton.next_power_of_2(c)
    block_k = max(16, min(128, 8192 // block_c))
    block_n = max(16, min(128, 4096 // block_c))
    spans = min(triton.cdiv(n, block_n), max(1, triton.cdiv(TARGET_PROGRAMS, t)))
    span = triton.cdiv(triton.cdiv(n, spans), block_n) * block_n
    grid = (t, triton.cdiv(n, span))
    _lora_gathered_kernel[grid](
        x,
        a,
        b,
        slots,
        out,
        k,
        n,
        c,
        x.stride(0),
        out.stride(0),
        a.stride(0),
        a.stride(1),
        b.stride(0),
        b.stride(1),
        span,
        BLOCK_C=block_c,
        BLOCK_K=block_k,
        BLOCK_N=block_n,
        num_warps=4,
    )
    return out

"""Triton gated activations (SiLU or GELU-tanh of the gate, times up) over a fused [gate | up]."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

_SQRT_2_OVER_PI = tl.constexpr(0.7978845608028654)  # a global a kernel may read


@triton.jit
def _act_and_mul_kernel(
    x_ptr,
    out_ptr,
    stride_x,
    stride_out,
    n_inter,
    GELU: tl.constexpr,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n_inter
    gate = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(x_ptr + row * stride_x + n_inter + cols, mask=mask, other=0.0).to(tl.float32)
    if GELU:
        inner = _SQRT_2_OVER_PI * (gate + 0.044715 * gate * gate * gate)
        inner = tl.minimum(tl.maximum(inner, -20.0), 20.0)  # tanh is +-1 there in fp32
        # tanh(u) = 2 sigmoid(2u) - 1, written with exp for the interpreter's sake.
        act = 0.5 * gate * (1.0 + (2.0 / (1.0 + tl.exp(-2.0 * inner)) - 1.0))
    else:
        act = gate / (1.0 + tl.exp(-gate))
    tl.store(out_ptr + row * stride_out + cols, (act * up).to(out_ptr.dtype.element_ty), mask=mask)


def _act_and_mul(x: torch.Tensor, gelu: bool) -> torch.Tensor:
    n_inter = x.shape[-1] // 2
    x2 = x.reshape(-1, x.shape[-1])
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    out = torch.empty((x2.shape[0], n_inter), dtype=x.dtype, device=x.device)
    block = min(triton.next_power_of_2(n_inter), 1024)
    if x2.shape[0] > 0 and n_inter > 0:
        grid = (x2.shape[0], triton.cdiv(n_inter, block))
        _act_and_mul_kernel[grid](
            x2, out, x2.stride(0), out.stride(0), n_inter, GELU=gelu, BLOCK=block, num_warps=4
        )
    return out.view(*x.shape[:-1], n_inter)


def silu_and_mul_triton(x: torch.Tensor) -> torch.Tensor:
    """Triton twin of ``silu_and_mul_ref``: ``x`` [..., 2I] -> [..., I]."""
    return _act_and_mul(x, gelu=False)


def gelu_tanh_and_mul_triton(x: torch.Tensor) -> torch.Tensor:
    """Triton twin of ``gelu_tanh_and_mul_ref``: ``x`` [..., 2I] -> [..., I]."""
    return _act_and_mul(x, gelu=True)

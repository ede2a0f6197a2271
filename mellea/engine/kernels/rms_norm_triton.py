"""Triton RMSNorm fused with the residual add that precedes it."""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _rms_norm_kernel(
    x_ptr,
    res_ptr,
    w_ptr,
    out_ptr,
    res_out_ptr,
    stride_x,
    stride_res,
    stride_out,
    stride_res_out,
    n_cols,
    eps,
    HAS_RESIDUAL: tl.constexpr,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    # All arithmetic in fp32: the interpreter cannot do bf16 arithmetic, and a single
    # fp32 op rounded back matches what torch does for one half-precision op.
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    if HAS_RESIDUAL:
        r = tl.load(res_ptr + row * stride_res + cols, mask=mask, other=0.0).to(tl.float32)
        # Round the sum to the input dtype, as the reference does before normalising.
        x = (x + r).to(res_out_ptr.dtype.element_ty)
        tl.store(res_out_ptr + row * stride_res_out + cols, x, mask=mask)
        x = x.to(tl.float32)
    inv_rms = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    if HAS_RESIDUAL:
        normed = (x * inv_rms).to(res_out_ptr.dtype.element_ty).to(tl.float32)
    else:
        normed = (x * inv_rms).to(x_ptr.dtype.element_ty).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * stride_out + cols, normed * w, mask=mask)


def _rows(t: torch.Tensor) -> torch.Tensor:
    """A 2-D view with unit stride along the last dim (copies only if needed)."""
    t2 = t.reshape(-1, t.shape[-1])
    return t2 if t2.stride(-1) == 1 else t2.contiguous()


def rms_norm_triton(
    x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Triton twin of ``rms_norm_ref``: ``x`` [T, H] -> (norm(x [+ residual]), x + residual or None).

    One program per row; any width H (a power-of-2 block, masked).
    """
    shape = x.shape
    n_cols = shape[-1]
    x2 = _rows(x)
    w = weight.contiguous()
    if residual is not None:
        r2 = _rows(residual)
        res_dtype = torch.promote_types(x.dtype, residual.dtype)
        res_out = torch.empty(x2.shape, dtype=res_dtype, device=x.device)
    else:
        res_dtype = x.dtype
    out = torch.empty(x2.shape, dtype=torch.promote_types(res_dtype, weight.dtype), device=x.device)
    if residual is None:
        r2, res_out = x2, out  # placeholders, never touched
    n_rows = x2.shape[0]
    if n_rows > 0:
        block = triton.next_power_of_2(n_cols)
        _rms_norm_kernel[(n_rows,)](
            x2,
            r2,
            w,
            out,
            res_out,
            x2.stride(0),
            r2.stride(0),
            out.stride(0),
            res_out.stride(0),
            n_cols,
            eps,
            HAS_RESIDUAL=residual is not None,
            BLOCK=block,
            num_warps=min(max(block // 256, 1), 8),
        )
    if residual is None:
        return out.view(shape), None
    return out.view(shape), res_out.view(shape)

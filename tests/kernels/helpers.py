"""Shared helpers of the kernel tests."""

from __future__ import annotations

import torch

# bf16 runs too: the kernels upcast it, since the interpreter cannot do bf16 arithmetic.
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def tolerance(dtype: torch.dtype) -> dict[str, float]:
    """assert_close tolerances for a kernel output of ``dtype``."""
    return {
        torch.float32: {"atol": 1e-5, "rtol": 1e-5},
        torch.float16: {"atol": 2e-3, "rtol": 2e-3},
        torch.bfloat16: {"atol": 2e-2, "rtol": 2e-2},
    }[dtype]


def padded(t: torch.Tensor, pad: int = 7, fill: float = 1e3) -> torch.Tensor:
    """A copy of ``t`` as a non-contiguous view whose last dim sits in a wider row of ``fill``.

    Reading past the end of a row then picks up ``fill`` and changes the result.
    """
    wide = torch.full((*t.shape[:-1], t.shape[-1] + pad), fill, dtype=t.dtype)
    wide[..., : t.shape[-1]] = t
    return wide[..., : t.shape[-1]]

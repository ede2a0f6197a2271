"""Triton RMSNorm against its PyTorch reference, in the interpreter."""

from __future__ import annotations

import pytest
import torch

from mellea.engine.kernels.rms_norm import rms_norm, rms_norm_ref
from tests.kernels.helpers import DTYPES, padded, tolerance


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden", [576, 96, 64])
@pytest.mark.parametrize("with_residual", [False, True])
def test_matches_reference(dtype: torch.dtype, hidden: int, with_residual: bool) -> None:
    from mellea.engine.kernels.rms_norm_triton import rms_norm_triton

    x = torch.randn(5, hidden, dtype=dtype)
    weight = (1 + 0.1 * torch.randn(hidden)).to(dtype)
    residual = torch.randn(5, hidden, dtype=dtype) if with_residual else None
    x_before = x.clone()
    out, res = rms_norm_triton(x, weight, 1e-6, residual)
    ref_out, ref_res = rms_norm_ref(x, weight, 1e-6, residual)
    assert out.dtype == ref_out.dtype and out.shape == ref_out.shape
    torch.testing.assert_close(out, ref_out, **tolerance(dtype))
    if with_residual:
        torch.testing.assert_close(res, ref_res, **tolerance(dtype))
    else:
        assert res is None
    torch.testing.assert_close(x, x_before, atol=0, rtol=0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_strided_rows_do_not_leak(dtype: torch.dtype) -> None:
    from mellea.engine.kernels.rms_norm_triton import rms_norm_triton

    x = padded(torch.randn(3, 96, dtype=dtype))
    residual = padded(torch.randn(3, 96, dtype=dtype), pad=5)
    weight = torch.randn(96, dtype=dtype)
    out, res = rms_norm_triton(x, weight, 1e-5, residual)
    ref_out, ref_res = rms_norm_ref(x.contiguous(), weight, 1e-5, residual.contiguous())
    torch.testing.assert_close(out, ref_out, **tolerance(dtype))
    torch.testing.assert_close(res, ref_res, **tolerance(dtype))


def test_single_row_and_dispatch() -> None:
    x = torch.randn(1, 576)
    weight = torch.randn(576)
    out, res = rms_norm(x, weight, 1e-5)
    torch.testing.assert_close(out, rms_norm_ref(x, weight, 1e-5)[0])
    assert res is None

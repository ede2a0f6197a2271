"""Triton SiLU-and-mul against its PyTorch reference, in the interpreter."""

from __future__ import annotations

import pytest
import torch

from mellea.engine.kernels.activation import silu_and_mul, silu_and_mul_ref
from tests.kernels.helpers import DTYPES, padded, tolerance


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("inter", [96, 1536 + 5])  # the second spans two column blocks
def test_matches_reference(dtype: torch.dtype, inter: int) -> None:
    from mellea.engine.kernels.activation_triton import silu_and_mul_triton

    x = 3 * torch.randn(3, 2 * inter, dtype=dtype)
    out = silu_and_mul_triton(x)
    ref = silu_and_mul_ref(x)
    assert out.dtype == ref.dtype and out.shape == ref.shape
    torch.testing.assert_close(out, ref, **tolerance(dtype))


def test_strided_input_and_dispatch() -> None:
    x = padded(torch.randn(4, 2 * 48))
    torch.testing.assert_close(silu_and_mul(x), silu_and_mul_ref(x.contiguous()))


def test_empty_batch() -> None:
    from mellea.engine.kernels.activation_triton import silu_and_mul_triton

    assert silu_and_mul_triton(torch.randn(0, 64)).shape == (0, 32)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("inter", [96, 1536 + 5])
def test_gelu_tanh_matches_reference(dtype: torch.dtype, inter: int) -> None:
    from mellea.engine.kernels.activation import gelu_tanh_and_mul, gelu_tanh_and_mul_ref
    from mellea.engine.kernels.activation_triton import gelu_tanh_and_mul_triton

    x = 3 * torch.randn(3, 2 * inter, dtype=dtype)
    ref = gelu_tanh_and_mul_ref(x)
    torch.testing.assert_close(gelu_tanh_and_mul_triton(x), ref, **tolerance(dtype))
    torch.testing.assert_close(gelu_tanh_and_mul(padded(x)), ref, **tolerance(dtype))
    assert not torch.allclose(ref.float(), silu_and_mul_ref(x).float(), atol=1e-2)

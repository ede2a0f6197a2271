"""The gathered LoRA kernel (each row's own adapter) against its PyTorch reference."""

from __future__ import annotations

import pytest
import torch

from mellea.engine.kernels.lora import lora_gathered, lora_gathered_ref
from tests.kernels.helpers import DTYPES, tolerance


def operands(t: int, k: int, n: int, c: int, adapters: int, dtype: torch.dtype):
    x = torch.randn(t, k).to(dtype)
    a = torch.randn(adapters, c, k) / k**0.5
    b = torch.randn(adapters, n, c)
    out = torch.randn(t, n).to(dtype)
    slots = torch.randint(-1, adapters, (t,))
    slots[0], slots[-1] = -1, adapters - 1  # a base row and a row of the last adapter
    return out, x, a, b, slots


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    ("t", "k", "n", "c"),
    [
        (5, 96, 200, 48),  # C not a power of two; N across column blocks
        (3, 300, 64, 16),  # K not a multiple of the K block
        (300, 64, 72, 8),  # more rows than target programs: one span per row
        (1, 64, 1000, 64),  # one row: its columns split over many programs
        (2, 9000, 40, 16),  # many input chunks, summed by the expand kernel
    ],
)
def test_matches_reference(dtype: torch.dtype, t: int, k: int, n: int, c: int) -> None:
    from mellea.engine.kernels.lora_triton import lora_gathered_triton

    out, x, a, b, slots = operands(t, k, n, c, 4, dtype)
    want = lora_gathered_ref(out.clone(), x, a, b, slots)
    got = lora_gathered_triton(out.clone(), x, a, b, slots)
    torch.testing.assert_close(got, want, **tolerance(dtype))
    base = slots < 0  # base rows keep their bits
    assert torch.equal(got[base], out[base])
    assert not torch.allclose(got[~base].float(), out[~base].float())


def test_reference_is_each_rows_own_adapter() -> None:
    out, x, a, b, slots = operands(6, 32, 40, 8, 3, torch.float32)
    got = lora_gathered_ref(out.clone(), x, a, b, slots)
    for row, s in enumerate(slots.tolist()):
        want = out[row] if s < 0 else out[row] + b[s] @ (a[s] @ x[row])
        torch.testing.assert_close(got[row], want, atol=1e-5, rtol=1e-5)


def test_dispatch_and_a_wider_output() -> None:
    """``out`` may be wider than B's rows (no adapter reaches its last columns)."""
    out, x, a, b, slots = operands(4, 64, 50, 16, 2, torch.float32)
    wide = torch.cat([out, torch.randn(4, 7)], dim=1)
    got = lora_gathered(wide.clone(), x, a, b, slots)
    torch.testing.assert_close(got[:, :50], lora_gathered_ref(out.clone(), x, a, b, slots))
    assert torch.equal(got[:, 50:], wide[:, 50:])

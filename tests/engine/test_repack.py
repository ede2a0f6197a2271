"""The load's repacking in C++ (``cpu_ops/repack.cpp``) against the NumPy/torch
functions that define each layout, bit for bit, on every kernel family this CPU runs."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q

from mellea.engine import cpu_kernels, gguf_blocks
from mellea.engine.formats.quantize import GROUP
from mellea.engine.formats.tiles import tile_groups_torch, tile_rows_torch
from tests.engine.test_gguf_blocks import random_k_blocks

pytestmark = pytest.mark.usefixtures("kernel_family")  # every test on each family


@pytest.mark.parametrize("rows", [16, 37])  # whole tiles, and a padded last one
def test_tile_int4_weights_is_tile_groups(rows):
    torch.manual_seed(rows)
    k = 4 * GROUP
    packed = torch.randint(0, 256, (rows, k // 2), dtype=torch.uint8)
    scales, mins = torch.randn(rows, k // GROUP).half(), torch.randn(rows, k // GROUP).half()
    ours = cpu_kernels.tile_int4_weights(packed, scales, mins)
    for got, want in zip(ours, tile_groups_torch(packed, scales, mins), strict=True):
        assert got.dtype == want.dtype and torch.equal(got, want)


@pytest.mark.parametrize("rows", [16, 37])
def test_tile_int8_weights_is_tile_rows(rows):
    torch.manual_seed(rows)
    q = torch.randint(-127, 128, (rows, 3 * GROUP), dtype=torch.int8)
    scale = torch.rand(rows) + 0.01
    ours = cpu_kernels.tile_int8_weights(q, scale)
    for got, want in zip(ours, tile_rows_torch(q, scale), strict=True):
        assert got.dtype == want.dtype and torch.equal(got, want)


def test_q4_k_groups_is_to_int4():
    """Random blocks (every 6-bit scale and minimum pattern, products that fit fp16 and
    products that round): the same nibbles, scales and minimums, fp16 bits included."""
    raw = random_k_blocks(Q.Q4_K, 24, 1024, seed=7)
    ours = cpu_kernels.q4_k_groups(torch.from_numpy(raw))
    want = gguf_blocks.to_int4(raw, Q.Q4_K)
    for got, expected in zip(ours, want, strict=True):
        assert got.numpy().dtype == expected.dtype
        assert np.array_equal(got.numpy().view(np.uint8), expected.view(np.uint8))


@pytest.mark.parametrize("qtype", [Q.Q6_K, Q.Q8_0], ids=lambda t: t.name)
def test_gguf_int8_rows_is_quantize_rows_of_the_reference(qtype):
    """Per-row int8 straight from the blocks: the bytes and scales of quantizing the
    gguf package's dequantized values, bit for bit (a zero row included)."""
    from gguf.quants import dequantize, quantize

    from mellea.engine.formats.quantize import quantize_rows

    if qtype == Q.Q6_K:
        raw = random_k_blocks(qtype, 24, 1024, seed=9)
        raw.reshape(24, 4, 210)[5, :, 208:210] = 0  # d = 0: a row of zeros
    else:
        weight = np.random.default_rng(9).normal(0, 0.05, (24, 1024)).astype(np.float32)
        weight[5] = 0
        raw = quantize(weight, qtype)
    q, scale = cpu_kernels.gguf_int8_rows(torch.from_numpy(raw), qtype == Q.Q6_K)
    want_q, want_scale = quantize_rows(torch.from_numpy(dequantize(raw, qtype)))
    assert torch.equal(q, want_q) and torch.equal(scale, want_scale)
    assert scale[5] == torch.tensor(1e-12) and not q[5].any()

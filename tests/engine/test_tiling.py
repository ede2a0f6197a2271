"""The int4 kernel's tiled weight layout, against its definition element by element."""

from __future__ import annotations

import torch

from mellea.engine.formats.quantize import GROUP
from mellea.engine.formats.tiles import TILE, tile_groups


def element(packed: torch.Tensor, row: int, group: int, e: int) -> int:
    """Element ``e`` of a row's group in :func:`quantize_groups`' packing."""
    byte = int(packed[row, group * GROUP // 2 + e % 16])
    return byte & 0x0F if e < 16 else byte >> 4


def test_tile_groups_follows_its_documented_layout():
    torch.manual_seed(0)
    n, k = 21, 3 * GROUP  # a padded last tile
    packed = torch.randint(0, 256, (n, k // 2), dtype=torch.uint8)
    scales = torch.randn(n, k // GROUP).half()
    mins = torch.randn(n, k // GROUP).half()
    qweight, tiled_scales, tiled_mins = tile_groups(packed, scales, mins)
    tiles = -(-n // TILE)
    assert qweight.shape == (tiles, k // GROUP, 4, 64)
    for t in range(tiles):
        for j in range(TILE):
            row = t * TILE + j
            for g in range(k // GROUP):
                for s in range(4):
                    for b in range(4):
                        got = int(qweight[t, g, s, 4 * j + b])
                        if row >= n:
                            assert got == 0
                            continue
                        low = element(packed, row, g, 8 * s + b)
                        high = element(packed, row, g, 8 * s + 4 + b)
                        assert got == low | (high << 4)
                want = scales[row] if row < n else torch.zeros(k // GROUP).half()
                assert torch.equal(tiled_scales[t, :, j], want)
                want = mins[row] if row < n else torch.zeros(k // GROUP).half()
                assert torch.equal(tiled_mins[t, :, j], want)


def test_tile_rows_follows_its_documented_layout():
    from mellea.engine.formats.tiles import tile_rows

    torch.manual_seed(1)
    n, k = 37, 2 * GROUP  # a padded last tile
    q = torch.randint(-127, 128, (n, k), dtype=torch.int8)
    scale = torch.rand(n) + 0.5
    qweight, wsum, tiled_scale = tile_rows(q, scale)
    tiles = -(-n // TILE)
    assert qweight.shape == (tiles, k // GROUP, 8, 64) and qweight.dtype == torch.int8
    assert wsum.shape == (tiles, k // GROUP, TILE) and wsum.dtype == torch.int32
    for t in range(tiles):
        for j in range(TILE):
            row = t * TILE + j
            for g in range(k // GROUP):
                for u in range(8):
                    for b in range(4):
                        want = int(q[row, g * GROUP + 4 * u + b]) if row < n else 0
                        assert int(qweight[t, g, u, 4 * j + b]) == want
                want = int(q[row, g * GROUP : (g + 1) * GROUP].sum()) if row < n else 0
                assert int(wsum[t, g, j]) == want
            assert float(tiled_scale[t * TILE + j]) == (float(scale[row]) if row < n else 0.0)

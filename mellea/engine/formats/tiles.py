"""The C++ kernels' weight layouts: int4 groups, Q4_K groups, int8 rows and a GGUF's
byte form in tiles of :data:`TILE` output rows, and the byte form's six-bit packing.
Each has a PyTorch reference (``*_torch``); the loader uses the C++ twin where it runs
(the same bytes)."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from mellea.engine import cpu_kernels
from mellea.engine.formats.quantize import GROUP

TILE = 16  # tiled int4/int8 weights: output rows per tile (one AVX-512 vector of sums)


def tile_groups(
    packed: torch.Tensor, scales: torch.Tensor, mins: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`tile_groups_torch`'s layout, in one pass of C++ where the kernels run
    (``cpu_kernels.tile_int4_weights``: the same bytes, about a tenth of the load's
    time for a 1.7B model's int4 layers)."""
    if cpu_kernels.available():
        return cpu_kernels.tile_int4_weights(packed, scales, mins)
    return tile_groups_torch(packed, scales, mins)


def tile_groups_torch(
    packed: torch.Tensor, scales: torch.Tensor, mins: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`quantize_groups`' output in the layout of ``cpu_kernels.int4_vnni_linear``:
    tiles of :data:`TILE` rows (the last padded with zero rows), each group of a tile
    256 bytes in which byte ``4 j + b`` of part ``s`` holds element ``8 s + b`` of row
    ``j``'s group in its low nibble and element ``8 s + 4 + b`` in its high one; scales
    and mins [tiles, groups, 16].

    Works on 4-byte words (a group's 16 bytes are 4 of them, one per ``s % 2`` and
    low/high half): the nibbles move with word-wide masks and shifts, and the tiling
    transposes words, not bytes; byte-wise tensor ops made this most of a 1.7B model's
    load time."""
    n, half = packed.shape
    groups = half * 2 // GROUP
    tiles = -(-n // TILE)
    rows = tiles * TILE

    def padded(values: torch.Tensor) -> torch.Tensor:
        return values if rows == n else F.pad(values, (0, 0, 0, rows - n))

    words = padded(packed.contiguous()).view(torch.int32).view(tiles, TILE, groups, 2, 2)
    first, second = words[..., 0], words[..., 1]  # elements 8 s' + b and 8 s' + 4 + b
    low = 0x0F0F0F0F
    high = 0xF0F0F0F0 - (1 << 32)  # as int32
    # The results go straight to their tiled places (no untiled copy to permute), and
    # the two scratch tensors are reused: each fresh one is page faults on a whole
    # layer's weights, which made this most of a 1.7B model's load time.
    tiled = torch.empty(tiles, groups, 2, 2, TILE, dtype=torch.int32)
    places = tiled.permute(0, 4, 1, 2, 3)  # [tile, row, g, upper half, s%2]
    word = torch.bitwise_left_shift(second, 4)
    word &= high
    scratch = torch.bitwise_and(first, low)
    word |= scratch
    places[..., 0, :] = word  # parts s = 0, 1
    torch.bitwise_right_shift(first, 4, out=word)
    word &= low
    torch.bitwise_and(second, high, out=scratch)
    word |= scratch
    places[..., 1, :] = word  # parts s = 2, 3
    qweight = tiled.view(torch.uint8).view(tiles, groups, 4, 64)

    def per_tile(values: torch.Tensor) -> torch.Tensor:
        return padded(values).view(tiles, TILE, groups).transpose(1, 2).contiguous()

    return qweight, per_tile(scales), per_tile(mins)


def tile_q4k(
    packed: torch.Tensor, sub: torch.Tensor, super_: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`tile_q4k_torch`'s layout, in one pass of C++ where the kernels run
    (``cpu_kernels.tile_q4k_weights``, the same bytes)."""
    if cpu_kernels.available():
        return cpu_kernels.tile_q4k_weights(packed, sub, super_)
    return tile_q4k_torch(packed, sub, super_)


def tile_q4k_torch(
    packed: torch.Tensor, sub: torch.Tensor, super_: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A GGUF's Q4_K groups (:class:`~mellea.engine.gguf_blocks.Q4KGroups`) in the layout
    of ``cpu_kernels.q4k_vnni_linear``: the nibbles as :func:`tile_groups_torch` tiles
    them; ``sub`` [N, K/32, 2] as [tiles, groups, 2, 16] (each group's 16 rows' ``sc``,
    then their ``m``); ``super_`` [N, K/256, 2] as [tiles, blocks, 2, 16] (``d``, then
    ``-dmin``); rows past N zero."""
    qweight, sc, m = tile_groups_torch(packed, sub[..., 0], sub[..., 1])
    n, blocks = super_.shape[:2]
    tiles = -(-n // TILE)
    padded = F.pad(super_, (0, 0, 0, 0, 0, tiles * TILE - n))
    factors = padded.view(tiles, TILE, blocks, 2).permute(0, 2, 3, 1).contiguous()
    return qweight, torch.stack([sc, m], dim=2).contiguous(), factors


def tile_rows(
    q: torch.Tensor, scale: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`tile_rows_torch`'s layout, in one pass of C++ where the kernels run
    (``cpu_kernels.tile_int8_weights``, the same bytes)."""
    if cpu_kernels.available():
        return cpu_kernels.tile_int8_weights(q, scale)
    return tile_rows_torch(q, scale)


def tile_rows_torch(
    q: torch.Tensor, scale: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`quantize_rows`' output in the layout of ``cpu_kernels.int8_vnni_linear``:
    tiles of :data:`TILE` rows (the last padded with zero rows), each group of 32 along
    the input 512 bytes in which part ``u`` (64 bytes) holds bytes ``4 u`` to ``4 u + 3``
    of each of the tile's rows' group; the weights' sum per row and group [tiles,
    groups, 16] int32 (the kernel's correction for its unsigned activations); the
    scales padded to [tiles * 16].

    Moves 4-byte words, not bytes (part ``u`` of a row's group is one word of the row),
    and sums each group in the rows' own order: 4x fewer elements to transpose, and a
    contiguous reduction (byte-wise, this was most of a Q4_K_M file's int8 layers' load)."""
    q = q.contiguous()
    n, k = q.shape
    tiles, groups = -(-n // TILE), k // GROUP
    pad = tiles * TILE - n
    words = q.view(torch.int32).view(n, groups, 8)  # [row, group, part]
    wsum = torch.from_numpy(q.numpy().reshape(n, groups, GROUP).sum(-1, dtype=np.int32))
    if pad:
        words = F.pad(words, (0, 0, 0, 0, 0, pad))
        wsum = F.pad(wsum, (0, 0, 0, pad))
    tiled = words.view(tiles, TILE, groups, 8).permute(0, 2, 3, 1).contiguous()
    qweight = tiled.view(torch.int8).view(tiles, groups, 8, 64)
    wsum = wsum.view(tiles, TILE, groups).transpose(1, 2).contiguous()
    return qweight, wsum, F.pad(scale.float(), (0, pad)).contiguous()


def tile_bytes(
    values: torch.Tensor, subs: torch.Tensor, supers: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A GGUF's blocks in the byte form (:class:`~mellea.engine.gguf_blocks.ByteBlocks`:
    values ``q + 128`` [N, K] uint8, ``subs`` [N, K/32, P] int8, ``supers`` [N, B, P - 1]
    fp32) in the layout of ``cpu_kernels.bytes_linear``: the values in :func:`tile_rows`'
    tiles [T, K/32, 8, 64] (as bytes), subs [T, K/32, P, 16] and supers [T, B, P - 1, 16]
    (rows past N zero). See cpu_ops/linear_bytes.cpp and cpu_ops/bytes_tiles.h for what each number means."""
    n = values.shape[0]
    tiles = -(-n // TILE)
    pad = tiles * TILE - n
    signed = values.contiguous().view(torch.int8)
    zero = torch.zeros(n, dtype=torch.float32)
    qweight = (
        tile_rows(signed, zero) if cpu_kernels.available() else tile_rows_torch(signed, zero)
    )[0]

    def per_tile(t: torch.Tensor) -> torch.Tensor:
        t = F.pad(t, (0, 0, 0, 0, 0, pad)) if pad else t
        return t.view(tiles, TILE, *t.shape[1:]).permute(0, 2, 3, 1).contiguous()

    return qweight.view(torch.uint8), per_tile(subs), per_tile(supers)


def pack_six(qweight: torch.Tensor, n: int) -> torch.Tensor | None:
    """:func:`tile_bytes`' values [T, G, 8, 64] (``q + 128``) of ``n`` rows in the six-bit
    form [T, G, 6, 64] when every ``q`` is in -32..31 (Q6_K's, Q5_K's, Q4_K's, Q4_0's),
    else ``None``: ``v = q + 32``; parts 0-3 hold the low 4 bits of parts ``u`` (low
    nibble) and ``u + 4`` (high nibble), parts 4 and 5 the high 2 bits of parts ``4 h``
    .. ``4 h + 3`` (part ``4 h + k`` at bits ``2 k``); the padding rows get ``q = 0``.
    A Q4_K_M file's Q6_K layers are read at 6.75 bits a weight with their scales
    instead of 8.6 (cpu_ops/linear_bytes.cpp). The loader uses the C++ twin
    (:func:`cpu_kernels.bytes_to_six`, the same bytes, a tenth of the time)."""
    tiles = qweight.shape[0]
    row = torch.arange(tiles)[:, None] * TILE + torch.arange(64)[None, :] // 4  # byte's row
    padding = (row >= n).view(tiles, 1, 1, 64)
    qweight = qweight.masked_fill(padding, 128)
    if qweight.numel() == 0 or qweight.min() < 96 or qweight.max() > 159:
        return None
    v = qweight - 96
    low, high = v & 15, v >> 4
    nibbles = low[:, :, :4] | (low[:, :, 4:] << 4)
    h = high.view(*high.shape[:2], 2, 4, 64)
    packed = h[:, :, :, 0] | (h[:, :, :, 1] << 2) | (h[:, :, :, 2] << 4) | (h[:, :, :, 3] << 6)
    return torch.cat([nibbles, packed], dim=2).contiguous()

"""Quantizing fp32 weights: symmetric int8 per output row, asymmetric int4 in groups of
:data:`GROUP` (GGUF Q4_1's scheme), and the fp32 weights they stand for."""

from __future__ import annotations

from typing import Any

import torch

# Quantizing works through this many rows at a time: its float32 temporaries for a
# large table (a 49k x 2048 tied LM head) would otherwise be several copies of it.
QUANTIZE_ROWS = 4096


def _by_chunks(quantize: Any, weight: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """``quantize`` (row by row independent) over ``weight`` in chunks of rows."""
    parts = [quantize(chunk) for chunk in weight.split(QUANTIZE_ROWS)]
    return tuple(torch.cat(pieces) for pieces in zip(*parts, strict=True))


def quantize_rows(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric int8 per row (output channel): ``weight ~= q * scale[:, None]``."""
    if weight.shape[0] > QUANTIZE_ROWS:
        return _by_chunks(quantize_rows, weight)  # type: ignore[return-value]
    w = weight.detach().float()
    scale = (w.abs().amax(dim=1) / 127.0).clamp(min=1e-12)
    q = torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8)
    return q.contiguous(), scale


GROUP = 32  # int4 weights: elements per group (along the input dimension)


def quantize_groups(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Asymmetric 4-bit in groups of :data:`GROUP` along each row, GGUF Q4_1's scheme:
    ``w ~= q * scale + min`` with ``q`` in 0..15, ``min`` the group's smallest value
    and ``scale`` its range / 15, both stored in fp16 (as Q4_1 stores them). Returns
    (packed [N, K/2] uint8, scales [N, K/32] fp16, mins [N, K/32] fp16); byte
    ``16 g + j`` of a row holds element ``j`` of group ``g`` in its low nibble and
    element ``j + 16`` in its high one (the kernel's layout)."""
    n, k = weight.shape
    if k % GROUP:
        raise ValueError(f"int4 needs an input size divisible by {GROUP}, not {k}")
    if n > QUANTIZE_ROWS:
        return _by_chunks(quantize_groups, weight)  # type: ignore[return-value]
    groups = weight.detach().float().reshape(n, k // GROUP, GROUP)
    low = groups.amin(-1).half()
    scale = ((groups.amax(-1) - low.float()) / 15).half()
    safe = torch.where(scale > 0, scale.float(), torch.ones_like(scale, dtype=torch.float32))
    q = groups - low.float()[..., None]
    q.div_(safe[..., None]).round_().clamp_(0, 15)  # in place: no more temporaries
    q = q.to(torch.uint8)
    packed = q[..., : GROUP // 2] | (q[..., GROUP // 2 :] << 4)
    return packed.reshape(n, k // 2).contiguous(), scale.contiguous(), low.contiguous()


def dequantize_groups(
    packed: torch.Tensor, scales: torch.Tensor, mins: torch.Tensor
) -> torch.Tensor:
    """The fp32 weight [N, K] that :func:`quantize_groups`' output stands for."""
    n = packed.shape[0]
    halves = packed.reshape(n, -1, GROUP // 2)
    q = torch.cat([halves & 0x0F, halves >> 4], dim=-1).float()
    return (q * scales.float()[..., None] + mins.float()[..., None]).reshape(n, -1)


def dequantize_q4k(packed: torch.Tensor, sub: torch.Tensor, super_: torch.Tensor) -> torch.Tensor:
    """The fp32 weight [N, K] of a GGUF's Q4_K groups as the file holds them
    (:class:`~mellea.engine.gguf_blocks.Q4KGroups`: nibbles, each group's 6-bit ``sc`` and
    ``m`` [N, K/32, 2], each block's ``d`` and ``-dmin`` [N, K/256, 2]): the reference
    dequantizer's values bit for bit (every product exact in fp32)."""
    n = packed.shape[0]
    halves = packed.reshape(n, -1, GROUP // 2)
    q = torch.cat([halves & 0x0F, halves >> 4], dim=-1).float()
    factors = super_.float().repeat_interleave(8, dim=1) * sub.float()  # [N, K/32, 2]
    return (q * factors[..., 0:1] + factors[..., 1:2]).reshape(n, -1)

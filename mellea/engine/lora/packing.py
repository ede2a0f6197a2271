"""The adapters' pairs packed in fp16 for the C++ ``lora_add`` (cpu_ops/lora.cpp).

What the fused C++ decode layer and the int8/int4 projections' hooks on the C++ CPU
kernels read (:func:`pack_fused`).
"""

from __future__ import annotations

import torch

from mellea.engine.lora.peft import LoraAdapter


def pack_fused(adapters: list[LoraAdapter], key: tuple[int, str]) -> list[torch.Tensor]:
    """The pairs of every adapter on projection ``key`` as the fused C++ decode layer
    reads them (see ``lora_add`` in cpu_ops/lora.cpp): ``a`` [C, in] fp16, each
    adapter's A rows together in slot order; ``bt`` fp16, flat, each piece's B
    transposed ([its ranks, its rows], in blocks of :data:`LORA_BLOCK` rows); ``segs``
    [S, 6] int64, per piece (slot, first row, end row, first and end row of A, offset
    in ``bt``). Empty tensors where no adapter has a pair there.

    fp16 holds the pairs to about 3 significant digits (the base weights beside them are
    int4) and halves what a step reads; each rank's A row and B column are first scaled
    by reciprocal powers of two to the same largest magnitude (their product is then
    exactly the same), so neither leaves fp16's range.
    """
    rows_of_a, pieces, segs = [], [], []
    col = offset = 0
    for slot, adapter in enumerate(adapters):
        update = adapter.updates.get(key)
        if update is None:
            continue
        a = update.a.detach().to("cpu", torch.float32, copy=True)
        for r0, r1, c0, c1, b in update.parts:
            b = b.detach().to("cpu", torch.float32, copy=True)
            _balance(a[c0:c1], b)
            segs.append([slot, r0, r1, col + c0, col + c1, offset])
            pieces.append(_in_blocks(b.T).half())
            offset += b.numel()
        rows_of_a.append(a.half())
        col += a.shape[0]
    if not segs:
        empty = torch.empty(0, dtype=torch.float16)
        return [empty.view(0, 0), empty, torch.empty(0, 6, dtype=torch.int64)]
    return [torch.cat(rows_of_a).contiguous(), torch.cat(pieces), torch.tensor(segs)]


# Output rows per block of a packed B (``kLoraBlock`` in cpu_ops/lora.cpp).
LORA_BLOCK = 64


def _in_blocks(bt: torch.Tensor) -> torch.Tensor:
    """B transposed, [rank, rows], flattened in blocks of :data:`LORA_BLOCK` rows: each
    block [rank, its rows] row-major, so the C++ op reads one block as one run."""
    return torch.cat(
        [bt[:, o : o + LORA_BLOCK].flatten() for o in range(0, bt.shape[1], LORA_BLOCK)]
    )


def _balance(a: torch.Tensor, b: torch.Tensor) -> None:
    """Scale A's rows [r, in] and B's columns [rows, r] in place by 2^e and 2^-e, e per
    rank, so that each rank's largest |A| and |B| are within a factor of 2."""
    top_a, top_b = a.abs().amax(dim=1), b.abs().amax(dim=0)
    both = (top_a > 0) & (top_b > 0)
    ratio = torch.where(both, top_b / torch.where(both, top_a, 1.0), 1.0)
    factor = torch.exp2(torch.round(0.5 * torch.log2(ratio)))
    a.mul_(factor[:, None])
    b.div_(factor[None, :])

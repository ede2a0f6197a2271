"""Low-rank updates of one fused projection: one adapter's, or every adapter's stacked.

Several pieces (q, k, v of the fused q/k/v projection; gate and up) share one product
with A, and each writes its own rows of the output with its own B.
:func:`stack_updates` puts every loaded adapter's pieces side by side, for the steps
that mix adapters; :func:`add_parts` adds the B half of an update to an output.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from mellea.engine.lora.peft import LoraAdapter


@dataclass
class LowRank:
    """Low-rank updates of one projection: ``out[:, r0:r1] += (x @ A[c0:c1]^T) @ B^T``
    for each part ``(r0, r1, c0, c1, B)``, the product with A taken once for all parts.

    One adapter's (its pieces of a fused projection are the parts), or every loaded
    adapter's side by side (a stack: a part per piece, holding that piece's columns of
    every adapter that has it; ``owner`` gives each column's slot).
    """

    a: torch.Tensor  # [C, in]
    parts: list[tuple[int, int, int, int, torch.Tensor]]
    owner: torch.Tensor  # [C]: the slot each column belongs to
    layout: tuple[int, ...]  # ``owner`` as a key (the step's mask cache)


def low_rank(pieces: list[tuple[int, int, torch.Tensor, torch.Tensor]]) -> LowRank:
    """A :class:`LowRank` from ``(slot, first row, A [r, in], B [rows, r])`` pieces;
    the pieces that start at the same row (the same q, k, v, gate or up piece of
    different adapters) become one part."""
    pieces = sorted(pieces, key=lambda p: (p[1], p[0]))
    parts, owner, col = [], [], 0
    for slot, first, a, b in pieces:
        owner += [slot] * a.shape[0]
        if parts and parts[-1][0] == first:
            r0, r1, c0, _, bs = parts[-1]
            parts[-1] = (r0, r1, c0, col + a.shape[0], [*bs, b])
        else:
            parts.append((first, first + b.shape[0], col, col + a.shape[0], [b]))
        col += a.shape[0]
    device = pieces[0][2].device
    return LowRank(
        a=torch.cat([p[2] for p in pieces]).contiguous(),
        parts=[(r0, r1, c0, c1, torch.cat(bs, dim=1).contiguous()) for r0, r1, c0, c1, bs in parts],
        owner=torch.tensor(owner, device=device),
        layout=tuple(owner),
    )


def stack_updates(adapters: list[LoraAdapter]) -> dict[tuple[int, str], LowRank]:
    """Each (layer, projection)'s updates of all ``adapters`` side by side."""
    keys = {key for adapter in adapters for key in adapter.updates}
    stacks = {}
    for key in keys:
        pieces = []
        for slot, adapter in enumerate(adapters):
            update = adapter.updates.get(key)
            for r0, _, c0, c1, b in update.parts if update is not None else ():
                pieces.append((slot, r0, update.a[c0:c1], b))
        stacks[key] = low_rank(pieces)
    return stacks


def add_parts(
    out: torch.Tensor, h: torch.Tensor, update: LowRank, rows: torch.Tensor | None
) -> None:
    """``out[rows, r0:r1] += h[:, c0:c1] @ B^T`` for each part (all rows: ``rows`` None)."""
    for r0, r1, c0, c1, b in update.parts:
        whole = r0 == 0 and r1 == out.shape[1]
        target = out if whole else out[:, r0:r1]
        part = h if c0 == 0 and c1 == h.shape[1] else h[:, c0:c1]
        delta = (part @ b.T).to(out.dtype)
        if rows is None:
            target.add_(delta)
        else:
            target.index_add_(0, rows, delta)

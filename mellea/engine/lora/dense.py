"""Every loaded adapter's pair on one projection as two dense stacks, indexed by slot.

On a GPU, steps with adapter rows add their deltas through one kernel per projection
(:func:`mellea.engine.kernels.lora.lora_gathered`) that reads each row's slot from a
device tensor. Unlike the row groups of the CPU paths (:class:`~mellea.engine.lora.step.LoraStep`),
nothing about the mix is known on the host, so a decode step with adapters can run as
a CUDA graph captured once (:mod:`mellea.engine.cuda_graphs`).

For a projection, slot ``s`` owns ``a[s]`` [C, in] (its pieces' A rows one after
another, as in its :class:`~mellea.engine.lora.low_rank.LowRank`; zero past its own rank) and
``b[s]`` [N, C] (each piece's scaled B in that piece's output rows and its own
columns; zero elsewhere). C is the largest total rank of any adapter there, N the
last output row any adapter writes. Zero entries cost multiplications, not results.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from mellea.engine.lora.peft import LoraAdapter


@dataclass(frozen=True)
class DenseStack:
    """One projection's pairs of every adapter: ``a`` [S, C, in], ``b`` [S, N, C], fp32."""

    a: torch.Tensor
    b: torch.Tensor


def dense_stacks(adapters: list[LoraAdapter]) -> dict[tuple[int, str], DenseStack]:
    """Per (layer, projection) that some adapter updates, the dense stacks of all
    ``adapters`` (slot = position in the list), on the adapters' device."""
    keys = {key for adapter in adapters for key in adapter.updates}
    stacks = {}
    for key in sorted(keys):
        updates = [adapter.updates.get(key) for adapter in adapters]
        present = [u for u in updates if u is not None]
        ranks = max(u.a.shape[0] for u in present)
        rows = max(r1 for u in present for _, r1, _, _, _ in u.parts)
        width = present[0].a.shape[1]
        device = present[0].a.device
        a = torch.zeros(len(adapters), ranks, width, device=device)
        b = torch.zeros(len(adapters), rows, ranks, device=device)
        for slot, update in enumerate(updates):
            if update is None:
                continue
            a[slot, : update.a.shape[0]] = update.a
            for r0, r1, c0, c1, part in update.parts:
                b[slot, r0:r1, c0:c1] = part
        stacks[key] = DenseStack(a, b)
    return stacks

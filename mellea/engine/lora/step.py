"""One step's adapter rows, and how the step adds their deltas (:func:`plan_step`).

Every token of a step carries an adapter slot (-1 for the base model). The plan says,
once per step, which form of the adapters the step's deltas come from: the gathered
GPU kernel (``gathered``), the stacks of every adapter side by side (``slots``), or
one product per adapter present (``groups``); on the CPU it also carries each row's
slot for the C++ ``lora_add`` (``row_slots``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class LoraStep:
    """One step's adapter tokens.

    ``groups``: per slot present, the rows of the flat batch it owns (None: every row),
    for steps with one adapter. ``slots``: each row's slot (-1: base), set for steps
    that mix adapters, which run on the stacks (every adapter's columns side by side)
    with a mask per column layout, made once per step: two products per projection
    whatever the number of adapters, instead of two per adapter (the ranks are small,
    so multiplying by other adapters' columns costs less than the ops it saves).
    """

    groups: list[tuple[int, torch.Tensor | None]] = field(default_factory=list)
    slots: torch.Tensor | None = None
    masks: dict[tuple[int, ...], torch.Tensor] = field(default_factory=dict)
    # Each row's slot as int32 on the CPU, for the fused decode layer (None elsewhere).
    row_slots: torch.Tensor | None = None
    # Each row's slot on the GPU, for the gathered kernel (mellea.engine.lora.dense):
    # set instead of the rest on a GPU, where every step with adapters runs through it.
    gathered: torch.Tensor | None = None


# On a GPU, steps of up to this many tokens (every decode step a CUDA graph runs) add
# the deltas through the gathered kernel; longer prompt chunks, per adapter group,
# where each adapter's rows share one matrix product.
GATHERED_MAX_ROWS = 512

# A step with adapters mixed runs on the stacks unless fewer than this fraction of the
# loaded adapters are in it (the stack's products then mostly multiply by zeros).
STACKED_MIN_SHARE = 0.25


def plan_step(slots: list[int], loaded: int, device: torch.device | None = None) -> LoraStep | None:
    """The plan of a step whose tokens carry ``slots`` (-1: base) with ``loaded``
    adapters loaded, on ``device`` (None: the CPU); None if every token is base."""
    if not slots or max(slots) < 0:
        return None
    if device is not None and device.type == "cuda" and len(slots) <= GATHERED_MAX_ROWS:
        return LoraStep(gathered=torch.tensor(slots, device=device))
    on_cpu = device is None or device.type == "cpu"
    row_slots = torch.tensor(slots, dtype=torch.int32) if on_cpu else None
    present = sorted(set(slots) - {-1})
    if len(present) == 1 and min(slots) >= 0:
        return LoraStep([(present[0], None)], row_slots=row_slots)
    index = torch.tensor(slots, device=device)
    if len(present) > 1 and len(present) >= STACKED_MIN_SHARE * loaded:
        return LoraStep(slots=index, row_slots=row_slots)
    groups = [(s, (index == s).nonzero().flatten()) for s in present]
    return LoraStep(groups, row_slots=row_slots)

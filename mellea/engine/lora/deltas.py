"""Adding each row's adapter's delta to a projection's output: the forward hooks.

Whatever format the base linear stores its weights in (fp32, bf16, int8, int4), a hook
sees only the projection's input and output, and adds the deltas of the step being
run (:class:`~mellea.engine.lora.step.LoraStep`). Which hook a projection gets is
chosen once, when the hooks are put in (:func:`delta_hook`):

- on a GPU, :class:`GatheredDeltas`: one kernel reads each row's slot from a device
  tensor (:func:`~mellea.engine.kernels.lora.lora_gathered`);
- on the C++ CPU kernels, for int8 and int4 weights (GGUF blocks included),
  :class:`PackedDeltas`: all the step's rows in one C++ op (``lora_add``) from every
  adapter's pairs packed in fp16 (:func:`~mellea.engine.lora.packing.pack_fused`);
- elsewhere (fp32 or bf16 weights, whose outputs the fp16 pairs' rounding would show
  beside their own; no C++ kernels), :class:`Fp32Deltas`: in fp32, on the stacked
  pairs where a step mixes adapters, else per adapter.

The first two fall back to the third for the steps their form does not cover (a GPU's
long prompt chunks; a step without packs).
"""

from __future__ import annotations

from typing import Any, Protocol

import torch

from mellea.engine import cpu_kernels
from mellea.engine.formats.linear import Int4Linear, Int8Linear, StackedLinear
from mellea.engine.kernels.lora import lora_gathered
from mellea.engine.lora.dense import DenseStack
from mellea.engine.lora.low_rank import LowRank, add_parts
from mellea.engine.lora.peft import LoraAdapter
from mellea.engine.lora.step import LoraStep

# Our fused projections, per layer, in the order the fused decode layer reads their packs.
PROJECTIONS = ("self_attn.qkv_proj", "self_attn.o_proj", "mlp.gate_up_proj", "mlp.down_proj")


class DeltaSource(Protocol):
    """What a hook reads of the adapters loaded into its model (an ``AdapterSet``)."""

    current: LoraStep | None  # the step being run (None: no adapter rows)
    adapters: list[LoraAdapter]  # by slot
    fused: list[list[torch.Tensor]] | None  # per layer, its projections' fp16 packs
    dense: dict[tuple[int, str], DenseStack]  # on a GPU, the dense stacks

    def stack(self, key: tuple[int, str]) -> LowRank | None:
        """Every adapter's updates of projection ``key`` side by side."""
        ...


def takes_packs(module: Any) -> bool:
    """Whether a projection's hook adds the deltas from the fp16 packs (int8 and int4
    weights, GGUF blocks included, and a Q4_K_M q/k/v stacked from both). fp32 and bf16
    weights keep the fp32 pairs: beside their own rounding the fp16 pairs' would show
    (bf16's logprobs moved by up to 0.24 against 0.10 with fp32 pairs on the tests'
    tiny models)."""
    return isinstance(module, Int4Linear | Int8Linear | StackedLinear)


class Fp32Deltas:
    """The hook that adds the deltas in fp32: through the stacks where the step mixes
    adapters, else per adapter group."""

    def __init__(self, source: DeltaSource, key: tuple[int, str]) -> None:
        self.source = source
        self.key = key

    def __call__(self, _module: Any, inputs: tuple[torch.Tensor, ...], out: torch.Tensor) -> Any:
        step = self.source.current
        if step is None:
            return None
        return self.fp32(out, inputs[0], step)

    def fp32(self, out: torch.Tensor, x: torch.Tensor, step: LoraStep) -> torch.Tensor:
        """``out`` plus the step's deltas, from the fp32 pairs."""
        if step.slots is not None:
            return apply_stacked(out, x, step, self.source.stack(self.key))
        return apply_deltas(out, x, step, self.source.adapters, self.key)


class PackedDeltas(Fp32Deltas):
    """The hook of an int8/int4 projection on the C++ CPU kernels: ``lora_add`` from
    the fp16 packs, once they are built."""

    def __init__(self, source: DeltaSource, key: tuple[int, str]) -> None:
        super().__init__(source, key)
        self.first = 3 * PROJECTIONS.index(key[1])  # this projection's pack in the layer's 12

    def __call__(self, _module: Any, inputs: tuple[torch.Tensor, ...], out: torch.Tensor) -> Any:
        step = self.source.current
        if step is None:
            return None
        packs = self.source.fused
        if (
            packs is not None
            and step.row_slots is not None
            and out.dtype == torch.float32
            and out.dim() == 2
        ):
            pack = packs[self.key[0]][self.first : self.first + 3]
            return apply_packed(out, inputs[0], step.row_slots, pack)
        return self.fp32(out, inputs[0], step)


class GatheredDeltas(Fp32Deltas):
    """The hook of a projection on a GPU: the gathered kernel on the dense stacks for
    steps planned for it (see ``GATHERED_MAX_ROWS``), fp32 pairs for the rest."""

    def __call__(self, _module: Any, inputs: tuple[torch.Tensor, ...], out: torch.Tensor) -> Any:
        step = self.source.current
        if step is None:
            return None
        if step.gathered is None:
            return self.fp32(out, inputs[0], step)
        dense = self.source.dense.get(self.key)
        if dense is not None:
            lora_gathered(out.view(-1, out.shape[-1]), inputs[0], dense.a, dense.b, step.gathered)
        return out


def delta_hook(
    source: DeltaSource, key: tuple[int, str], module: Any, device: torch.device
) -> Fp32Deltas:
    """The hook for projection ``module`` at ``key`` of a model whose adapters are on
    ``device``."""
    if device.type == "cuda":
        return GatheredDeltas(source, key)
    if takes_packs(module):
        return PackedDeltas(source, key)
    return Fp32Deltas(source, key)


def apply_packed(
    out: torch.Tensor, x: torch.Tensor, row_slots: torch.Tensor, pack: list[torch.Tensor]
) -> torch.Tensor:
    """``out`` [T, N] fp32 plus each row's adapter's delta (``row_slots`` [T] int32, -1:
    none) from one projection's fp16 pack (``pack_fused``), in one C++ op."""
    if not out.is_contiguous():
        out = out.contiguous()
    cpu_kernels.lora_add(out, x.reshape(out.shape[0], -1).float(), *pack, row_slots)
    return out


def apply_stacked(
    out: torch.Tensor, x: torch.Tensor, step: LoraStep, stack: LowRank | None
) -> torch.Tensor:
    """``out`` plus each row's own adapter's delta, through the stacked updates: the
    columns of other adapters (all of them for a base row) are masked to zero."""
    if stack is None:
        return out
    mask = step.masks.get(stack.layout)
    if mask is None:
        assert step.slots is not None
        mask = (step.slots[:, None] == stack.owner[None, :]).float()
        step.masks[stack.layout] = mask
    add_parts(out, (x.float() @ stack.a.T).mul_(mask), stack, None)
    return out


def apply_deltas(
    out: torch.Tensor,
    x: torch.Tensor,
    step: LoraStep,
    adapters: list[LoraAdapter],
    key: tuple[int, str],
) -> torch.Tensor:
    """``out`` plus each adapter's low-rank delta on its rows, computed in fp32."""
    for slot, rows in step.groups:
        update = adapters[slot].updates.get(key)
        if update is None:
            continue
        xs = x if rows is None else x.index_select(0, rows)
        add_parts(out, xs.float() @ update.a.T, update, rows)
    return out

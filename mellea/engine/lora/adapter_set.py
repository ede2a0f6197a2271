"""The adapters loaded into one model: by name and slot, each request's use of one, and
the forms the steps read (the stacks, the fp16 packs, the GPU's dense stacks).

An aLoRA applies from the start of the last occurrence of its invocation tokens in the
prompt on; before it, and when they do not occur, the tokens are the base model's, so
their KV blocks are too. The KV blocks an adapter computed carry its key
(:class:`AdapterUse`), so prefix caching never shares them with another adapter's.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence as Seq
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from mellea.engine import cpu_kernels
from mellea.engine.lora.deltas import PROJECTIONS, delta_hook, takes_packs
from mellea.engine.lora.dense import DenseStack, dense_stacks
from mellea.engine.lora.low_rank import LowRank, stack_updates
from mellea.engine.lora.packing import pack_fused
from mellea.engine.lora.peft import (
    AdapterInfo,
    AdapterLoadError,
    LoraAdapter,
    activation_start,
)
from mellea.engine.lora.step import LoraStep, plan_step

if TYPE_CHECKING:
    from mellea.engine.model import DecoderModel


@dataclass(frozen=True)
class AdapterUse:
    """How one sequence uses an adapter: its slot, the first position it applies to
    (0 for a LoRA; an aLoRA's activation point) and the key its KV blocks carry."""

    slot: int
    start: int
    key: bytes


def reads_packs(model: DecoderModel) -> bool:
    """Whether ``model`` reads the fp16 packs: it runs on the C++ CPU kernels, with int8
    or int4 projections (the fused decode layer's, the hooks' ``lora_add``)."""
    return (
        model.path.cpp
        and cpu_kernels.available()
        and any(takes_packs(layer.get_submodule(p)) for layer in model.layers for p in PROJECTIONS)
    )


class AdapterSet:
    """The adapters loaded into one model, by name and slot, and the step being run.

    Slots only grow, so a step planned before a load stays valid. The hooks on the
    model's projections are put in by the engine thread (:meth:`install`) before the
    first step that uses an adapter, never while a forward pass runs; so are the
    stacks, rebuilt there after a load.
    """

    def __init__(self) -> None:
        self.by_name: dict[str, int] = {}
        self.adapters: list[LoraAdapter] = []
        self.current: LoraStep | None = None  # set for the forward pass of a step
        self._hooked = False
        self._stacks: dict[tuple[int, str], LowRank] = {}
        self._stacked = 0  # how many adapters the stacks hold
        # Per layer, the fp16 packs of its four projections flattened (12 tensors), for
        # a model on the C++ CPU kernels (None otherwise): what the fused decode layer
        # and the hooks' lora_add read; rebuilt with the stacks.
        self.fused: list[list[torch.Tensor]] | None = None
        # On a GPU, per (layer, projection) every adapter's pair as dense stacks.
        self.dense: dict[tuple[int, str], DenseStack] = {}
        self.generation = 0  # counts rebuilds of the stacks (a CUDA graph holds them)

    def add(self, adapter: LoraAdapter) -> int:
        """Register a loaded adapter; its slot. ``AdapterLoadError`` for a taken name."""
        if adapter.name in self.by_name:
            raise AdapterLoadError(f"an adapter named {adapter.name!r} is already loaded")
        self.adapters.append(adapter)
        self.by_name[adapter.name] = len(self.adapters) - 1
        return self.by_name[adapter.name]

    def info(self) -> dict[str, AdapterInfo]:
        """Name -> :class:`AdapterInfo` of each loaded adapter."""
        return {a.name: a.info for a in self.adapters}

    def use(self, name: str, prompt: Seq[int]) -> AdapterUse | None:
        """How a request for adapter ``name`` on ``prompt`` uses it; None when it runs as
        the base model throughout (an aLoRA whose invocation is not in the prompt).
        ``KeyError`` for an unknown name."""
        slot = self.by_name[name]
        adapter = self.adapters[slot]
        start = 0
        if adapter.is_alora:
            found = activation_start(prompt, adapter.info.invocation_tokens)
            if found is None:
                return None
            start = found
        key = hashlib.blake2b(name.encode(), digest_size=16, person=b"adapter").digest()
        return AdapterUse(slot, start, key)

    def plan(self, slots: list[int], device: torch.device | None = None) -> LoraStep | None:
        """The step's plan from each token's slot (-1: base); None if all are base."""
        return plan_step(slots, len(self.adapters), device)

    def stack(self, key: tuple[int, str]) -> LowRank | None:
        """Every adapter's updates of projection ``key`` side by side (None: no adapter
        updates it)."""
        return self._stacks.get(key)

    def install(self, model: DecoderModel) -> None:
        """Put the delta hooks on every layer's projections (once, when adapters are
        loaded: a hook's kind follows their device), and stack (and, for a model on the
        C++ kernels with int8/int4 projections, pack) the adapters loaded since the
        last call."""
        if self._stacked != len(self.adapters):
            self._stacks = stack_updates(self.adapters)
            self.fused = None
            if reads_packs(model):
                self.fused = [
                    [t for proj in PROJECTIONS for t in pack_fused(self.adapters, (i, proj))]
                    for i in range(len(model.layers))
                ]
            if self.adapters and self.adapters[0].device.type == "cuda":
                self.dense = dense_stacks(self.adapters)
            self._stacked = len(self.adapters)
            self.generation += 1
        if self._hooked or not self.adapters:
            return
        device = self.adapters[0].device
        for i, layer in enumerate(model.layers):
            for proj in PROJECTIONS:
                module = layer.get_submodule(proj)
                module.register_forward_hook(delta_hook(self, (i, proj), module, device))
        self._hooked = True

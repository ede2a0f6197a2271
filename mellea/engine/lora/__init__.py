"""LoRA and activated LoRA (aLoRA) adapters, batched per token beside the base linears.

By job:

- :mod:`~mellea.engine.lora.peft`: reading a PEFT directory into the model's fused
  projections, and validating it (:func:`load_peft_adapter`, :class:`AdapterLoadError`);
- :mod:`~mellea.engine.lora.low_rank`: one projection's low-rank update, one adapter's
  or every adapter's stacked;
- :mod:`~mellea.engine.lora.step`: a step's adapter rows and the form its deltas come
  from, planned once per step (:class:`LoraStep`);
- :mod:`~mellea.engine.lora.adapter_set`: the adapters loaded into one model, each
  request's use of one (its slot, activation point and KV key), and the forms the
  steps read, rebuilt after a load (:class:`AdapterSet`);
- :mod:`~mellea.engine.lora.packing`: the pairs in fp16 for the C++ ``lora_add``
  (prompt steps' hooks and the fused decode layer, :attr:`ComputePath.CPP_FUSED`);
- :mod:`~mellea.engine.lora.dense`: the pairs as dense stacks for the GPU's gathered
  kernel;
- :mod:`~mellea.engine.lora.deltas`: the forward hooks that add the deltas beside the
  projections, one kind per projection chosen when they are put in.
"""

from mellea.engine.lora.adapter_set import AdapterSet, AdapterUse
from mellea.engine.lora.deltas import PROJECTIONS
from mellea.engine.lora.low_rank import LowRank, low_rank
from mellea.engine.lora.packing import LORA_BLOCK, pack_fused
from mellea.engine.lora.peft import (
    AdapterInfo,
    AdapterLoadError,
    LoraAdapter,
    activation_start,
    load_peft_adapter,
)
from mellea.engine.lora.step import GATHERED_MAX_ROWS, STACKED_MIN_SHARE, LoraStep

__all__ = [
    "GATHERED_MAX_ROWS",
    "LORA_BLOCK",
    "PROJECTIONS",
    "STACKED_MIN_SHARE",
    "AdapterInfo",
    "AdapterLoadError",
    "AdapterSet",
    "AdapterUse",
    "LoraAdapter",
    "LoraStep",
    "LowRank",
    "activation_start",
    "load_peft_adapter",
    "low_rank",
    "pack_fused",
]

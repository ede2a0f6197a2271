"""Choose between a Triton kernel and its PyTorch reference.

Triton runs on CUDA tensors unless ``MELLEA_DISABLE_TRITON=1`` (the switches:
:mod:`mellea.engine.switches`). The kernel tests run the Triton code on CPU tensors in
Triton's interpreter by calling the ``*_triton`` functions, or by replacing
:func:`triton_on` where they test the dispatch itself.
"""

from __future__ import annotations

import functools
import importlib.util

import torch

from mellea.engine.switches import EngineSwitches, read_switches


@functools.cache
def triton_available() -> bool:
    """Whether the ``triton`` package can be imported here."""
    return importlib.util.find_spec("triton") is not None


def triton_on(device: torch.device, switches: EngineSwitches | None = None) -> bool:
    """Whether ops on tensors of ``device`` take their Triton path (under ``switches``,
    by default as the environment sets them now)."""
    if not triton_available():
        return False
    switches = switches or read_switches()
    if switches.disable_triton:
        return False
    return device.type == "cuda"


def use_triton(tensor: torch.Tensor) -> bool:
    """Whether an op on ``tensor`` should take its Triton path."""
    return triton_on(tensor.device)

"""Choose between a Triton kernel and its PyTorch reference.

Triton runs on CUDA tensors. ``MELLEA_FORCE_TRITON=1`` forces the Triton path on
any device, which together with ``TRITON_INTERPRET=1`` lets CPU tests run the
kernels in Triton's interpreter.
"""

from __future__ import annotations

import functools
import importlib.util
import os

import torch


@functools.cache
def triton_available() -> bool:
    """Whether the ``triton`` package can be imported here."""
    return importlib.util.find_spec("triton") is not None


def use_triton(tensor: torch.Tensor) -> bool:
    """Whether an op on ``tensor`` should take its Triton path."""
    if os.environ.get("MELLEA_DISABLE_TRITON") == "1" or not triton_available():
        return False
    return tensor.is_cuda or os.environ.get("MELLEA_FORCE_TRITON") == "1"

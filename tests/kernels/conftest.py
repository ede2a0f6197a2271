"""Run the engine's Triton kernels on CPU tensors in Triton's interpreter.

``TRITON_INTERPRET`` is read when ``@triton.jit`` decorates a kernel, so it is set here,
before any test imports a ``*_triton`` module (tests import them lazily, inside the
test). The dispatch takes the Triton path on CUDA tensors only; here its decision
(:func:`mellea.engine.kernels._dispatch.triton_on`) is replaced per test so the
dispatching ops (and a model built on the kernels' path) run the Triton code on CPU
tensors too, without sending other test directories' CPU runs through the interpreter.
"""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"

import pytest
import torch

from mellea.engine.kernels import _dispatch
from mellea.engine.switches import EngineSwitches

pytest.importorskip("triton")

CUDA_DECISION = _dispatch.triton_on


def triton_on_any_device(device: torch.device, switches: EngineSwitches | None = None) -> bool:
    """The dispatch's decision for a CUDA tensor, whatever the device."""
    return CUDA_DECISION(torch.device("cuda"), switches)


@pytest.fixture(autouse=True)
def _triton_on_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(_dispatch, "triton_on", triton_on_any_device)
    monkeypatch.delenv("MELLEA_DISABLE_TRITON", raising=False)
    torch.manual_seed(0)

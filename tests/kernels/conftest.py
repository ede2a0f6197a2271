"""Run the engine's Triton kernels on CPU tensors in Triton's interpreter.

``TRITON_INTERPRET`` is read when ``@triton.jit`` decorates a kernel, so it is set here,
before any test imports a ``*_triton`` module (tests import them lazily, inside the
test). ``MELLEA_FORCE_TRITON`` is only read when an op is dispatched; it is set per
test so it does not send other test directories' CPU runs through the interpreter.
"""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"

import pytest
import torch

pytest.importorskip("triton")


@pytest.fixture(autouse=True)
def _force_triton(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setenv("MELLEA_FORCE_TRITON", "1")
    monkeypatch.delenv("MELLEA_DISABLE_TRITON", raising=False)
    torch.manual_seed(0)

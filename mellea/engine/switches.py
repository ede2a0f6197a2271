"""The environment switches that choose how the engine computes, read in one place.

Each is read when :func:`read_switches` is called, never at import, so a test may
set one with ``monkeypatch.setenv`` before it builds a model or dispatches an op.

=============================  ======================================================
``MELLEA_CPU_KERNEL=0``        on CPU, do not build or use the fast path's C++ ops
``MELLEA_ENGINE_REFERENCE=1``  on CPU, run the kernels' path (their PyTorch references)
``MELLEA_DISABLE_TRITON=1``    never use Triton kernels, even on CUDA
``MELLEA_FORCE_TRITON=1``      take the Triton path on CPU tensors too (kernel tests)
``ONEDNN_MAX_CPU_ISA=AVX2``    oneDNN's own limit, read for what it means here: below
                               AVX-512, torch's bf16 GEMM is emulated (the AVX2 path)
=============================  ======================================================
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class EngineSwitches:
    """What the environment asks of the engine's compute path."""

    cpu_kernel: bool = True  # the CPU fast path may use its C++ ops
    reference: bool = False  # the CPU runs the kernels' path instead of its fast path
    disable_triton: bool = False  # Triton never runs
    force_triton: bool = False  # Triton runs on any device (with TRITON_INTERPRET=1 on CPU)
    onednn_max_isa: str = ""  # oneDNN's ISA limit, upper case ("" when unset)


def read_switches() -> EngineSwitches:
    """The switches as the environment sets them now."""
    env = os.environ
    return EngineSwitches(
        cpu_kernel=env.get("MELLEA_CPU_KERNEL") != "0",
        reference=env.get("MELLEA_ENGINE_REFERENCE") == "1",
        disable_triton=env.get("MELLEA_DISABLE_TRITON") == "1",
        force_triton=env.get("MELLEA_FORCE_TRITON") == "1",
        onednn_max_isa=env.get("ONEDNN_MAX_CPU_ISA", "").upper(),
    )

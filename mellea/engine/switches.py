"""The environment variables the engine reads, read in one place.

Each is read when :func:`read_switches` is called, never at import, so a test may
set one with ``monkeypatch.setenv`` before it builds a model or dispatches an op.

=============================  ======================================================
``MELLEA_CPU_KERNEL=0``        on CPU, do not build or use the fast path's C++ ops
``MELLEA_ENGINE_REFERENCE=1``  on CPU, run the kernels' path (their PyTorch references)
``MELLEA_DISABLE_TRITON=1``    never use Triton kernels, even on CUDA
``ONEDNN_MAX_CPU_ISA=AVX2``    oneDNN's own limit, read for what it means here: below
                               AVX-512, torch's bf16 GEMM is emulated (the AVX2 path)
``MELLEA_CPU_THREADS=N``       on CPU, run every step on N threads (no tuning)
``MELLEA_CUDA_GRAPHS=0``       on CUDA, run decode steps eagerly (no CUDA graphs)
``MELLEA_CACHE_DIR=DIR``       where converted models live (``~/.cache/mellea``)
=============================  ======================================================
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

THREADS_ENV = "MELLEA_CPU_THREADS"


@dataclass(frozen=True, slots=True)
class EngineSwitches:
    """What the environment asks of the engine's compute path."""

    cpu_kernel: bool = True  # the CPU fast path may use its C++ ops
    reference: bool = False  # the CPU runs the kernels' path instead of its fast path
    disable_triton: bool = False  # Triton never runs
    onednn_max_isa: str = ""  # oneDNN's ISA limit, upper case ("" when unset)
    cpu_threads: int | None = None  # a thread count pinned for every step (None: tuned)
    cuda_graphs: bool = True  # decode may run as captured CUDA graphs
    cache_dir: Path | None = None  # where converted models live (None: the default)


def read_switches() -> EngineSwitches:
    """The switches as the environment sets them now."""
    env = os.environ
    return EngineSwitches(
        cpu_kernel=env.get("MELLEA_CPU_KERNEL") != "0",
        reference=env.get("MELLEA_ENGINE_REFERENCE") == "1",
        disable_triton=env.get("MELLEA_DISABLE_TRITON") == "1",
        onednn_max_isa=env.get("ONEDNN_MAX_CPU_ISA", "").upper(),
        cpu_threads=_positive(env.get(THREADS_ENV, "")),
        cuda_graphs=env.get("MELLEA_CUDA_GRAPHS", "1") != "0",
        cache_dir=Path(env["MELLEA_CACHE_DIR"]) if env.get("MELLEA_CACHE_DIR") else None,
    )


def _positive(text: str) -> int | None:
    """``text`` as a count above zero, else None."""
    text = text.strip()
    return int(text) if text.isdigit() and int(text) > 0 else None

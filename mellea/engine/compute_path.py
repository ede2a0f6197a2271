"""Which implementation the model's forward pass runs, chosen once when it is built.

Two families of paths compute the same maths:

- the kernels of :mod:`mellea.engine.kernels`, in Triton (:attr:`ComputePath.TRITON`,
  what a GPU runs) or as their PyTorch references (:attr:`ComputePath.REFERENCE`);
- the CPU fast path, which does each step in as few ops as it can since per-op
  overhead is a good part of a small model's step there, and keeps q/k head dims in
  interleaved rotary order so RoPE is one complex multiply: in PyTorch ops
  (:attr:`ComputePath.TORCH`) or with the C++ ops of :mod:`mellea.engine.cpu_kernels`
  (:attr:`ComputePath.CPP`), where decode-only steps of a Llama-shaped int4 model may
  run each layer as one C++ op (:attr:`ComputePath.CPP_FUSED`).

The weights' layout differs between the two families, so a model cannot move from one
to the other once loaded.
"""

from __future__ import annotations

import enum

import torch

from mellea.engine.switches import EngineSwitches


class ComputePath(enum.Enum):
    """One implementation of the forward pass (see the module's docstring)."""

    TRITON = "triton"
    REFERENCE = "reference"
    TORCH = "torch"
    CPP = "cpp"
    CPP_FUSED = "cpp-fused"

    @property
    def kernels(self) -> bool:
        """Whether this path runs the ops of :mod:`mellea.engine.kernels`."""
        return self in (ComputePath.TRITON, ComputePath.REFERENCE)

    @property
    def cpp(self) -> bool:
        """Whether this path runs the C++ ops of :mod:`mellea.engine.cpu_kernels`."""
        return self in (ComputePath.CPP, ComputePath.CPP_FUSED)

    @property
    def layer_path(self) -> ComputePath:
        """The path each decoder layer runs (a fused model's layers run :attr:`CPP`
        in the steps the fused op does not take)."""
        return ComputePath.CPP if self is ComputePath.CPP_FUSED else self


def choose_compute_path(
    device: torch.device, dtype: torch.dtype, switches: EngineSwitches
) -> ComputePath:
    """The path a model of ``dtype`` on ``device`` runs.

    The CPU fast path for fp32 on the CPU (with its C++ ops where they load), unless
    ``switches.reference``; the kernels' path elsewhere. :attr:`ComputePath.CPP_FUSED`
    is never chosen here: it depends on the loaded weights (see
    :meth:`~mellea.engine.model.DecoderModel.plan_fused_decode`).
    """
    if device.type == "cpu" and dtype == torch.float32 and not switches.reference:
        from mellea.engine import cpu_kernels

        return (
            ComputePath.CPP
            if switches.cpu_kernel and cpu_kernels.available()
            else ComputePath.TORCH
        )
    from mellea.engine.kernels._dispatch import triton_on

    return ComputePath.TRITON if triton_on(device, switches) else ComputePath.REFERENCE

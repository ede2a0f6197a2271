"""Each row's own LoRA delta, its adapter picked by a slot per row: ``out[t] +=
(x[t] @ A[s]^T) @ B[s]^T`` with ``s = slots[t]`` (rows with slot -1 are left alone).

``a`` [S, C, K] and ``b`` [S, N, C] hold every adapter's pair of one projection side
by side (:mod:`mellea.engine.lora.dense` builds them), so one call serves a batch that
mixes adapters, and its shapes do not depend on which rows use which adapter: a CUDA
graph captured once replays it for any mix.
"""

from __future__ import annotations

import torch

from mellea.engine.kernels._dispatch import use_triton


def lora_gathered_ref(
    out: torch.Tensor, x: torch.Tensor, a: torch.Tensor, b: torch.Tensor, slots: torch.Tensor
) -> torch.Tensor:
    """PyTorch reference: ``out`` [T, >=N] gains each row's delta in place (fp32 sums,
    rounded once to ``out``'s dtype); returns ``out``."""
    active = slots >= 0
    picked = slots.clamp(min=0).long()
    h = torch.bmm(a[picked], x.float().unsqueeze(-1))  # [T, C, 1]
    delta = torch.bmm(b[picked], h).squeeze(-1)  # [T, N]
    delta = delta * active[:, None]
    n = b.shape[1]
    out[:, :n] = (out[:, :n].float() + delta).to(out.dtype)
    return out


def lora_gathered(
    out: torch.Tensor, x: torch.Tensor, a: torch.Tensor, b: torch.Tensor, slots: torch.Tensor
) -> torch.Tensor:
    """Add each row's adapter delta to ``out`` in place; Triton on CUDA, reference elsewhere."""
    if use_triton(out):
        from mellea.engine.kernels.lora_triton import lora_gathered_triton

        return lora_gathered_triton(out, x, a, b, slots)
    return lora_gathered_ref(out, x, a, b, slots)

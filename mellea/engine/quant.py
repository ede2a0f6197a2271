"""Weight formats on CPU: fp32, bf16 or int8 weights under an fp32 forward pass.

The CPU forward pass always computes in fp32 (residual stream, norms, attention, KV
cache, logits); a format only changes how the big matrices are stored and multiplied:

* ``float32``: as loaded; the exact path.
* ``bfloat16``: linear-layer and LM-head weights in bf16; a linear rounds its input
  to bf16 and returns fp32 (oneDNN accumulates in fp32, on AMX where present).
* ``int8``: per-output-channel symmetric int8 weights (``Int8Linear``) for the same.

In both, the embedding stays fp32 and the LM head's best logits are recomputed from
its fp32 rows (:class:`RefinedHead`).

``auto`` picks the fastest format that passed our quality bar on this hardware (see
:func:`resolve_format`). On CUDA a format is the whole model's dtype, as before.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

FORMATS = ("auto", "float32", "bfloat16", "int8")
# Other spellings the engine has accepted for its ``dtype`` argument.
_ALIASES = {
    "fp32": "float32",
    "float": "float32",
    "bf16": "bfloat16",
    "fp16": "float16",
    "half": "float16",
    "float16": "float16",
}
# What ``auto`` picks on a CPU with native bf16: int8 was the fastest format that
# passed the quality bar at 1 and 8 streams (benchmarks/bench_dtypes.py).
AUTO_CPU_NATIVE_BF16 = "int8"
_TORCH = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def cpu_has_native_bf16() -> bool:
    """Whether this CPU multiplies bf16 natively (AVX512-BF16 or AMX)."""
    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(getattr(torch.cpu, name, lambda: False)() for name in checks)


def resolve_format(dtype: str | torch.dtype | None, device: torch.device) -> str:
    """The weight format a ``dtype`` setting means on ``device``.

    ``None`` is ``float32`` on CPU (the exact path, the library's default) and
    ``bfloat16`` on a GPU. ``"auto"`` is :data:`AUTO_CPU_NATIVE_BF16` on a CPU with
    native bf16, ``float32`` on other CPUs and ``bfloat16`` on a GPU. ``ValueError`` for an unknown
    name, or a format the device cannot run (int8 is CPU-only).
    """
    if isinstance(dtype, torch.dtype):
        names = {v: k for k, v in _TORCH.items()}
        if dtype not in names:
            raise ValueError(f"unsupported dtype {dtype}")
        fmt = names[dtype]
    elif dtype is None:
        fmt = "bfloat16" if device.type == "cuda" else "float32"
    else:
        fmt = _ALIASES.get(dtype, dtype)
        if fmt not in (*FORMATS, "float16"):
            raise ValueError(f"unknown dtype {dtype!r}; use one of {', '.join(FORMATS)}")
    if fmt == "auto":
        if device.type != "cpu":
            return "bfloat16"
        return AUTO_CPU_NATIVE_BF16 if cpu_has_native_bf16() else "float32"
    if fmt == "int8" and device.type != "cpu":
        raise ValueError("dtype 'int8' runs on CPU only")
    return fmt


def compute_dtype(fmt: str, device: torch.device) -> torch.dtype:
    """The dtype the forward pass and KV cache use for a resolved format."""
    if fmt == "int8" or (device.type == "cpu" and fmt == "bfloat16"):
        return torch.float32  # weights converted after load (convert_weights)
    return _TORCH[fmt]


def quantize_rows(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric int8 per row (output channel): ``weight ~= q * scale[:, None]``."""
    w = weight.detach().float()
    scale = (w.abs().amax(dim=1) / 127.0).clamp(min=1e-12)
    q = torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8)
    return q.contiguous(), scale


class Bf16Linear(nn.Module):
    """A linear layer with bf16 weights: fp32 in, fp32 out, bf16 multiply."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
        super().__init__()
        self.weight = nn.Parameter(weight.detach().to(torch.bfloat16), requires_grad=False)
        self.bias = None if bias is None else nn.Parameter(bias.detach().float(), False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` [..., in] (any float dtype) -> [..., out] in ``x``'s dtype."""
        out = F.linear(x.to(torch.bfloat16), self.weight).to(x.dtype)
        return out if self.bias is None else out + self.bias


# Up to this many rows, int8pack_mm is faster than widening the weights to bf16 for
# the bf16 GEMM (its cost grows with the rows, the widening's does not): measured on
# an AVX512-BF16/AMX CPU, 1536x576 weights: 8 rows 184 us vs 260, 16 rows 357 vs 280.
INT8PACK_MAX_ROWS = 12


class Int8Linear(nn.Module):
    """A linear layer with per-output-channel symmetric int8 weights (weight-only).

    Multiplies with ``aten._weight_int8pack_mm`` (activations rounded to bf16, the
    int8 weights widened in registers, each output channel scaled) for up to
    :data:`INT8PACK_MAX_ROWS` rows (decode steps); longer inputs (prompt chunks) widen
    the weights to bf16 for the bf16 GEMM. Returns the input's dtype. Activations are never quantized: fbgemm's int8 GEMM, which
    quantizes them per call, was 5x faster here but lost 130 % of the mean logprob
    on the default model (outlier channels), see docs/engine.md.
    """

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
        super().__init__()
        q, scale = quantize_rows(weight)
        self.out_features, self.in_features = q.shape
        self.register_buffer("qweight", q)
        self.register_buffer("scale", scale)  # fp32
        self.register_buffer("scale_bf16", scale.to(torch.bfloat16))  # what the kernel takes
        self.bias = None if bias is None else nn.Parameter(bias.detach().float(), False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` [..., in] -> [..., out] in ``x``'s dtype."""
        flat = x.reshape(-1, self.in_features).to(torch.bfloat16)
        if flat.shape[0] <= INT8PACK_MAX_ROWS:
            out = torch.ops.aten._weight_int8pack_mm(flat, self.qweight, self.scale_bf16)
        else:  # prompt chunks: widen to bf16 (exact for int8) and use the bf16 GEMM
            out = F.linear(flat, self.qweight.to(torch.bfloat16)).float() * self.scale
        out = out.to(x.dtype).view(*x.shape[:-1], self.out_features)
        return out if self.bias is None else out + self.bias

    def dequantized(self) -> torch.Tensor:
        """The fp32 weight this layer stands for."""
        return self.qweight.float() * self.scale[:, None]


# How many of the best logits the LM head recomputes in fp32 (see RefinedHead).
HEAD_REFINE = 32


class RefinedHead(nn.Module):
    """An LM head whose candidates come from bf16 or int8 weights and whose best logits
    are exact fp32.

    The fast kernel scores the whole vocabulary (reading a half or a quarter of fp32's
    bytes); the :data:`HEAD_REFINE` best of each row are then recomputed from the fp32
    hidden state and ``exact``, the fp32 weight rows (a few dozen rows: cheap). The
    kernels return bf16, which rounds a logit near 20 to steps of 1/8 and makes ties
    that fp32 tells apart; refining from the fp32 rows also takes the weights' own
    rounding out of the greedy choice and the top logprobs.
    """

    def __init__(self, inner: Bf16Linear | Int8Linear, exact: torch.Tensor) -> None:
        super().__init__()
        self.inner = inner
        self.register_buffer("exact", exact.detach().float())

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """[N, hidden] -> fp32 logits [N, vocab]."""
        logits = self.inner(hidden).float()
        top = logits.topk(min(HEAD_REFINE, logits.shape[-1]), dim=-1).indices
        exact = torch.bmm(self.exact[top], hidden.float().unsqueeze(-1)).squeeze(-1)
        if self.inner.bias is not None:
            exact = exact + self.inner.bias[top]
        return logits.scatter_(-1, top, exact)


def _linear(weight: torch.Tensor, bias: torch.Tensor | None, fmt: str) -> Bf16Linear | Int8Linear:
    """A ``fmt`` layer over an fp32 weight (and bias)."""
    if fmt == "bfloat16":
        return Bf16Linear(weight, bias)
    return Int8Linear(weight, bias)


@torch.no_grad()
def convert_weights(model: nn.Module, fmt: str) -> nn.Module:
    """Store ``model``'s (a CPU fp32 :class:`~mellea.engine.model.DecoderModel`) linear
    layers in ``fmt``, in place, and give it a :class:`RefinedHead`.

    The embedding stays fp32: a lookup reads one row per token, so its format costs
    nothing in speed, while rounded input embeddings move every later layer. The LM
    head (the embedding table, when tied) scores in ``fmt`` and refines from its fp32
    rows. ``float32`` (and ``float16``) change nothing.
    """
    if fmt not in ("bfloat16", "int8"):
        return model  # loaded in this dtype already
    head = getattr(model, "lm_head", None)
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.Linear) and child is not head:
                setattr(parent, name, _linear(child.weight, child.bias, fmt))
    embed = getattr(model, "embed_tokens", None)
    if isinstance(head, nn.Linear):
        model.lm_head = RefinedHead(_linear(head.weight, head.bias, fmt), head.weight)
    elif head is None and isinstance(embed, nn.Embedding):  # tied: the head reads the table
        model.lm_head = RefinedHead(_linear(embed.weight, None, fmt), embed.weight)
    return model

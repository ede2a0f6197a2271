"""The linear layers of the compact formats, fp32 in and out: bf16 weights
(:class:`Bf16Linear`), int8 per output row or a GGUF's blocks in the byte form
(:class:`Int8Linear`), int4 groups or a GGUF's Q4_K groups (:class:`Int4Linear`), and
layers of different formats stacked by output rows (:class:`StackedLinear`).
:func:`linear_layer` builds the one a format names over an fp32 weight."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from mellea.engine import cpu_kernels
from mellea.engine.formats.cpu_support import (
    INT4_KERNEL_MAX_ROWS,
    INT8_KERNEL_MAX_ROWS,
    INT8PACK_MAX_ROWS,
    int8_vnni_max_rows,
    six_form_runs,
)
from mellea.engine.formats.quantize import (
    GROUP,
    dequantize_groups,
    dequantize_q4k,
    quantize_groups,
    quantize_rows,
)
from mellea.engine.formats.tiles import TILE, tile_bytes, tile_groups, tile_q4k, tile_rows


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


def _decode_rows(x: torch.Tensor, most: int) -> bool:
    """Whether ``x`` goes to a kernel as it is: fp32 [rows, in], at most ``most`` rows
    (a decode step's input; skipping the reshapes and casts saves a few microseconds
    per layer, which add up over a small model's step)."""
    return x.dim() == 2 and x.dtype == torch.float32 and x.shape[0] <= most


class Int8Linear(nn.Module):
    """A linear layer with per-output-channel symmetric int8 weights.

    With the C++ kernels (any family: the layout is the same on AVX-512, AVX2 and
    generic builds) and an input size that groups of 32 divide, up to
    :func:`int8_vnni_max_rows` rows go to :func:`cpu_kernels.int8_vnni_linear` (weights
    in :func:`tile_rows`' layout; activations in two int8 parts per group of 32, about
    16 bits, for the integer dot product). Other input sizes take up to
    :data:`INT8_KERNEL_MAX_ROWS` rows to :func:`cpu_kernels.int8_linear` (fp32
    activations, the weights widened in registers); without the C++ kernels, to
    ``aten._weight_int8pack_mm``
    (activations rounded to bf16) for up to :data:`INT8PACK_MAX_ROWS`. Longer inputs
    (prompt chunks) widen the weights to bf16 for the bf16 GEMM. Built from a GGUF's
    ``blocks`` (``exact``), it holds the file's values in the byte form instead
    (:func:`tile_bytes`) and takes every input to :func:`cpu_kernels.bytes_linear`.
    Returns the input's dtype. Activations are never rounded to 8 bits: fbgemm's int8 GEMM, which does
    that per call, was 5x faster here but lost 130 % of the mean logprob on the
    default model (outlier channels), see docs/engine.md.
    """

    def __init__(
        self,
        weight: torch.Tensor | None,
        bias: torch.Tensor | None,
        rows: tuple[torch.Tensor, torch.Tensor] | None = None,
        blocks: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
    ) -> None:
        """Quantize ``weight`` [out, in], or take ``rows``, :func:`quantize_rows`' output,
        or ``blocks``, a GGUF's block weights held exactly (the byte form, see
        :func:`tile_bytes`; needs the C++ kernels)."""
        super().__init__()
        self.exact = blocks is not None
        if blocks is not None:
            self._init_bytes(blocks, bias)
            return
        if rows is None:
            assert weight is not None
            rows = quantize_rows(weight)
        q, scale = rows
        self.out_features, self.in_features = q.shape
        self.kernel = cpu_kernels.available()
        self.tiled = self.kernel and self.in_features % GROUP == 0
        self.max_kernel_rows = int8_vnni_max_rows() if self.tiled else INT8_KERNEL_MAX_ROWS
        if self.tiled:
            q, wsum, tiled_scale = tile_rows(q, scale)
            self.register_buffer("wsum", wsum)
            self.register_buffer("tiled_scale", tiled_scale)
        else:  # what int8pack takes (with no kernels, or an input size groups don't divide)
            self.register_buffer("scale_bf16", scale.to(torch.bfloat16))
        self.register_buffer("qweight", q)
        self.register_buffer("scale", scale)  # fp32
        self.bias = None if bias is None else nn.Parameter(bias.detach().float(), False)

    def _init_bytes(
        self, blocks: tuple[torch.Tensor, torch.Tensor, torch.Tensor], bias: torch.Tensor | None
    ) -> None:
        """The byte form: :func:`tile_bytes` of ``blocks`` (values, subs, supers), in six
        bits where they fit (:func:`pack_six`), every input to
        :func:`cpu_kernels.bytes_linear` (any length: the weights stay exact, and the
        kernel is at worst a little slower than a bf16 GEMM of prompt chunks)."""
        if not cpu_kernels.available():
            raise ValueError("the exact byte form of a GGUF's blocks needs the C++ CPU kernels")
        values = blocks[0]
        self.out_features, self.in_features = values.shape
        self.kernel = self.tiled = True
        self.max_kernel_rows = 1 << 62
        qweight, subs, supers = tile_bytes(*blocks)
        six = cpu_kernels.bytes_to_six(qweight, self.out_features) if six_form_runs() else None
        self.register_buffer("qweight", qweight if six is None else six)
        self.register_buffer("subs", subs)
        self.register_buffer("supers", supers)
        self.bias = None if bias is None else nn.Parameter(bias.detach().float(), False)

    def _multiply(self, x: torch.Tensor) -> torch.Tensor:
        """fp32 [rows, in] (at most ``max_kernel_rows``) -> [rows, out], in C++."""
        if self.exact:
            return cpu_kernels.bytes_linear(
                x, self.qweight, self.subs, self.supers, self.out_features
            )
        if self.tiled:
            return cpu_kernels.int8_vnni_linear(
                x, self.qweight, self.wsum, self.tiled_scale, self.out_features
            )
        return cpu_kernels.int8_linear(x, self.qweight, self.scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` [..., in] -> [..., out] in ``x``'s dtype."""
        if self.kernel and _decode_rows(x, self.max_kernel_rows):
            out = self._multiply(x)
            return out if self.bias is None else out + self.bias
        flat = x.reshape(-1, self.in_features)
        rows = flat.shape[0]
        if self.kernel and rows <= self.max_kernel_rows:
            out = self._multiply(flat.float())
        elif rows <= INT8PACK_MAX_ROWS and not self.tiled:
            bf16 = flat.to(torch.bfloat16)
            out = torch.ops.aten._weight_int8pack_mm(bf16, self.qweight, self.scale_bf16)
        else:  # prompt chunks: widen to bf16 (exact for int8) and use the bf16 GEMM
            bf16 = flat.to(torch.bfloat16)
            out = F.linear(bf16, self.rows().to(torch.bfloat16)).float() * self.scale
        out = out.to(x.dtype).view(*x.shape[:-1], self.out_features)
        return out if self.bias is None else out + self.bias

    def rows(self) -> torch.Tensor:
        """The int8 weight [out, in], whichever layout holds it (not the byte form's:
        its values have scales per sub-block; see :meth:`dequantized`)."""
        if self.exact:
            raise ValueError("the byte form has no per-row int8 weight")
        if not self.tiled:
            return self.qweight
        tiles, groups = self.qweight.shape[:2]
        parts = self.qweight.view(tiles, groups, 8, TILE, 4).permute(0, 3, 1, 2, 4)
        return parts.reshape(tiles * TILE, -1)[: self.out_features]

    def dequantized(self) -> torch.Tensor:
        """The fp32 weight this layer stands for (the byte form's: the file's values)."""
        if self.exact:
            return cpu_kernels.bytes_dequantize(
                self.qweight, self.subs, self.supers, self.out_features
            )
        return self.rows().float() * self.scale[:, None]


class Int4Linear(nn.Module):
    """A linear layer with 4-bit weights in groups of 32 (:func:`quantize_groups`).

    With the C++ kernels (any family: the layout is the same on AVX-512, AVX2, NEON and
    generic builds) every input goes to :func:`cpu_kernels.int4_vnni_linear` (weights
    in :func:`tile_groups`' layout; activations split into two int8 parts per group,
    about 16 bits, for the integer dot product). A machine without the C++ kernels
    dequantizes the weight to fp32 for the fp32 GEMM.

    A GGUF's Q4_K tensors come as the file holds them
    (:class:`~mellea.engine.gguf_blocks.Q4KGroups`: nibbles, 6-bit ``sc`` and ``m`` per
    group, fp16 ``d`` and ``-dmin`` per block of 256) and stay so (:attr:`q4k`):
    :func:`cpu_kernels.q4k_vnni_linear` forms each group's scale and minimum in fp32,
    where they are exact, so the layer serves the file's weights exactly; the fp16
    form would round them to fp16.
    """

    def __init__(
        self,
        weight: torch.Tensor | None,
        bias: torch.Tensor | None,
        groups: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
        tiled_rows: int | None = None,
    ) -> None:
        """Quantize ``weight`` [out, in], or take ``groups``: :func:`quantize_groups`'
        output, or a GGUF's 4-bit blocks as :mod:`mellea.engine.gguf_blocks` gives them
        (``Int4Groups``, or ``Q4KGroups``: told apart by their uint8 sub-scales); with
        ``tiled_rows`` (the output size), :func:`tile_groups`' output for that many rows
        (the kernels must be available)."""
        super().__init__()
        if groups is None:
            assert weight is not None
            groups = quantize_groups(weight)
        packed, scales, mins = groups
        self.q4k = scales.dtype == torch.uint8
        self.kernel = cpu_kernels.available()
        self.tiled = self.kernel
        # The tiled kernel beats dequantizing for the fp32 GEMM at any length (3072x576,
        # AVX512-VNNI: 2.6 against 5.5 ms at 256 rows); the fp32 one only up to 32 rows.
        self.max_kernel_rows = INT4_KERNEL_MAX_ROWS
        if tiled_rows is not None:
            assert self.tiled and not self.q4k, "tiled groups need the kernels"
            self.out_features, self.in_features = tiled_rows, scales.shape[1] * GROUP
        else:
            self.out_features, self.in_features = packed.shape[0], packed.shape[1] * 2
        if self.tiled:
            if tiled_rows is None:
                tile = tile_q4k if self.q4k else tile_groups
                packed, scales, mins = tile(packed, scales, mins)
            self.max_kernel_rows = 1 << 62
        self.register_buffer("qweight", packed)
        if self.q4k:
            self.register_buffer("sub_scales", scales)
            self.register_buffer("super_scales", mins)
        else:
            self.register_buffer("scales", scales)
            self.register_buffer("mins", mins)
        self.bias = None if bias is None else nn.Parameter(bias.detach().float(), False)

    @property
    def factors(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The weights' two factor tensors as the kernels take them: (scales, mins), or
        for :attr:`q4k` (sub_scales, super_scales)."""
        if self.q4k:
            return self.sub_scales, self.super_scales
        return self.scales, self.mins

    def _multiply(self, x: torch.Tensor) -> torch.Tensor:
        """fp32 [rows, in] (at most ``max_kernel_rows``) -> [rows, out], in C++."""
        if self.tiled:
            linear = cpu_kernels.q4k_vnni_linear if self.q4k else cpu_kernels.int4_vnni_linear
            return linear(x, self.qweight, *self.factors, self.out_features)
        return cpu_kernels.int4_linear(x, self.qweight, self.scales, self.mins)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` [..., in] -> [..., out] in ``x``'s dtype."""
        if self.kernel and _decode_rows(x, self.max_kernel_rows):
            out = self._multiply(x)
            return out if self.bias is None else out + self.bias
        flat = x.reshape(-1, self.in_features).float()
        if self.kernel and flat.shape[0] <= self.max_kernel_rows:
            out = self._multiply(flat)
        else:
            out = F.linear(flat, self.dequantized())
        out = out.to(x.dtype).view(*x.shape[:-1], self.out_features)
        return out if self.bias is None else out + self.bias

    def dequantized(self) -> torch.Tensor:
        """The fp32 weight this layer stands for."""
        if self.tiled:
            if self.q4k:
                return cpu_kernels.q4k_vnni_dequantize(
                    self.qweight, *self.factors, self.out_features
                )
            return cpu_kernels.int4_vnni_dequantize(
                self.qweight, self.scales, self.mins, self.out_features
            )
        if self.q4k:
            return dequantize_q4k(self.qweight, *self.factors)
        if self.kernel:
            return cpu_kernels.int4_dequantize(self.qweight, self.scales, self.mins)
        return dequantize_groups(self.qweight, self.scales, self.mins)


class MinCorrectedLinear(nn.Module):
    """A byte-form layer plus a minimum per 16 inputs: a GGUF's Q2_K weights,
    ``w = (d * sc) * q - dmin * m`` with ``sc`` and ``m`` per sub-block of 16, whose
    minimums the byte form (one per group of 32) cannot hold. ``base`` (an exact
    :class:`Int8Linear`) holds the products ``(d * sc) * q``; ``lows`` [out, in / 16]
    fp32 each sub-block's ``-(dmin * m)``, applied to the input's sums over the
    sub-blocks (rows of other pieces of the layer have zeros). Both exact, so the
    weights are the file's; ``lows`` add 2 bits a weight to the six-bit form's 6.6
    (a kernel with minimums per 16 would read Q2_K at its own 2.6)."""

    def __init__(self, base: Int8Linear, lows: torch.Tensor, bias: torch.Tensor | None) -> None:
        super().__init__()
        assert base.exact and base.bias is None
        self.base = base
        self.in_features, self.out_features = base.in_features, base.out_features
        self.tiled = False  # not a layout the fused decode layer takes
        self.register_buffer("lows", lows.float().contiguous())
        self.bias = None if bias is None else nn.Parameter(bias.detach().float(), False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` [..., in] -> [..., out] in ``x``'s dtype."""
        flat = x.reshape(-1, self.in_features).float()
        sums = flat.view(flat.shape[0], -1, 16).sum(-1)
        out = self.base(flat) + F.linear(sums, self.lows)
        out = out.to(x.dtype).view(*x.shape[:-1], self.out_features)
        return out if self.bias is None else out + self.bias

    def dequantized(self) -> torch.Tensor:
        """The fp32 weight this layer stands for (the file's, bit for bit)."""
        return self.base.dequantized() + self.lows.repeat_interleave(16, dim=1)


class StackedLinear(nn.Module):
    """One linear layer whose output rows come from tiled layers of different formats,
    stacked in order: a Q4_K_M file's fused q/k/v, whose Q4_K ``attn_q`` and ``attn_k``
    stay in their exact 4.5-bit form beside its Q6_K ``attn_v`` in the byte form (as one
    byte-form layer, q and k would be read at 8.6 bits a weight: 5 % more bytes for
    each decode step of a 1.7B model). :func:`cpu_kernels.decode_layer` takes the two
    parts as its qkv projection."""

    def __init__(self, parts: list[Int4Linear | Int8Linear | MinCorrectedLinear]) -> None:
        """``parts``: layers with the same input size, their outputs in this order."""
        super().__init__()
        assert len({p.in_features for p in parts}) == 1 and all(p.bias is None for p in parts)
        self.parts = nn.ModuleList(parts)
        self.in_features = parts[0].in_features
        self.out_features = sum(p.out_features for p in parts)
        self.tiled = all(p.tiled for p in parts)
        self.bias = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` [..., in] -> [..., out]: the parts' outputs side by side."""
        return torch.cat([part(x) for part in self.parts], -1)

    def dequantized(self) -> torch.Tensor:
        """The fp32 weight this layer stands for."""
        return torch.cat([part.dequantized() for part in self.parts])


def linear_layer(weight: torch.Tensor, bias: torch.Tensor | None, fmt: str) -> nn.Module:
    """A ``fmt`` layer over an fp32 weight (and bias); int4 needs an input size that
    groups of 32 divide, and a layer without one is stored in int8."""
    if fmt == "bfloat16":
        return Bf16Linear(weight, bias)
    if fmt == "int4" and weight.shape[1] % GROUP == 0:
        return Int4Linear(weight, bias)
    return Int8Linear(weight, bias)

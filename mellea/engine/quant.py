"""Weight formats on CPU: fp32, bf16 or int8 weights under an fp32 forward pass.

The CPU forward pass always computes in fp32 (residual stream, norms, attention, KV
cache, logits); a format only changes how the big matrices are stored and multiplied:

* ``float32``: as loaded; the exact path.
* ``bfloat16``: linear-layer and LM-head weights in bf16; a linear rounds its input
  to bf16 and returns fp32 (oneDNN accumulates in fp32, on AMX where present).
* ``int8``: per-output-channel symmetric int8 weights (``Int8Linear``) for the same.

In both, the embedding stays fp32 and the LM head's best logits are recomputed from
its fp32 rows (:class:`RefinedHead`).

``auto`` serves a checkpoint as it is stored (see :func:`auto_cpu_format`): int4 for
one whose weights are 4-bit already, else its own dtype; the other formats are opt-ins.
On CUDA a format is the whole model's dtype, as before.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from mellea.engine import cpu_kernels
from mellea.engine.cpu_build import cpu_flags

log = logging.getLogger(__name__)

FORMATS = ("auto", "float32", "bfloat16", "int8", "int4")
# Other spellings the engine has accepted for its ``dtype`` argument.
_ALIASES = {
    "fp32": "float32",
    "float": "float32",
    "bf16": "bfloat16",
    "fp16": "float16",
    "half": "float16",
    "float16": "float16",
}
_TORCH = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def cpu_has_native_bf16() -> bool:
    """Whether this CPU multiplies bf16 natively (AVX512-BF16 or AMX), and PyTorch may
    use it (``ATEN_CPU_CAPABILITY=avx2``, the AVX2 path, says it may not)."""
    if not torch.backends.cpu.get_cpu_capability().startswith("AVX512"):
        return False
    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(getattr(torch.cpu, name, lambda: False)() for name in checks)


def resolve_format(
    dtype: str | torch.dtype | None, device: torch.device, model_path: str | Path | None = None
) -> str:
    """The weight format a ``dtype`` setting means on ``device`` (for the checkpoint at
    ``model_path``, which ``auto`` reads).

    ``None`` is ``float32`` on CPU (the exact path, the library's default) and
    ``bfloat16`` on a GPU. ``"auto"`` on a GPU is ``bfloat16``; on a CPU it is
    :func:`auto_cpu_format`: the checkpoint as it is stored, never a rounding of its
    weights. ``ValueError`` for an unknown name, or a format the device cannot run
    (int8 and int4 are CPU-only).
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
        return "bfloat16" if device.type != "cpu" else auto_cpu_format(model_path)
    if fmt in ("int8", "int4") and device.type != "cpu":
        raise ValueError(f"dtype {fmt!r} runs on CPU only")
    return fmt


_logged: set[str] = set()


def auto_cpu_format(model_path: str | Path | None) -> str:
    """What ``--dtype auto`` serves the checkpoint at ``model_path`` in on a CPU: what
    the file holds, so that the answers are the checkpoint's own, in the fastest way
    this CPU's kernel family (:func:`cpu_kernels.family`) runs it.

    ``int4`` when every linear weight is 4-bit already (dequantized from a Q4 GGUF,
    like the default model) and the AVX-512, AVX2 or NEON dot-product kernels run here:
    int4 holds those weights exactly and is the fastest format on both x86 families
    (benchmarks/README.md); on NEON that is unmeasured (the same integer dot products on
    ``sdot``, no ARM machine here to time them).
    Otherwise the checkpoint's own dtype: ``bfloat16`` for a bf16 checkpoint where the
    CPU multiplies bf16 natively (:func:`cpu_has_native_bf16`), ``float32`` for the
    rest (fp32 holds fp16 and bf16 weights exactly; the generic kernels' int4 is slower
    than float32's GEMM). Faster formats that round trained weights (``int8``) are an
    opt-in: see :func:`faster_opt_in`. Logs the choice for a model, the kernel family
    and why, once.
    """
    if model_path is None:
        return "float32"
    path = Path(model_path)
    family = cpu_kernels.family()
    four_bit = checkpoint_is_4bit(path)
    if four_bit and family in ("avx512-vnni", "avx2", "neon-dotprod"):
        fmt, why = "int4", "the checkpoint's weights are 4-bit already: int4 holds them exactly"
    elif stored_dtype(path) == "bfloat16" and cpu_has_native_bf16():
        fmt, why = "bfloat16", "the checkpoint's own dtype, which this CPU multiplies natively"
    elif four_bit:
        fmt, why = "float32", "4-bit weights, but on generic kernels int4 is slower than float32"
    else:
        fmt, why = "float32", "the checkpoint's own weights, exactly"
    line = f"weight format {fmt} (dtype auto), CPU kernels {family}: {why}"
    if line not in _logged:
        _logged.add(line)
        log.info("%s", line)
    return fmt


# safetensors dtype names of the float formats a checkpoint may store its weights in.
_STORED = {"F32": "float32", "BF16": "bfloat16", "F16": "float16", "F64": "float32"}


def stored_dtype(model_dir: Path) -> str | None:
    """The float dtype the safetensors checkpoint in ``model_dir`` stores its linear
    weights in (``float32``, ``bfloat16`` or ``float16``; the widest if they differ),
    read from the files' headers; None when there is no such weight.
    """
    import json
    import struct

    found: set[str] = set()
    for file in sorted(model_dir.glob("*.safetensors")) if model_dir.is_dir() else []:
        with open(file, "rb") as f:
            (size,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(size))
        for name, entry in header.items():
            if name == "__metadata__" or not name.endswith(".weight"):
                continue
            if any(part in name for part in _NOT_LINEAR) or len(entry["shape"]) != 2:
                continue
            if entry["dtype"] in _STORED:
                found.add(_STORED[entry["dtype"]])
    for widest in ("float32", "float16", "bfloat16"):
        if widest in found:
            return widest
    return None


# int8's decode step at batch 1 against each format's on the default model, and how
# often its greedy text stays the checkpoint's own (docs/engine.md, weight formats:
# 9.1 ms against 51.9 for float32 and 31.9 for bfloat16; 7 of 12 identical; measured
# on an AVX512-VNNI CPU).
_INT8_SPEEDUP = {"float32": "5.7x", "bfloat16": "3.5x"}
_INT8_AGREEMENT = "7 of 12"


def faster_opt_in(fmt: str) -> str | None:
    """The start-up line that names the faster format ``auto`` did not pick for an
    unquantized checkpoint served in ``fmt``, with what it costs (None for int4)."""
    if fmt not in _INT8_SPEEDUP:
        return None
    return (
        f"weights: {fmt}, the checkpoint's own (--dtype auto). --dtype int8 is faster "
        f"(a decode step {_INT8_SPEEDUP[fmt]} as fast on the default model) but rounds the "
        f"weights: greedy text the checkpoint's own on {_INT8_AGREEMENT} of our quality "
        "prompts (docs/engine.md, weight formats)"
    )


def compute_dtype(fmt: str, device: torch.device) -> torch.dtype:
    """The dtype the forward pass and KV cache use for a resolved format."""
    if fmt in ("int8", "int4") or (device.type == "cpu" and fmt == "bfloat16"):
        return torch.float32  # weights converted after load (convert_weights)
    return _TORCH[fmt]


# Quantizing works through this many rows at a time: its float32 temporaries for a
# large table (a 49k x 2048 tied LM head) would otherwise be several copies of it.
QUANTIZE_ROWS = 4096


def _by_chunks(quantize: Any, weight: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """``quantize`` (row by row independent) over ``weight`` in chunks of rows."""
    parts = [quantize(chunk) for chunk in weight.split(QUANTIZE_ROWS)]
    return tuple(torch.cat(pieces) for pieces in zip(*parts, strict=True))


def quantize_rows(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric int8 per row (output channel): ``weight ~= q * scale[:, None]``."""
    if weight.shape[0] > QUANTIZE_ROWS:
        return _by_chunks(quantize_rows, weight)  # type: ignore[return-value]
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


# Up to this many rows (decode steps), the C++ kernels' multiply beats widening the
# weights for a GEMM; longer inputs (prompt chunks, wide batches) take the GEMM.
# Measured on the 2-core AVX512-BF16 CPU, one thread, 3072x576: int8 at 16 rows
# 0.70 ms against 0.71 for the bf16 GEMM, at 32 rows 1.42 against 0.90; int4 at 32
# rows 1.71 ms against 1.66 for dequantizing and the fp32 GEMM.
INT8_KERNEL_MAX_ROWS = 16
# int8 in the tiled layout (on VNNI's integer dot product), 3072x576 on 2 threads: 32
# rows 0.62 ms against 0.67 for widening to the bf16 GEMM, 128 rows 2.6 against 1.6.
# That holds where the CPU multiplies bf16 natively (AVX512-BF16, AMX); elsewhere the
# bf16 GEMM is emulated and the kernel wins at every length (see int8_vnni_max_rows).
INT8_VNNI_MAX_ROWS = 32
INT4_KERNEL_MAX_ROWS = 32
# Without the C++ kernels: up to this many rows, int8pack_mm is faster than widening
# the weights to bf16 for the bf16 GEMM (its cost grows with the rows, the widening's
# does not): on an AVX512-BF16/AMX CPU, 1536x576: 8 rows 184 us vs 260, 16 rows 357 vs 280.
INT8PACK_MAX_ROWS = 12


def bf16_gemm_is_native() -> bool:
    """Whether torch's bf16 GEMM runs on bf16 instructions here: the CPU has them
    (AVX512-BF16 or AMX) and oneDNN is not held below AVX-512 (``ONEDNN_MAX_CPU_ISA``,
    as the AVX2 path of the tests and benchmarks sets it)."""
    limit = os.environ.get("ONEDNN_MAX_CPU_ISA", "").upper()
    if limit and not limit.startswith(("AVX512", "AMX", "ALL", "DEFAULT")):
        return False
    return bool({"avx512_bf16", "amx_bf16"} & cpu_flags())


def int8_vnni_max_rows() -> int:
    """The longest input the tiled int8 kernel takes before widening to the bf16 GEMM
    wins: :data:`INT8_VNNI_MAX_ROWS` with native bf16, else any length. Without bf16
    instructions the GEMM converts in software: a 6144x2048 int8 layer on the AVX2
    path took 62 ms for 256 rows in the kernel against 164 ms through bf16 (45.9
    against 15.9 ms at 64 rows; AVX-512 with AVX512-BF16: 27.8 against 29.3 at 256
    rows, 138 against 100 at 1024)."""
    return INT8_VNNI_MAX_ROWS if bf16_gemm_is_native() else 1 << 62


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


GROUP = 32  # int4 weights: elements per group (along the input dimension)


def quantize_groups(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Asymmetric 4-bit in groups of :data:`GROUP` along each row, GGUF Q4_1's scheme:
    ``w ~= q * scale + min`` with ``q`` in 0..15, ``min`` the group's smallest value
    and ``scale`` its range / 15, both stored in fp16 (as Q4_1 stores them). Returns
    (packed [N, K/2] uint8, scales [N, K/32] fp16, mins [N, K/32] fp16); byte
    ``16 g + j`` of a row holds element ``j`` of group ``g`` in its low nibble and
    element ``j + 16`` in its high one (the kernel's layout)."""
    n, k = weight.shape
    if k % GROUP:
        raise ValueError(f"int4 needs an input size divisible by {GROUP}, not {k}")
    if n > QUANTIZE_ROWS:
        return _by_chunks(quantize_groups, weight)  # type: ignore[return-value]
    groups = weight.detach().float().reshape(n, k // GROUP, GROUP)
    low = groups.amin(-1).half()
    scale = ((groups.amax(-1) - low.float()) / 15).half()
    safe = torch.where(scale > 0, scale.float(), torch.ones_like(scale, dtype=torch.float32))
    q = groups - low.float()[..., None]
    q.div_(safe[..., None]).round_().clamp_(0, 15)  # in place: no more temporaries
    q = q.to(torch.uint8)
    packed = q[..., : GROUP // 2] | (q[..., GROUP // 2 :] << 4)
    return packed.reshape(n, k // 2).contiguous(), scale.contiguous(), low.contiguous()


def dequantize_groups(
    packed: torch.Tensor, scales: torch.Tensor, mins: torch.Tensor
) -> torch.Tensor:
    """The fp32 weight [N, K] that :func:`quantize_groups`' output stands for."""
    n = packed.shape[0]
    halves = packed.reshape(n, -1, GROUP // 2)
    q = torch.cat([halves & 0x0F, halves >> 4], dim=-1).float()
    return (q * scales.float()[..., None] + mins.float()[..., None]).reshape(n, -1)


def dequantize_q4k(packed: torch.Tensor, sub: torch.Tensor, super_: torch.Tensor) -> torch.Tensor:
    """The fp32 weight [N, K] of a GGUF's Q4_K groups as the file holds them
    (:class:`~mellea.engine.gguf_blocks.Q4KGroups`: nibbles, each group's 6-bit ``sc`` and
    ``m`` [N, K/32, 2], each block's ``d`` and ``-dmin`` [N, K/256, 2]): the reference
    dequantizer's values bit for bit (every product exact in fp32)."""
    n = packed.shape[0]
    halves = packed.reshape(n, -1, GROUP // 2)
    q = torch.cat([halves & 0x0F, halves >> 4], dim=-1).float()
    factors = super_.float().repeat_interleave(8, dim=1) * sub.float()  # [N, K/32, 2]
    return (q * factors[..., 0:1] + factors[..., 1:2]).reshape(n, -1)


# A checkpoint is 4-bit already when int4 reproduces its weights to within this
# fraction of each group's step (fp32 rounding of the stored dequantized values).
EXACT_INT4 = 1e-3


def int4_is_exact(weight: torch.Tensor) -> bool:
    """Whether :func:`quantize_groups` holds ``weight`` [N, K] without loss: true for
    weights dequantized from a Q4_0, Q4_1 or Q4_K GGUF, false for trained fp weights."""
    if weight.dim() != 2 or weight.shape[1] % GROUP:
        return False
    packed, scales, mins = quantize_groups(weight)
    error = (dequantize_groups(packed, scales, mins) - weight.float()).abs()
    step = scales.float().repeat_interleave(GROUP, dim=1)
    return bool((error <= EXACT_INT4 * step + 1e-12).all())


# Checkpoint tensors that are not linear layers (embeddings, norms, heads).
_NOT_LINEAR = ("embed", "lm_head", "norm", "wte", "wpe")


def checkpoint_is_4bit(model_dir: Path, rows: int = 64) -> bool:
    """Whether every linear weight of the safetensors checkpoint in ``model_dir`` is 4-bit
    already: :func:`quantize_groups` holds each tensor's first ``rows`` rows exactly
    (tensor types are per tensor, so a slice tells). For a GGUF's metadata directory,
    :func:`gguf_is_4bit` of the file.

    NumPy, not torch ops: this runs on the caller's thread, and a parallel torch op there
    would give that thread an OpenMP team of its own beside the engine thread's (see
    :class:`mellea.engine.engine.Engine`).
    """
    from safetensors import safe_open

    from mellea.engine.gguf_file import gguf_source

    source = gguf_source(model_dir)
    if source is not None:
        return gguf_is_4bit(source)
    files = sorted(model_dir.glob("*.safetensors"))
    seen = 0
    for file in files:
        with safe_open(str(file), framework="pt") as f:
            for name in f.keys():  # noqa: SIM118 (safe_open is not a mapping)
                if not name.endswith(".weight") or any(part in name for part in _NOT_LINEAR):
                    continue
                piece = f.get_slice(name)
                shape = piece.get_shape()
                if len(shape) != 2:
                    continue
                seen += 1
                if shape[1] % GROUP or not _groups_exact(_as_float32(piece[: min(rows, shape[0])])):
                    return False
    return seen > 0


def _as_float32(rows: torch.Tensor) -> Any:
    """A float tensor as an fp32 NumPy array, widened in NumPy (bf16, which NumPy
    lacks, by its bits: a bf16 number is the top half of an fp32 one)."""
    import numpy as np

    if rows.dtype == torch.bfloat16:
        bits = rows.view(torch.int16).numpy().astype(np.uint16).astype(np.uint32)
        return (bits << 16).view(np.float32)
    return rows.numpy().astype(np.float32)


def gguf_is_4bit(path: Path) -> bool:
    """Whether most of a GGUF file's linear weights (by elements) are in a block format
    that int4 holds (Q4_0, Q4_1, Q4_K: a Q4_K_M file, whose few Q6_K tensors then keep
    8 bits). Reads only the file's tensor table."""
    import math

    from mellea.engine.gguf_blocks import INT4_TYPES
    from mellea.engine.gguf_file import read_table

    four = other = 0
    for entry in read_table(path)[1]:
        name = entry.name
        if not name.startswith("blk.") or not name.endswith(".weight") or "norm" in name:
            continue
        if len(entry.dims) != 2:
            continue
        if entry.qtype in INT4_TYPES:
            four += math.prod(entry.dims)
        else:
            other += math.prod(entry.dims)
    return four > other


def _groups_exact(weight: Any) -> bool:
    """:func:`int4_is_exact` for a NumPy array (the same rounding, step by step)."""
    import numpy as np

    groups = weight.reshape(weight.shape[0], -1, GROUP)
    low = groups.min(-1).astype(np.float16).astype(np.float32)
    scale = ((groups.max(-1) - low) / 15).astype(np.float16).astype(np.float32)
    safe = np.where(scale > 0, scale, 1.0)
    q = np.clip(np.round((groups - low[..., None]) / safe[..., None]), 0, 15)
    error = np.abs(q * scale[..., None] + low[..., None] - groups)
    return bool((error <= EXACT_INT4 * scale[..., None] + 1e-12).all())


TILE = 16  # tiled int4/int8 weights: output rows per tile (one AVX-512 vector of sums)


def tile_groups(
    packed: torch.Tensor, scales: torch.Tensor, mins: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`tile_groups_torch`'s layout, in one pass of C++ where the kernels run
    (``cpu_kernels.tile_int4_weights``: the same bytes, about a tenth of the load's
    time for a 1.7B model's int4 layers)."""
    if cpu_kernels.available():
        return cpu_kernels.tile_int4_weights(packed, scales, mins)
    return tile_groups_torch(packed, scales, mins)


def tile_groups_torch(
    packed: torch.Tensor, scales: torch.Tensor, mins: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`quantize_groups`' output in the layout of ``cpu_kernels.int4_vnni_linear``:
    tiles of :data:`TILE` rows (the last padded with zero rows), each group of a tile
    256 bytes in which byte ``4 j + b`` of part ``s`` holds element ``8 s + b`` of row
    ``j``'s group in its low nibble and element ``8 s + 4 + b`` in its high one; scales
    and mins [tiles, groups, 16].

    Works on 4-byte words (a group's 16 bytes are 4 of them, one per ``s % 2`` and
    low/high half): the nibbles move with word-wide masks and shifts, and the tiling
    transposes words, not bytes; byte-wise tensor ops made this most of a 1.7B model's
    load time."""
    n, half = packed.shape
    groups = half * 2 // GROUP
    tiles = -(-n // TILE)
    rows = tiles * TILE

    def padded(values: torch.Tensor) -> torch.Tensor:
        return values if rows == n else F.pad(values, (0, 0, 0, rows - n))

    words = padded(packed.contiguous()).view(torch.int32).view(tiles, TILE, groups, 2, 2)
    first, second = words[..., 0], words[..., 1]  # elements 8 s' + b and 8 s' + 4 + b
    low = 0x0F0F0F0F
    high = 0xF0F0F0F0 - (1 << 32)  # as int32
    # The results go straight to their tiled places (no untiled copy to permute), and
    # the two scratch tensors are reused: each fresh one is page faults on a whole
    # layer's weights, which made this most of a 1.7B model's load time.
    tiled = torch.empty(tiles, groups, 2, 2, TILE, dtype=torch.int32)
    places = tiled.permute(0, 4, 1, 2, 3)  # [tile, row, g, upper half, s%2]
    word = torch.bitwise_left_shift(second, 4)
    word &= high
    scratch = torch.bitwise_and(first, low)
    word |= scratch
    places[..., 0, :] = word  # parts s = 0, 1
    torch.bitwise_right_shift(first, 4, out=word)
    word &= low
    torch.bitwise_and(second, high, out=scratch)
    word |= scratch
    places[..., 1, :] = word  # parts s = 2, 3
    qweight = tiled.view(torch.uint8).view(tiles, groups, 4, 64)

    def per_tile(values: torch.Tensor) -> torch.Tensor:
        return padded(values).view(tiles, TILE, groups).transpose(1, 2).contiguous()

    return qweight, per_tile(scales), per_tile(mins)


def tile_q4k(
    packed: torch.Tensor, sub: torch.Tensor, super_: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`tile_q4k_torch`'s layout, in one pass of C++ where the kernels run
    (``cpu_kernels.tile_q4k_weights``, the same bytes)."""
    if cpu_kernels.available():
        return cpu_kernels.tile_q4k_weights(packed, sub, super_)
    return tile_q4k_torch(packed, sub, super_)


def tile_q4k_torch(
    packed: torch.Tensor, sub: torch.Tensor, super_: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A GGUF's Q4_K groups (:class:`~mellea.engine.gguf_blocks.Q4KGroups`) in the layout
    of ``cpu_kernels.q4k_vnni_linear``: the nibbles as :func:`tile_groups_torch` tiles
    them; ``sub`` [N, K/32, 2] as [tiles, groups, 2, 16] (each group's 16 rows' ``sc``,
    then their ``m``); ``super_`` [N, K/256, 2] as [tiles, blocks, 2, 16] (``d``, then
    ``-dmin``); rows past N zero."""
    qweight, sc, m = tile_groups_torch(packed, sub[..., 0], sub[..., 1])
    n, blocks = super_.shape[:2]
    tiles = -(-n // TILE)
    padded = F.pad(super_, (0, 0, 0, 0, 0, tiles * TILE - n))
    factors = padded.view(tiles, TILE, blocks, 2).permute(0, 2, 3, 1).contiguous()
    return qweight, torch.stack([sc, m], dim=2).contiguous(), factors


def tile_rows(
    q: torch.Tensor, scale: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`tile_rows_torch`'s layout, in one pass of C++ where the kernels run
    (``cpu_kernels.tile_int8_weights``, the same bytes)."""
    if cpu_kernels.available():
        return cpu_kernels.tile_int8_weights(q, scale)
    return tile_rows_torch(q, scale)


def tile_rows_torch(
    q: torch.Tensor, scale: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`quantize_rows`' output in the layout of ``cpu_kernels.int8_vnni_linear``:
    tiles of :data:`TILE` rows (the last padded with zero rows), each group of 32 along
    the input 512 bytes in which part ``u`` (64 bytes) holds bytes ``4 u`` to ``4 u + 3``
    of each of the tile's rows' group; the weights' sum per row and group [tiles,
    groups, 16] int32 (the kernel's correction for its unsigned activations); the
    scales padded to [tiles * 16].

    Moves 4-byte words, not bytes (part ``u`` of a row's group is one word of the row),
    and sums each group in the rows' own order: 4x fewer elements to transpose, and a
    contiguous reduction (byte-wise, this was most of a Q4_K_M file's int8 layers' load)."""
    q = q.contiguous()
    n, k = q.shape
    tiles, groups = -(-n // TILE), k // GROUP
    pad = tiles * TILE - n
    words = q.view(torch.int32).view(n, groups, 8)  # [row, group, part]
    wsum = torch.from_numpy(q.numpy().reshape(n, groups, GROUP).sum(-1, dtype=np.int32))
    if pad:
        words = F.pad(words, (0, 0, 0, 0, 0, pad))
        wsum = F.pad(wsum, (0, 0, 0, pad))
    tiled = words.view(tiles, TILE, groups, 8).permute(0, 2, 3, 1).contiguous()
    qweight = tiled.view(torch.int8).view(tiles, groups, 8, 64)
    wsum = wsum.view(tiles, TILE, groups).transpose(1, 2).contiguous()
    return qweight, wsum, F.pad(scale.float(), (0, pad)).contiguous()


def byte_form_runs() -> bool:
    """Whether a GGUF's 5-8-bit layers load in the exact byte form here: wherever the
    C++ kernels run (every family has a byte tile: VNNI or ``vpmaddwd`` on x86, ``sdot``
    on NEON, plain loops in the generic build); without them they keep per-row int8."""
    return cpu_kernels.available()


def tile_bytes(
    values: torch.Tensor, subs: torch.Tensor, supers: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A GGUF's blocks in the byte form (:class:`~mellea.engine.gguf_blocks.ByteBlocks`:
    values ``q + 128`` [N, K] uint8, ``subs`` [N, K/32, P] int8, ``supers`` [N, B, P - 1]
    fp32) in the layout of ``cpu_kernels.bytes_linear``: the values in :func:`tile_rows`'
    tiles [T, K/32, 8, 64] (as bytes), subs [T, K/32, P, 16] and supers [T, B, P - 1, 16]
    (rows past N zero). See cpu_kernels_bytes.inc for what each number means."""
    n = values.shape[0]
    tiles = -(-n // TILE)
    pad = tiles * TILE - n
    signed = values.contiguous().view(torch.int8)
    zero = torch.zeros(n, dtype=torch.float32)
    qweight = (
        tile_rows(signed, zero) if cpu_kernels.available() else tile_rows_torch(signed, zero)
    )[0]

    def per_tile(t: torch.Tensor) -> torch.Tensor:
        t = F.pad(t, (0, 0, 0, 0, 0, pad)) if pad else t
        return t.view(tiles, TILE, *t.shape[1:]).permute(0, 2, 3, 1).contiguous()

    return qweight.view(torch.uint8), per_tile(subs), per_tile(supers)


def six_form_runs() -> bool:
    """Whether byte-form layers whose values fit 6 bits are held in the six-bit form
    (:func:`pack_six`): every family's tiles rebuild it but NEON's."""
    return cpu_kernels.available() and cpu_kernels.family() != "neon-dotprod"


def pack_six(qweight: torch.Tensor, n: int) -> torch.Tensor | None:
    """:func:`tile_bytes`' values [T, G, 8, 64] (``q + 128``) of ``n`` rows in the six-bit
    form [T, G, 6, 64] when every ``q`` is in -32..31 (Q6_K's, Q5_K's, Q4_K's, Q4_0's),
    else ``None``: ``v = q + 32``; parts 0-3 hold the low 4 bits of parts ``u`` (low
    nibble) and ``u + 4`` (high nibble), parts 4 and 5 the high 2 bits of parts ``4 h``
    .. ``4 h + 3`` (part ``4 h + k`` at bits ``2 k``); the padding rows get ``q = 0``.
    A Q4_K_M file's Q6_K layers are read at 6.75 bits a weight with their scales
    instead of 8.6 (cpu_kernels_bytes.inc). The loader uses the C++ twin
    (:func:`cpu_kernels.bytes_to_six`, the same bytes, a tenth of the time)."""
    tiles = qweight.shape[0]
    row = torch.arange(tiles)[:, None] * TILE + torch.arange(64)[None, :] // 4  # byte's row
    padding = (row >= n).view(tiles, 1, 1, 64)
    qweight = qweight.masked_fill(padding, 128)
    if qweight.numel() == 0 or qweight.min() < 96 or qweight.max() > 159:
        return None
    v = qweight - 96
    low, high = v & 15, v >> 4
    nibbles = low[:, :, :4] | (low[:, :, 4:] << 4)
    h = high.view(*high.shape[:2], 2, 4, 64)
    packed = h[:, :, :, 0] | (h[:, :, :, 1] << 2) | (h[:, :, :, 2] << 4) | (h[:, :, :, 3] << 6)
    return torch.cat([nibbles, packed], dim=2).contiguous()


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


class StackedLinear(nn.Module):
    """One linear layer whose output rows come from tiled layers of different formats,
    stacked in order: a Q4_K_M file's fused q/k/v, whose Q4_K ``attn_q`` and ``attn_k``
    stay in their exact 4.5-bit form beside its Q6_K ``attn_v`` in the byte form (as one
    byte-form layer, q and k would be read at 8.6 bits a weight: 5 % more bytes for
    each decode step of a 1.7B model). :func:`cpu_kernels.decode_layer` takes the two
    parts as its qkv projection."""

    def __init__(self, parts: list[Int4Linear | Int8Linear]) -> None:
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


# How many of the best logits the LM head recomputes in fp32 (see RefinedHead).
HEAD_REFINE = 32


class RefinedHead(nn.Module):
    """An LM head whose candidates come from bf16 or int8 weights and whose best logits
    are exact fp32.

    The fast kernel scores the whole vocabulary (reading a half or a quarter of fp32's
    bytes); the :data:`HEAD_REFINE` best of each row are then recomputed from the fp32
    hidden state and ``exact``, the fp32 weight rows (a few dozen rows: cheap). That
    takes the weights' rounding out of the greedy choice and the top logprobs, and the
    output rounding of the bf16 kernels too (a logit near 20 in bf16 has steps of 1/8,
    which makes ties that fp32 tells apart).
    """

    def __init__(self, inner: nn.Module, exact: torch.Tensor | nn.Module) -> None:
        """``exact``: the fp32 weight [vocab, hidden], or a module whose ``rows(index)``
        widens rows of it (a :class:`~mellea.engine.block_table.BlockTable`)."""
        super().__init__()
        self.inner = inner
        if isinstance(exact, torch.Tensor):
            self.register_buffer("exact", exact.detach().float())
            self.table = None
        else:
            self.exact = None
            self.table = exact

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """[N, hidden] -> fp32 logits [N, vocab]."""
        logits = self.inner(hidden).float()
        k = min(HEAD_REFINE, logits.shape[-1])
        if logits.device.type == "cpu" and cpu_kernels.available():
            top = cpu_kernels.top_k(logits, k)[1]
        else:
            top = logits.topk(k, dim=-1).indices
        rows = self.exact[top] if self.table is None else self.table.rows(top)
        exact = torch.bmm(rows, hidden.float().unsqueeze(-1)).squeeze(-1)
        if self.inner.bias is not None:
            exact = exact + self.inner.bias[top]
        return logits.scatter_(-1, top, exact)


def linear_layer(weight: torch.Tensor, bias: torch.Tensor | None, fmt: str) -> nn.Module:
    """A ``fmt`` layer over an fp32 weight (and bias); int4 needs an input size that
    groups of 32 divide, and a layer without one is stored in int8."""
    if fmt == "bfloat16":
        return Bf16Linear(weight, bias)
    if fmt == "int4" and weight.shape[1] % GROUP == 0:
        return Int4Linear(weight, bias)
    return Int8Linear(weight, bias)


def table_layer(table: Any, fmt: str) -> nn.Module:
    """A ``fmt`` layer scoring against every row of ``table`` (a
    :class:`~mellea.engine.block_table.BlockTable`), built 1024 rows at a time: no
    float32 copy of the whole table, and each chunk's results written into the whole
    outputs (no second copy of them to concatenate)."""
    if fmt == "bfloat16":
        (weight,) = _by_table_chunks(table, lambda c: (c.to(torch.bfloat16),))
        return Bf16Linear(weight, None)
    if fmt == "int4" and table.embedding_dim % GROUP == 0:
        if cpu_kernels.available():  # each chunk tiled as it is quantized (whole tiles)
            tiles = -(-table.num_embeddings // TILE)
            tiled = _by_table_chunks(table, lambda c: tile_groups(*quantize_groups(c)), tiles)
            return Int4Linear(None, None, groups=tiled, tiled_rows=table.num_embeddings)
        return Int4Linear(None, None, groups=_by_table_chunks(table, quantize_groups))
    return Int8Linear(None, None, rows=_by_table_chunks(table, quantize_rows))


def _by_table_chunks(table: Any, convert: Any, length: int = 0) -> tuple[torch.Tensor, ...]:
    """``convert`` (rows -> a tuple of results along a first dimension, ``length`` long
    for the whole table: its rows by default) of each 1024-row chunk of ``table``,
    written into tensors for the whole table. The heap is trimmed after each chunk: a
    chunk's temporaries (about 6 copies of it) would otherwise stay resident between the
    small results (0.15 GB more at the peak of a 1.7B model's load)."""
    from mellea.engine.heap import trim_malloc

    whole: tuple[torch.Tensor, ...] = ()
    first = 0
    for chunk in table.chunks(1024):
        parts = convert(chunk)
        if not whole:
            rows = length or table.num_embeddings
            whole = tuple(torch.empty((rows, *p.shape[1:]), dtype=p.dtype) for p in parts)
        for out, part in zip(whole, parts, strict=True):
            out[first : first + part.shape[0]].copy_(part)
        first += parts[0].shape[0]
        del chunk, parts
        trim_malloc()
    return whole


class HeadScorer:
    """Builds the LM head's scoring layer (:func:`table_layer`) in a thread of its own,
    on one torch thread, as soon as the loader hands over the head's table (a GGUF's
    ``output`` or, tied, ``token_embd``), while the loader builds the decoder layers.
    An 8B-shaped Q4_K_M file's 128256 x 4096 head took 4.2 s of a 17 s load on one
    thread, after all the layers. Use as a context manager: leaving it waits for the
    thread."""

    def __init__(self, fmt: str, tied: bool) -> None:
        self.fmt = fmt
        self.table_name = "embed_tokens.weight" if tied else "lm_head.weight"
        self._pool: Any = None
        self._future: Any = None
        self._table: nn.Module | None = None

    def submit(self, name: str, table: nn.Module) -> None:
        """Start building the scoring layer if ``name`` is the head's table (the loader
        keeps tables in their blocks only for the compact formats)."""
        if name != self.table_name:
            return
        from concurrent.futures import ThreadPoolExecutor

        self._pool = ThreadPoolExecutor(1, thread_name_prefix="mellea-head")
        self._table = table
        self._future = self._pool.submit(_on_one_thread, table_layer, table, self.fmt)

    def result(self, table: nn.Module) -> nn.Module | None:
        """The scoring layer built for ``table`` (waiting for it); None if none was
        started for that table. Raises what building it raised."""
        if self._future is None or table is not self._table:
            return None
        return self._future.result()

    def __enter__(self) -> HeadScorer:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)


def _on_one_thread(fn: Any, *args: Any) -> Any:
    torch.set_num_threads(1)  # this thread's own count: the loader keeps the other core
    return fn(*args)


@torch.no_grad()
def convert_weights(model: nn.Module, fmt: str, scorer: HeadScorer | None = None) -> nn.Module:
    """Store ``model``'s (a CPU fp32 :class:`~mellea.engine.model.DecoderModel`) linear
    layers in ``fmt``, in place, and give it a :class:`RefinedHead` (its scoring layer
    from ``scorer`` where that built it while the model loaded).

    The embedding stays fp32: a lookup reads one row per token, so its format costs
    nothing in speed, while rounded input embeddings move every later layer. The LM
    head (the embedding table, when tied) scores in ``fmt``, a search for candidates,
    and refines the best from its fp32 rows. ``float32`` (and ``float16``) change
    nothing.
    """
    if fmt not in ("bfloat16", "int8", "int4"):
        return model  # loaded in this dtype already
    head = getattr(model, "lm_head", None)
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.Linear) and child is not head:
                setattr(parent, name, linear_layer(child.weight, child.bias, fmt))
    from mellea.engine.block_table import BlockTable

    embed = getattr(model, "embed_tokens", None)
    if isinstance(head, BlockTable):  # a GGUF's own head table, kept in its blocks
        model.lm_head = RefinedHead(_scoring(head, fmt, scorer), head)
    elif head is None and isinstance(embed, BlockTable):
        model.lm_head = RefinedHead(_scoring(embed, fmt, scorer), embed)
    elif isinstance(head, nn.Linear):
        model.lm_head = RefinedHead(linear_layer(head.weight, head.bias, fmt), head.weight)
    elif head is None and isinstance(embed, nn.Embedding):  # tied: the head reads the table
        model.lm_head = RefinedHead(linear_layer(embed.weight, None, fmt), embed.weight)
    return model


def _scoring(table: nn.Module, fmt: str, scorer: HeadScorer | None) -> nn.Module:
    built = scorer.result(table) if scorer is not None else None
    return built if built is not None else table_layer(table, fmt)

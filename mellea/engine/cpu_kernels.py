"""C++ ops for the CPU path: decode attention read straight from the paged KV cache,
RMSNorm fused with its residual add, and linear layers over int8 and int4 weights.

The PyTorch decode path gathers each layer's KV blocks into a padded copy and runs
SDPA on it: at 32 sequences of a few hundred tokens that copy is ~15 MB per layer
and step, written and read again. :func:`paged_decode` reads K and V where they lie,
through the block tables: one task per sequence scores its query heads against
the keys, takes the softmax and sums the values, in fp32 whatever the
cache's dtype (fp32, bf16, fp16). :func:`rms_norm` does in one pass what took
PyTorch six small ops (add, square, mean, rsqrt, two multiplies).
:func:`int8_linear` and :func:`int4_linear` multiply fp32 activations by quantized
weights widened to fp32 in registers (AVX-512 where the CPU has it, plain loops the
compiler vectorizes elsewhere): a decode step reads a quarter or an eighth of the
fp32 weights' bytes, and nothing but the weights is rounded. On a CPU with
AVX512-VNNI, :func:`int4_vnni_linear` multiplies int4 weights on the integer dot
product instead, about 4x fewer instructions, with each group of 32 activations
held to about 16 bits (two int8 parts).

They are compiled on first use with the C++ compiler PyTorch's extensions use
(20-30 s on 2 busy cores; the build is cached under ``TORCH_EXTENSIONS_DIR``, by
default ``~/.cache/torch_extensions``, so later processes only load it). Where
that fails, or with ``MELLEA_CPU_KERNEL=0``, :func:`available` is False and the
model keeps its PyTorch path.
"""

from __future__ import annotations

import hashlib
import logging
import os
import platform
import tempfile
import threading
from pathlib import Path
from typing import Any

import torch

log = logging.getLogger(__name__)

_SOURCE_FILE = Path(__file__).with_suffix(".cpp")  # the ops, in C++

_lock = threading.Lock()
_state: dict[str, bool] = {}


def _cpu_flags() -> str:
    """The CPU's feature flags as Linux lists them (empty elsewhere)."""
    try:
        with open("/proc/cpuinfo") as f:
            return next((line for line in f if line.startswith("flags")), "")
    except OSError:
        return platform.machine()


def _build() -> bool:
    """Compile and load the kernel once per process; False where that is not possible."""
    from torch.utils import cpp_extension

    # -march=native: a build is only valid for this CPU's instruction set, so the name
    # (hence the cached build) depends on it too, in case the cache dir is shared.
    source_text = _SOURCE_FILE.read_text()
    digest = hashlib.sha256((source_text + _cpu_flags()).encode()).hexdigest()[:12]
    name = f"mellea_cpu_kernels_{digest}"
    src_dir = Path(tempfile.gettempdir()) / "mellea_cpu_kernels"
    src_dir.mkdir(parents=True, exist_ok=True)
    source = src_dir / f"{name}.cpp"
    if not source.exists():
        tmp = source.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(source_text)
        tmp.replace(source)
    cpp_extension.load(
        name=name,
        sources=[str(source)],
        extra_cflags=["-O3", "-march=native", "-fopenmp"],
        is_python_module=False,
        verbose=False,
    )
    return True


def available() -> bool:
    """Whether the kernel is (or can now be) loaded; builds it on the first call."""
    if os.environ.get("MELLEA_CPU_KERNEL") == "0":
        return False
    with _lock:
        if "ok" not in _state:
            try:
                _state["ok"] = _build()
            except Exception as exc:  # no compiler, no headers, a failing build: fall back
                log.warning("C++ CPU ops unavailable (%s); using the PyTorch path", exc)
                _state["ok"] = False
        return _state["ok"]


def paged_decode(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    scale: float,
    window: int | None,
) -> torch.Tensor:
    """Decode attention over the paged cache: ``q`` [B, Hq, D] -> [B, Hq, D].

    ``k_cache``/``v_cache``: [blocks, block_size, Hk, D]; ``block_tables`` [B, width]
    int32; ``context_lens`` [B] int32 (the current token included); ``window``: each
    query sees its last ``window`` positions (None: all). Call :func:`available` first.
    """
    dtype = q.dtype
    if dtype != k_cache.dtype:  # e.g. activations of another precision than the cache
        q = q.to(k_cache.dtype)
    if q.stride(2) != 1 or q.stride(1) != q.shape[2]:
        q = q.contiguous()
    out = torch.ops.mellea_cpu.paged_decode(
        q, k_cache, v_cache, block_tables, context_lens, scale, window or 0
    )
    return out.to(dtype)


def rms_norm(
    x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None
) -> torch.Tensor:
    """RMSNorm of ``x`` [T, H] (plus ``residual``, which becomes x + residual in place),
    with the rounding of :func:`mellea.engine.kernels.rms_norm.rms_norm_ref`."""
    if residual is not None and (residual.dtype != x.dtype or not residual.is_contiguous()):
        residual.add_(x)  # mixed precisions: the add as PyTorch promotes it, then the norm
        x, residual = residual, None
    if weight.dtype != x.dtype:
        weight = weight.to(x.dtype)
    if x.stride(-1) != 1:
        x = x.contiguous()
    return torch.ops.mellea_cpu.rms_norm(x, residual, weight, eps)


def int8_linear(x: torch.Tensor, qweight: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """``x`` [M, K] fp32 @ (``qweight`` [N, K] int8 * ``scale`` [N])^T -> [M, N] fp32, the
    weights widened to fp32 in registers. Call :func:`available` first."""
    if not x.is_contiguous():
        x = x.contiguous()
    return torch.ops.mellea_cpu.int8_linear(x, qweight, scale)


def int4_linear(
    x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, mins: torch.Tensor
) -> torch.Tensor:
    """``x`` [M, K] fp32 @ W^T -> [M, N] fp32 for 4-bit weights in groups of 32
    (:func:`mellea.engine.quant.quantize_groups` gives the layout). Call
    :func:`available` first."""
    if not x.is_contiguous():
        x = x.contiguous()
    return torch.ops.mellea_cpu.int4_linear(x, qweight, scales, mins)


def int4_dequantize(
    qweight: torch.Tensor, scales: torch.Tensor, mins: torch.Tensor
) -> torch.Tensor:
    """The fp32 weight [N, K] that :func:`int4_linear`'s operands stand for."""
    return torch.ops.mellea_cpu.int4_dequantize(qweight, scales, mins)


def int4_vnni_supported() -> bool:
    """Whether the kernels are built with :func:`int4_vnni_linear` (AVX512-VNNI)."""
    return available() and bool(torch.ops.mellea_cpu.int4_vnni_supported())


def int4_vnni_linear(
    x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, mins: torch.Tensor, n: int
) -> torch.Tensor:
    """``x`` [M, K] fp32 @ W^T -> [M, N] fp32 for 4-bit weights in tiles of 16 rows
    (:func:`mellea.engine.quant.tile_groups`) on VNNI's integer dot product: each group
    of 32 activations becomes two int8 parts (x ~= step * (256 hi + lo), about 16
    bits). Check :func:`int4_vnni_supported` first."""
    if not x.is_contiguous():
        x = x.contiguous()
    return torch.ops.mellea_cpu.int4_vnni_linear(x, qweight, scales, mins, n)


def int8_vnni_linear(
    x: torch.Tensor, qweight: torch.Tensor, wsum: torch.Tensor, scale: torch.Tensor, n: int
) -> torch.Tensor:
    """``x`` [M, K] fp32 @ W^T -> [M, N] fp32 for per-row int8 weights in tiles of 16 rows
    (:func:`mellea.engine.quant.tile_rows`) on VNNI's integer dot product, with the
    activations in two int8 parts per group of 32 as :func:`int4_vnni_linear` has them.
    Check :func:`int4_vnni_supported` first (the same instructions)."""
    if not x.is_contiguous():
        x = x.contiguous()
    return torch.ops.mellea_cpu.int8_vnni_linear(x, qweight, wsum, scale, n)


def int4_vnni_dequantize(
    qweight: torch.Tensor, scales: torch.Tensor, mins: torch.Tensor, n: int
) -> torch.Tensor:
    """The fp32 weight [N, K] that :func:`int4_vnni_linear`'s operands stand for."""
    return torch.ops.mellea_cpu.int4_vnni_dequantize(qweight, scales, mins, n)


def decode_layer(
    x: torch.Tensor,
    residual: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    rope: torch.Tensor,
    meta: Any,
    attn_norm: torch.Tensor,
    mlp_norm: torch.Tensor,
    weights: list[torch.Tensor],
    out_features: list[int],
    heads: int,
    kv_heads: int,
    eps: float,
    scale: float,
    window: int,
) -> torch.Tensor:
    """One Llama-shaped decoder layer of a decode-only step in a single op: x [T, H] fp32
    -> the MLP's output [T, H]; ``residual`` becomes x + residual in place, this step's
    K and V go into the caches. ``weights``: (qweight, scales, mins) of the qkv, o,
    gate|up and down :class:`~mellea.engine.quant.Int4Linear` layers (VNNI layout);
    ``rope``: this step's complex rotations; ``meta``: the step's
    :class:`~mellea.engine.cpu_attention.AttentionMetadata`. See
    :meth:`mellea.engine.model.DecoderModel.forward` for who may call it."""
    return torch.ops.mellea_cpu.decode_layer(
        x,
        residual,
        attn_norm,
        mlp_norm,
        weights,
        out_features,
        k_cache,
        v_cache,
        torch.view_as_real(rope),
        meta.slot_mapping,
        meta.decode_block_tables,
        meta.decode_context_lens,
        heads,
        kv_heads,
        eps,
        scale,
        window,
    )


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """``silu(gate) * up`` of a fused [gate | up] ``x`` [..., 2I] fp32 -> [..., I] in one op."""
    rows = x.reshape(-1, x.shape[-1])  # the op takes [T, 2I]; leading dims are rows
    if not rows.is_contiguous():
        rows = rows.contiguous()
    return torch.ops.mellea_cpu.silu_and_mul(rows).view(*x.shape[:-1], x.shape[-1] // 2)


def top_k(x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(values, indices) of the ``k`` largest of each row of ``x`` [M, N] fp32, largest
    first; among equal values the first index first, so ``k == 1`` is the index that
    ``x.max(-1)`` gives. 10x faster than ``torch.topk`` and ``max`` on a
    vocabulary-wide row. Call :func:`available` first."""
    if not x.is_contiguous():
        x = x.contiguous()
    return torch.ops.mellea_cpu.top_k(x, k)


def rope_store_kv(
    qkv: torch.Tensor,
    rope: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slots: torch.Tensor,
    heads: int,
    kv_heads: int,
) -> None:
    """Rotate q and k in place in ``qkv`` [T, (heads + 2 kv_heads) * D] (fp32, pairs of
    dims adjacent) by ``rope`` (complex [T, ..., D / 2]), and write this step's K and V
    rows into the caches at ``slots`` (the PyTorch path's complex multiply and two
    ``index_copy_``)."""
    torch.ops.mellea_cpu.rope_store_kv(
        qkv, torch.view_as_real(rope), k_cache, v_cache, slots, heads, kv_heads
    )

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

Each CPU family gets its own build of the C++ sources (``cpu_ops/``, see :data:`FAMILIES`):
``avx512-vnni`` (AVX512F/BW/VL/VNNI), ``avx2`` (x86-64-v3: AVX2, FMA, F16C; most
laptops, desktops and cloud VMs), ``neon-dotprod`` (aarch64 with the Armv8.2 dot
product: Apple Silicon, AWS Graviton 2 and later, Raspberry Pi 5) and ``generic``
(plain C++). All keep the weights in the same layouts, so a model loads the same way
whichever runs. :func:`family` picks the best one this CPU can run, or the one
``MELLEA_CPU_ISA`` names (``avx512``, ``avx2``, ``neon``, ``generic``; e.g. to run the
AVX2 path on an AVX-512 machine).

The builds are made ahead of time, when the project is installed (``make install``
runs ``python -m mellea.engine.cpu_build``; it needs a C++ compiler and Python's
headers there, not at the user's first start), into ``mellea/engine/_cpu_ext/``. A
process loads the prebuilt library of its family; where there is none (or it was
built for another torch), it compiles that family once on first use instead (20-30 s on
2 busy cores, cached under ``TORCH_EXTENSIONS_DIR``). Where that fails too, or with
``MELLEA_CPU_KERNEL=0``, :func:`available` is False and the model keeps its PyTorch
path.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

import torch

from mellea.engine import cpu_build
from mellea.engine.switches import read_switches

log = logging.getLogger(__name__)

FAMILIES = cpu_build.FAMILIES
cpu_runs = cpu_build.cpu_runs
ISA_ENV = "MELLEA_CPU_ISA"  # read here only: which family to run, forced
_ISA_NAMES = {
    "avx512": "avx512-vnni",
    "avx512-vnni": "avx512-vnni",
    "avx2": "avx2",
    "neon": "neon-dotprod",
    "neon-dotprod": "neon-dotprod",
    "generic": "generic",
}

_lock = threading.Lock()
_loaded: dict[str, bool] = {}  # family -> whether its build loaded
_current: list[str] = []  # the family the ops below call (set by select)


def runnable_families() -> list[str]:
    """The families this CPU can execute, fastest first (``generic`` always)."""
    return [f for f in FAMILIES if cpu_build.cpu_runs(f)]


def _chosen() -> str:
    """The family to run: ``MELLEA_CPU_ISA``'s when set (and runnable), else the best."""
    runnable = runnable_families()
    wanted = os.environ.get(ISA_ENV, "").strip().lower()
    if wanted:
        name = _ISA_NAMES.get(wanted)
        if name is None:
            log.warning("%s=%s is not one of avx512, avx2, neon, generic; ignored", ISA_ENV, wanted)
        elif name not in runnable:
            log.warning("%s=%s: this CPU cannot run it; using %s", ISA_ENV, wanted, runnable[0])
        else:
            return name
    return runnable[0]


def _load(fam: str) -> bool:
    """Load ``fam``'s build (prebuilt, else compiled now) once; False where impossible."""
    if fam not in _loaded:
        try:
            cpu_build.load(fam)
            _loaded[fam] = True
        except Exception as exc:  # no compiler, no headers, a failing build: fall back
            log.warning("C++ CPU ops (%s) unavailable (%s); using the PyTorch path", fam, exc)
            _loaded[fam] = False
    return _loaded[fam]


def available() -> bool:
    """Whether the kernels are (or can now be) loaded; loads them on the first call."""
    if not read_switches().cpu_kernel:
        return False
    with _lock:
        if not _current:
            _current.append(_chosen())
        return _load(_current[0])


def family() -> str:
    """The kernel family the ops run: ``avx512-vnni``, ``avx2``, ``neon-dotprod`` or
    ``generic``; ``none`` where the C++ ops are unavailable."""
    if not available():
        return "none"
    return _current[0] if _current else _chosen()


def select(fam: str) -> str:
    """Run ``fam``'s build from now on (tests run each family the CPU can execute);
    returns the family that ran before. ``ValueError`` where this CPU cannot run it,
    ``RuntimeError`` where it cannot be loaded."""
    if fam not in runnable_families():
        raise ValueError(f"this CPU cannot run the {fam} kernels")
    available()
    with _lock:
        if not _load(fam):
            raise RuntimeError(f"the {fam} kernels could not be loaded")
        before = _current[0] if _current else fam
        _current[:] = [fam]
    return before


def avx2_dot(kind: str = "") -> str:
    """The integer dot product the AVX2 build's int4/int8 tiles use: ``maddubs`` (any
    AVX2 CPU), ``avx-vnni`` (the default where the CPU has AVX-VNNI) or
    ``avx512vl-vnni`` (the same operation in AVX-512's encoding: how an AVX-512 machine
    tests the VNNI tiles of the AVX2 build). ``kind`` switches it where the CPU runs it
    (``RuntimeError`` otherwise); returns the one in use. Call with the AVX2 family
    selected."""
    return _ops().avx2_dot(kind)


def _ops() -> Any:
    """The op namespace of the family in use."""
    return getattr(torch.ops, cpu_build.namespace(_current[0]))


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

    ``k_cache``/``v_cache``: [blocks, block_size, Hk, D], fp32, bf16 or fp16 (an fp32
    ``q`` reads a half-width cache as it is); ``block_tables`` [B, width] int32;
    ``context_lens`` [B] int32 (the current token included); ``window``: each query sees
    its last ``window`` positions (None: all). Call :func:`available` first.
    """
    dtype = q.dtype
    if dtype not in (k_cache.dtype, torch.float32):  # activations of another precision
        q = q.to(k_cache.dtype)
    if q.stride(2) != 1 or q.stride(1) != q.shape[2]:
        q = q.contiguous()
    out = _ops().paged_decode(q, k_cache, v_cache, block_tables, context_lens, scale, window or 0)
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
    return _ops().rms_norm(x, residual, weight, eps)


def int8_linear(x: torch.Tensor, qweight: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """``x`` [M, K] fp32 @ (``qweight`` [N, K] int8 * ``scale`` [N])^T -> [M, N] fp32, the
    weights widened to fp32 in registers. Call :func:`available` first."""
    if not x.is_contiguous():
        x = x.contiguous()
    return _ops().int8_linear(x, qweight, scale)


def int4_linear(
    x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, mins: torch.Tensor
) -> torch.Tensor:
    """``x`` [M, K] fp32 @ W^T -> [M, N] fp32 for 4-bit weights in groups of 32
    (:func:`mellea.engine.formats.quantize.quantize_groups` gives the layout). Call
    :func:`available` first."""
    if not x.is_contiguous():
        x = x.contiguous()
    return _ops().int4_linear(x, qweight, scales, mins)


def int4_dequantize(
    qweight: torch.Tensor, scales: torch.Tensor, mins: torch.Tensor
) -> torch.Tensor:
    """The fp32 weight [N, K] that :func:`int4_linear`'s operands stand for."""
    return _ops().int4_dequantize(qweight, scales, mins)


def int4_vnni_linear(
    x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, mins: torch.Tensor, n: int
) -> torch.Tensor:
    """``x`` [M, K] fp32 @ W^T -> [M, N] fp32 for 4-bit weights in tiles of 16 rows
    (:func:`mellea.engine.formats.tiles.tile_groups`) on VNNI's integer dot product: each group
    of 32 activations becomes two int8 parts (x ~= step * (256 hi + lo), about 16
    bits). Every kernel family runs it (the name is the instruction it was written for).
    Call :func:`available` first."""
    if not x.is_contiguous():
        x = x.contiguous()
    return _ops().int4_vnni_linear(x, qweight, scales, mins, n)


def q4k_vnni_linear(
    x: torch.Tensor, qweight: torch.Tensor, sub: torch.Tensor, super_: torch.Tensor, n: int
) -> torch.Tensor:
    """:func:`int4_vnni_linear` for a GGUF's Q4_K weights exactly
    (:func:`mellea.engine.formats.tiles.tile_q4k`): each group's scale ``d * sc`` and minimum
    ``-dmin * m`` formed in fp32 from the file's 6-bit ``sc``, ``m`` (``sub``) and fp16
    ``d``, ``-dmin`` (``super_``), where :func:`int4_vnni_linear` reads them rounded to
    fp16. Call :func:`available` first."""
    if not x.is_contiguous():
        x = x.contiguous()
    return _ops().q4k_vnni_linear(x, qweight, sub, super_, n)


def q4k_vnni_dequantize(
    qweight: torch.Tensor, sub: torch.Tensor, super_: torch.Tensor, n: int
) -> torch.Tensor:
    """The fp32 weight [N, K] that :func:`q4k_vnni_linear`'s operands stand for: the
    ``gguf`` package's dequantized values, bit for bit."""
    return _ops().q4k_vnni_dequantize(qweight, sub, super_, n)


def int8_vnni_linear(
    x: torch.Tensor, qweight: torch.Tensor, wsum: torch.Tensor, scale: torch.Tensor, n: int
) -> torch.Tensor:
    """``x`` [M, K] fp32 @ W^T -> [M, N] fp32 for per-row int8 weights in tiles of 16 rows
    (:func:`mellea.engine.formats.tiles.tile_rows`) on VNNI's integer dot product, with the
    activations in two int8 parts per group of 32 as :func:`int4_vnni_linear` has them.
    Call :func:`available` first."""
    if not x.is_contiguous():
        x = x.contiguous()
    return _ops().int8_vnni_linear(x, qweight, wsum, scale, n)


def bytes_linear(
    x: torch.Tensor, qweight: torch.Tensor, subs: torch.Tensor, supers: torch.Tensor, n: int
) -> torch.Tensor:
    """``x`` [M, K] fp32 @ W^T -> [M, N] fp32 for a GGUF's block weights held exactly in
    the byte form (:func:`mellea.engine.formats.tiles.tile_bytes`: the file's integer values as
    bytes, a scale per sub-block of 16, ``d`` and ``dmin`` per super-block), or in its
    six-bit packing (:func:`mellea.engine.formats.tiles.pack_six`, ``qweight`` [T, G, 6, 64]),
    on the integer dot product, with the activations in two int8 parts per group of 32
    as :func:`int4_vnni_linear` has them. Call :func:`available` first."""
    if not x.is_contiguous():
        x = x.contiguous()
    return _ops().bytes_linear(x, qweight, subs, supers, n)


def bytes_dequantize(
    qweight: torch.Tensor, subs: torch.Tensor, supers: torch.Tensor, n: int
) -> torch.Tensor:
    """The fp32 weight [N, K] that :func:`bytes_linear`'s operands stand for: the ``gguf``
    package's dequantized values, bit for bit."""
    return _ops().bytes_dequantize(qweight, subs, supers, n)


def six_to_bytes(qweight: torch.Tensor) -> torch.Tensor:
    """The six-bit form's values [T, G, 6, 64] (:func:`mellea.engine.formats.tiles.pack_six`) in
    the byte form's layout [T, G, 8, 64] (``q + 128``), as the tiles rebuild them."""
    return _ops().six_to_bytes(qweight)


def bytes_to_six(qweight: torch.Tensor, n: int) -> torch.Tensor | None:
    """:func:`mellea.engine.formats.tiles.pack_six` in C++ (the same bytes), ``None`` where a
    value of the ``n`` real rows does not fit 6 bits."""
    six = _ops().bytes_to_six(qweight, n)
    return six if six.numel() else None


def int4_vnni_dequantize(
    qweight: torch.Tensor, scales: torch.Tensor, mins: torch.Tensor, n: int
) -> torch.Tensor:
    """The fp32 weight [N, K] that :func:`int4_vnni_linear`'s operands stand for."""
    return _ops().int4_vnni_dequantize(qweight, scales, mins, n)


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
    lora: list[torch.Tensor] | None = None,
    lora_slots: torch.Tensor | None = None,
) -> torch.Tensor:
    """One Llama-shaped decoder layer of a decode-only step in a single op: x [T, H] fp32
    -> the MLP's output [T, H]; ``residual`` becomes x + residual in place, this step's
    K and V go into the caches. ``weights``: (qweight, scales, mins) of the qkv, o,
    gate|up and down :class:`~mellea.engine.formats.linear.Int4Linear` layers (VNNI layout;
    or any tiled form ``model._fused_operands`` gives), the qkv one in one or two parts
    (``out_features`` then has 5 sizes: a :class:`~mellea.engine.formats.linear.StackedLinear`);
    ``rope``: this step's complex rotations; ``meta``: the step's
    :class:`~mellea.engine.cpu_attention.AttentionMetadata`. With ``lora`` (the layer's
    packs, :func:`mellea.engine.lora.pack_fused` of each projection, flattened) each
    projection adds the low-rank deltas of its rows' adapters (``lora_slots``: [T]
    int32, -1 for the base), as :func:`lora_add` does. See
    :meth:`mellea.engine.model.DecoderModel.forward` for who may call it."""
    return _ops().decode_layer(
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
        lora or [],
        lora_slots,
    )


def lora_add(
    out: torch.Tensor,
    x: torch.Tensor,
    a: torch.Tensor,
    bt: torch.Tensor,
    segs: torch.Tensor,
    lora_slots: torch.Tensor,
) -> None:
    """``out`` [T, N] fp32 += B (A ``x[t]``) in place for each row t with an adapter
    (``lora_slots`` [T] int32; -1: none), each adapter's rows multiplied together, for
    one projection's pack (``a``, ``bt``, ``segs``: see
    :func:`mellea.engine.lora.pack_fused`). Call :func:`available` first."""
    if not x.is_contiguous():
        x = x.contiguous()
    _ops().lora_add(out, x, a, bt, segs, lora_slots)


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """``silu(gate) * up`` of a fused [gate | up] ``x`` [..., 2I] fp32 -> [..., I] in one op."""
    rows = x.reshape(-1, x.shape[-1])  # the op takes [T, 2I]; leading dims are rows
    if not rows.is_contiguous():
        rows = rows.contiguous()
    return _ops().silu_and_mul(rows).view(*x.shape[:-1], x.shape[-1] // 2)


def top_k(x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(values, indices) of the ``k`` largest of each row of ``x`` [M, N] fp32, largest
    first; among equal values the first index first, so ``k == 1`` is the index that
    ``x.max(-1)`` gives. 10x faster than ``torch.topk`` and ``max`` on a
    vocabulary-wide row. Call :func:`available` first."""
    if not x.is_contiguous():
        x = x.contiguous()
    return _ops().top_k(x, k)


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
    rows into the caches at ``slots``, rounded to the caches' dtype (fp32, bf16 or fp16)
    (the PyTorch path's complex multiply and two ``index_copy_``)."""
    _ops().rope_store_kv(qkv, torch.view_as_real(rope), k_cache, v_cache, slots, heads, kv_heads)


def tile_int4_weights(
    packed: torch.Tensor, scales: torch.Tensor, mins: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`mellea.engine.formats.tiles.tile_groups` in one pass of C++ (the same bytes; the
    load's repacking, not a kernel of the step). Call :func:`available` first."""
    return _ops().tile_int4_weights(packed.contiguous(), scales.contiguous(), mins.contiguous())


def tile_int8_weights(
    q: torch.Tensor, scale: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`mellea.engine.formats.tiles.tile_rows` in one pass of C++ (the same bytes). Call
    :func:`available` first."""
    return _ops().tile_int8_weights(q.contiguous(), scale.float().contiguous())


def tile_q4k_weights(
    packed: torch.Tensor, sub: torch.Tensor, super_: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`mellea.engine.formats.tiles.tile_q4k` in one pass of C++ (the same bytes). Call
    :func:`available` first."""
    return _ops().tile_q4k_weights(packed.contiguous(), sub.contiguous(), super_.contiguous())


def q4_k_exact(raw: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A Q4_K tensor's bytes [rows, row bytes] (uint8) as
    :class:`mellea.engine.gguf_blocks.Q4KGroups`, the same bytes as
    :func:`mellea.engine.gguf_blocks.to_q4k` gives, in one pass of C++. Call
    :func:`available` first."""
    return _ops().q4_k_exact(raw.contiguous())


def q4_k_groups(raw: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A Q4_K tensor's bytes [rows, row bytes] (uint8) as int4 groups, the same bytes as
    :func:`mellea.engine.gguf_blocks.to_int4` gives, in one pass of C++. Call
    :func:`available` first."""
    return _ops().q4_k_groups(raw.contiguous())


def gguf_int8_rows(raw: torch.Tensor, k_quant: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """A Q6_K (``k_quant``) or Q8_0 tensor's bytes [rows, row bytes] (uint8) as per-row
    int8 and scales: :func:`mellea.engine.formats.quantize.quantize_rows` of its exact values, the
    same bytes, in one pass of C++ with no float32 copy. Call :func:`available` first."""
    return _ops().gguf_int8_rows(raw.contiguous(), int(k_quant))


def gguf_byte_rows(
    raw: torch.Tensor, qtype: str
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A Q8_0, Q6_K, Q4_K or Q5_K tensor's bytes [rows, row bytes] (uint8; ``qtype`` its
    type's name) in the byte form, untiled: the same arrays as
    :func:`mellea.engine.gguf_blocks.to_byte_blocks` gives, in one pass of C++. Call
    :func:`available` first."""
    return _ops().gguf_byte_rows(raw.contiguous(), qtype)

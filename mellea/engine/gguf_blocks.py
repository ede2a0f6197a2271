"""GGUF block formats turned into the engine's weight formats, one tensor at a time.

What each format becomes (see docs/engine.md, "Loading"):

* ``Q4_0`` and ``Q4_1`` (blocks of 32, an fp16 scale, Q4_1 an fp16 minimum too) are
  our int4 groups exactly: the nibbles are copied as they are (ggml packs a block as
  we pack a group), the scale kept, the minimum ``-8 * scale`` for Q4_0 (exact in fp16).
* ``Q4_K`` (super-blocks of 256: fp16 ``d`` and ``dmin``, eight sub-blocks of 32 with
  6-bit scales and minimums) is served as it is (:class:`Q4KGroups`, :func:`to_q4k`):
  our int4 groups' nibbles, each group's ``sc`` and ``m``, each block's ``d`` and
  ``-dmin``; the kernel forms the group's scale ``d * sc`` and minimum ``-dmin * m`` in
  fp32, where they are exact, so the weights are the file's exactly. (:func:`to_int4`
  still gives the older form, those products rounded to fp16, for a layer whose pieces
  mix Q4_K with Q4_0 or Q4_1.)
* ``Q8_0``, ``Q5_K`` and ``Q6_K`` (and ``Q4_0``/``Q4_K`` pieces of a layer beside
  them) served in int4 or int8 are :class:`ByteBlocks` exactly: the file's integer
  values as bytes, its scales per sub-block of 16 and ``d`` (``dmin``) per block, for
  ``cpu_kernels.bytes_linear``.
* ``Q5_0``, ``Q5_1``, ``Q3_K``, ``IQ4_NL`` and ``IQ4_XS`` (and ``Q4_1`` beside them) are
  :class:`ByteBlocks` too, decoded by :mod:`mellea.engine.gguf_values` into integers
  and factors whose products are exact; ``Q2_K``, whose minimums are per 16, is the
  byte form of its products plus each sub-block's minimum (:func:`split_minimums`).
* ``F16``, ``BF16`` and ``F32`` matrices (and every type where the C++ kernels do not
  run) are widened to float32 exactly, a few thousand rows at a time (through
  :class:`Int8Blocks` where the type has that form, else by the ``gguf`` package's
  reference dequantizer). A type of no exact form here (IQ1, IQ2, IQ3, TQ: not in
  :data:`SERVED_TYPES`) served in int8 is requantized per output row from those rows.

Tables read a row at a time (the token embedding, and an LM head's exact rows) are
kept as :class:`Int8Blocks` where the type allows (:data:`INT8_BLOCK_TYPES`): the
file's integer values in int8 and an fp32 scale (and offset) per block of 16 or 32,
which widen to exactly what the reference dequantizer gives, at about a quarter of a
float32 table's memory.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
from gguf.quants import dequantize

from mellea.engine.gguf_values import DECODED_TYPES, Decoded, decode

GROUP = 32  # elements per int4 group (formats.quantize.GROUP; not imported to keep torch out)
# Block formats that our int4 layers hold exactly (Q4_K in its own form, Q4KGroups).
INT4_TYPES = frozenset(
    {GGMLQuantizationType.Q4_0, GGMLQuantizationType.Q4_1, GGMLQuantizationType.Q4_K}
)


class Int4Groups(NamedTuple):
    """Int4 groups of 32 along each row, ``formats.quantize.quantize_groups``' layout: packed
    [rows, K/2] uint8 (byte ``16 g + j``: element ``j`` of group ``g`` low, ``j + 16``
    high), scales and minimums [rows, K/32] fp16; ``w = q * scale + min``."""

    packed: np.ndarray
    scales: np.ndarray
    mins: np.ndarray


def blocks(raw: np.ndarray, qtype: GGMLQuantizationType) -> np.ndarray:
    """A tensor's bytes [rows, row bytes] as blocks [rows, blocks per row, block bytes]."""
    type_size = GGML_QUANT_SIZES[qtype][1]
    rows = raw.shape[0]
    return raw.reshape(rows, -1, type_size)


def _fp16(block: np.ndarray, start: int) -> np.ndarray:
    """The fp16 field at byte ``start`` of each block, as fp16 [..., blocks]."""
    return np.ascontiguousarray(block[..., start : start + 2]).view(np.float16)[..., 0]


def to_int4(raw: np.ndarray, qtype: GGMLQuantizationType) -> Int4Groups:
    """A Q4_0, Q4_1 or Q4_K tensor's bytes [rows, row bytes] as int4 groups."""
    if qtype == GGMLQuantizationType.Q4_K:
        return _q4_k_to_int4(blocks(raw, qtype))
    if qtype not in _Q4_FIELDS:
        raise ValueError(f"{qtype.name} is not a 4-bit block format")
    # The blocks as records: numpy gathers each field with a copy loop of its own
    # item size (half the time of slicing bytes out of [..., block bytes]).
    fields = np.ascontiguousarray(raw).view(_Q4_FIELDS[qtype])
    scales = np.ascontiguousarray(fields["d"])
    if qtype == GGMLQuantizationType.Q4_0:
        mins = (scales.astype(np.float32) * -8).astype(np.float16)
    else:
        mins = np.ascontiguousarray(fields["m"])
    return Int4Groups(np.ascontiguousarray(fields["q"]).reshape(raw.shape[0], -1), scales, mins)


# Q4_0's and Q4_1's blocks of 32 weights: fp16 d (and m), then 16 bytes of nibbles.
_Q4_FIELDS = {
    GGMLQuantizationType.Q4_0: np.dtype([("d", "<f2"), ("q", "u1", (16,))]),
    GGMLQuantizationType.Q4_1: np.dtype([("d", "<f2"), ("m", "<f2"), ("q", "u1", (16,))]),
}


def _q4_k_scales(scales: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The eight 6-bit scales and minimums packed in a Q4_K block's 12 bytes
    [..., 12] -> two [..., 8] arrays (ggml's ``get_scale_min_k4``)."""
    low, high, extra = scales[..., 0:4], scales[..., 4:8], scales[..., 8:12]
    sc = np.concatenate([low & 0x3F, (extra & 0x0F) | ((low >> 2) & 0x30)], axis=-1)
    mn = np.concatenate([high & 0x3F, (extra >> 4) | ((high >> 2) & 0x30)], axis=-1)
    return sc, mn


def _q4_k_to_int4(b: np.ndarray) -> Int4Groups:
    """Q4_K blocks [rows, n, 144] -> int4 groups (8 per block)."""
    rows = b.shape[0]
    scales, offsets = _k_scales(b)  # exact in fp32, rounded to fp16 here
    return Int4Groups(
        _q4_k_packed(b),
        scales.astype(np.float16).reshape(rows, -1),
        offsets.astype(np.float16).reshape(rows, -1),
    )


def _q4_k_packed(b: np.ndarray) -> np.ndarray:
    """Q4_K blocks' nibbles [rows, n, 144] as our int4 groups' packing [rows, n * 128]."""
    rows, n = b.shape[:2]
    # 128 bytes of nibbles: for each 64 elements, 32 bytes whose low nibbles are the
    # first sub-block of 32 and high nibbles the second, element by element. Ours
    # packs element j of a group with element j + 16, so in 8-byte words (x: bytes
    # 0-15 of the 32, y: bytes 16-31) the first group is x's low nibbles below y's,
    # the second x's high nibbles below y's: four word-wide operations, not byte-wise.
    words = np.ascontiguousarray(b[..., 16:]).view(np.uint64).reshape(rows, n, 4, 2, 2)
    x, y = words[..., 0, :], words[..., 1, :]
    low = np.uint64(0x0F0F0F0F0F0F0F0F)
    packed = np.empty((rows, n, 4, 2, 2), np.uint64)  # [.., 64 elements, group, word]
    np.bitwise_or(x & low, (y & low) << np.uint64(4), out=packed[..., 0, :])
    np.bitwise_or((x >> np.uint64(4)) & low, y & ~low, out=packed[..., 1, :])
    return packed.view(np.uint8).reshape(rows, -1)


class Q4KGroups(NamedTuple):
    """A Q4_K tensor's values as the file holds them, row by row: ``packed`` [rows, K/2]
    uint8 as :class:`Int4Groups` packs nibbles; ``sub_scales`` [rows, K/32, 2] uint8, each
    group's 6-bit ``sc`` and ``m``; ``super_scales`` [rows, K/256, 2] fp16, each block's
    ``d`` and ``-dmin``. ``w = q * (d * sc) + (-dmin) * m``, the products formed in fp32
    (exact there: 11 bits times 6), which is the reference dequantizer's value bit for
    bit (:func:`q4k_values`)."""

    packed: np.ndarray
    sub_scales: np.ndarray
    super_scales: np.ndarray


def to_q4k(raw: np.ndarray) -> Q4KGroups:
    """A Q4_K tensor's bytes [rows, row bytes] as :class:`Q4KGroups` (NumPy; the C++
    ``q4_k_exact`` gives the same bytes in one pass)."""
    b = blocks(raw, GGMLQuantizationType.Q4_K)
    rows, n = b.shape[:2]
    sc, mn = _q4_k_scales(b[..., 4:16])
    sub = np.stack([sc, mn], axis=-1).reshape(rows, n * 8, 2)
    factors = np.stack([_fp16(b, 0), -_fp16(b, 2)], axis=-1).reshape(rows, n, 2)
    return Q4KGroups(_q4_k_packed(b), np.ascontiguousarray(sub), np.ascontiguousarray(factors))


def q4k_factors(groups: Q4KGroups) -> tuple[np.ndarray, np.ndarray]:
    """Each group's scale ``d * sc`` and minimum ``-dmin * m`` in fp32 [rows, K/32] (exact)."""
    d = np.repeat(groups.super_scales.astype(np.float32), 8, axis=1)  # [rows, K/32, 2]
    products = d * groups.sub_scales.astype(np.float32)
    return products[..., 0], products[..., 1]


def q4k_values(groups: Q4KGroups) -> np.ndarray:
    """:class:`Q4KGroups` as float32 [rows, K]: the reference dequantizer's values."""
    rows = groups.packed.shape[0]
    packed = groups.packed.reshape(rows, -1, 16)
    q = np.concatenate([packed & 0x0F, packed >> 4], axis=-1).astype(np.float32)
    scale, low = q4k_factors(groups)
    return (q * scale[..., None] + low[..., None]).reshape(rows, -1)


def q4k_to_int4(groups: Q4KGroups) -> Int4Groups:
    """:class:`Q4KGroups` in the fp16 form (:func:`to_int4`'s for Q4_K: each factor rounded
    to fp16), for a layer whose other pieces are Q4_0 or Q4_1."""
    scale, low = q4k_factors(groups)
    return Int4Groups(groups.packed, scale.astype(np.float16), low.astype(np.float16))


class Int8Blocks(NamedTuple):
    """A table as int8 values [rows, K] with an fp32 scale per block of ``block``
    along each row [rows, K / block] and, for the formats with one, an fp32 offset of
    the same shape: ``w = q * scale (+ offset)``, computed in fp32 as the ``gguf``
    package's dequantizer computes it (so bit for bit the same)."""

    q: np.ndarray
    scales: np.ndarray
    offsets: np.ndarray | None
    block: int


# Block formats that Int8Blocks holds exactly.
INT8_BLOCK_TYPES = (
    frozenset(
        {
            GGMLQuantizationType.Q4_0,
            GGMLQuantizationType.Q4_1,
            GGMLQuantizationType.Q4_K,
            GGMLQuantizationType.Q5_K,
            GGMLQuantizationType.Q6_K,
            GGMLQuantizationType.Q8_0,
        }
    )
    | DECODED_TYPES
)


def _nibbles(packed: np.ndarray) -> np.ndarray:
    """Blocks of 16 bytes [..., 16] (low nibbles the first 16 values, high nibbles the
    next 16, as ggml packs Q4_0/Q4_1) -> the 32 values [..., 32] as int8."""
    return np.concatenate([packed & 0x0F, packed >> 4], axis=-1).astype(np.int8)


def _k_scales(b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A Q4_K or Q5_K block's per-32 scales ``d * sc`` and offsets ``-dmin * m``, in
    fp32 as the reference dequantizer computes them [rows, n, 8]."""
    d = _fp16(b, 0).astype(np.float32)[..., None]
    dmin = _fp16(b, 2).astype(np.float32)[..., None]
    sc, mn = _q4_k_scales(b[..., 4:16])
    return d * sc.astype(np.float32), -(dmin * mn.astype(np.float32))


def to_int8_blocks(raw: np.ndarray, qtype: GGMLQuantizationType) -> Int8Blocks:
    """A tensor's bytes [rows, row bytes] as :class:`Int8Blocks`, for the types of
    :data:`INT8_BLOCK_TYPES` (``ValueError`` for other types)."""
    if qtype in DECODED_TYPES and qtype != GGMLQuantizationType.Q4_1:
        return _decoded_int8_blocks(decode(raw, qtype), 16 if qtype in _PER_16 else 32)
    b = blocks(raw, qtype)
    rows, n = b.shape[:2]
    offsets = None
    if qtype == GGMLQuantizationType.Q8_0:
        block, scales = 32, _fp16(b, 0).astype(np.float32)
        q = np.ascontiguousarray(b[..., 2:]).view(np.int8)
    elif qtype == GGMLQuantizationType.Q4_0:
        block, scales = 32, _fp16(b, 0).astype(np.float32)
        q = _nibbles(b[..., 2:]) - np.int8(8)
    elif qtype == GGMLQuantizationType.Q4_1:
        block, scales = 32, _fp16(b, 0).astype(np.float32)
        offsets, q = _fp16(b, 2).astype(np.float32), _nibbles(b[..., 4:])
    elif qtype == GGMLQuantizationType.Q4_K:
        block = 32
        scales, offsets = _k_scales(b)  # the dequantizer's d * q - dmin * m
        qs = b[..., 16:].reshape(rows, n, 4, 1, 32) >> np.array([0, 4], np.uint8).reshape(2, 1)
        q = (qs & 0x0F).astype(np.int8)
    elif qtype == GGMLQuantizationType.Q5_K:
        # Q4_K's scales, then 32 bytes whose bit j is the fifth bit of sub-block j's
        # values, then Q4_K's 128 bytes of nibbles.
        block = 32
        scales, offsets = _k_scales(b)
        qs = b[..., 48:].reshape(rows, n, 4, 1, 32) >> np.array([0, 4], np.uint8).reshape(2, 1)
        qh = b[..., 16:48].reshape(rows, n, 1, 32) >> np.arange(8, dtype=np.uint8).reshape(8, 1)
        q = ((qs & 0x0F).reshape(rows, n, 8, 32) | ((qh & 0x01) << 4)).astype(np.int8)
    elif qtype == GGMLQuantizationType.Q6_K:
        block = 16  # 128 bytes of low nibbles, 64 of high 2 bits, 16 int8 scales, fp16 d
        ql = b[..., :128].reshape(rows, n, 2, 1, 64) >> np.array([0, 4], np.uint8).reshape(2, 1)
        ql = (ql & 0x0F).reshape(rows, n, 8, 32)
        qh = b[..., 128:192].reshape(rows, n, 2, 1, 32)
        qh = (qh >> np.array([0, 2, 4, 6], np.uint8).reshape(4, 1)) & 0x03
        q = (ql | (qh.reshape(rows, n, 8, 32) << 4)).astype(np.int8) - np.int8(32)
        sc = np.ascontiguousarray(b[..., 192:208]).view(np.int8).astype(np.float32)
        scales = _fp16(b, 208).astype(np.float32)[..., None] * sc
    else:
        raise ValueError(f"{qtype.name} has no int8 block form")

    def flat(values: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(values).reshape(rows, -1)

    return Int8Blocks(flat(q), flat(scales), None if offsets is None else flat(offsets), block)


def _decoded_int8_blocks(held: Decoded, block: int) -> Int8Blocks:
    """:class:`~mellea.engine.gguf_values.Decoded` values as :class:`Int8Blocks`: a scale
    ``d * sc`` and offset ``-(dmin * m)`` per ``block`` (16, or 32 for the types whose
    scales and minimums are per 32: the same numbers, half the memory)."""
    rows = held.q.shape[0]
    scales = held.d[..., None] * held.sc.astype(np.float32)  # per 16
    scales = scales.reshape(*scales.shape[:2], -1, block // 16)[..., 0]
    offsets = None
    if held.m is not None:
        offsets = -(held.dmin[..., None] * held.m.astype(np.float32))
        offsets = np.repeat(offsets, scales.shape[-1] // offsets.shape[-1], axis=-1)

    def flat(values: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(values).reshape(rows, -1)

    return Int8Blocks(flat(held.q), flat(scales), None if offsets is None else flat(offsets), block)


# Decoded types whose scales (and minimums) are per 16 values, not per 32.
_PER_16 = frozenset({GGMLQuantizationType.Q2_K, GGMLQuantizationType.Q3_K})


class ByteBlocks(NamedTuple):
    """A matrix's block weights exactly, untiled, in the byte form that
    ``formats.tiles.tile_bytes`` tiles for ``cpu_kernels.bytes_linear``: ``values`` [rows, K]
    uint8, the file's integer value ``q + 128``; ``subs`` [rows, K/32, P] int8, each
    group of 32's scales ``sc`` of its two sub-blocks of 16 and, where P == 3, its
    minimum ``m``; ``supers`` [rows, B, P - 1] fp32, ``d`` (and ``dmin``) of each block
    of K/B values. ``w = (d * sc) * q (+ -(dmin * m))``, in fp32 as the ``gguf``
    package's dequantizer computes it (so bit for bit the same)."""

    values: np.ndarray
    subs: np.ndarray
    supers: np.ndarray


# Block formats that ByteBlocks holds exactly. Those with a minimum of their own per
# block of 32 (Q4_1, Q5_1) take a super-block per group, its dmin the minimum negated
# (m = 1). Q2_K's minimums are per 16, and the byte form's per 32: it has none.
BYTE_TYPES = frozenset(
    {
        GGMLQuantizationType.Q4_0,
        GGMLQuantizationType.Q4_K,
        GGMLQuantizationType.Q5_K,
        GGMLQuantizationType.Q6_K,
        GGMLQuantizationType.Q8_0,
    }
) | (DECODED_TYPES - {GGMLQuantizationType.Q2_K})


def to_byte_blocks(raw: np.ndarray, qtype: GGMLQuantizationType) -> ByteBlocks:
    """A tensor's bytes [rows, row bytes] as :class:`ByteBlocks`, for the types of
    :data:`BYTE_TYPES` (``ValueError`` for other types)."""
    if qtype not in BYTE_TYPES:
        raise ValueError(f"{qtype.name} has no byte form")
    if qtype in DECODED_TYPES:
        return decoded_byte_blocks(decode(raw, qtype))
    b = blocks(raw, qtype)
    rows, n = b.shape[:2]
    if qtype == GGMLQuantizationType.Q8_0:
        q = np.ascontiguousarray(b[..., 2:]).view(np.int8).astype(np.int16)
        subs = np.ones((rows, n, 2), np.int8)
        supers = _fp16(b, 0).astype(np.float32)[..., None]
    elif qtype == GGMLQuantizationType.Q4_0:
        q = _nibbles(b[..., 2:]).astype(np.int16) - 8
        subs = np.ones((rows, n, 2), np.int8)
        supers = _fp16(b, 0).astype(np.float32)[..., None]
    elif qtype == GGMLQuantizationType.Q6_K:
        held = to_int8_blocks(raw, qtype)
        q = held.q.astype(np.int16)
        subs = np.ascontiguousarray(b[..., 192:208]).view(np.int8).reshape(rows, n * 8, 2)
        supers = _fp16(b, 208).astype(np.float32)[..., None]
    else:  # Q4_K, Q5_K: a scale and a minimum per sub-block of 32, d and dmin per block
        q = to_int8_blocks(raw, qtype).q.astype(np.int16)
        sc, mn = _q4_k_scales(b[..., 4:16])
        subs = np.stack([sc, sc, mn], axis=-1).astype(np.int8).reshape(rows, n * 8, 3)
        supers = np.stack([_fp16(b, 0), _fp16(b, 2)], axis=-1).astype(np.float32)
    values = (q.reshape(rows, -1) + 128).astype(np.uint8)
    return ByteBlocks(values, np.ascontiguousarray(subs), np.ascontiguousarray(supers))


def decoded_byte_blocks(held: Decoded) -> ByteBlocks:
    """:class:`~mellea.engine.gguf_values.Decoded` values (with no minimum, or one per
    32) as :class:`ByteBlocks`: a super-block per block of the file."""
    rows, n, e = held.q.shape
    values = (held.q.reshape(rows, -1).astype(np.int16) + 128).astype(np.uint8)
    subs = held.sc.reshape(rows, n * e // 32, 2)
    supers = held.d[..., None]
    if held.m is not None:
        if held.m.shape[-1] != e // 32:
            raise ValueError("the byte form has one minimum per 32 values")
        subs = np.concatenate([subs, held.m.reshape(rows, -1, 1)], axis=-1)
        supers = np.stack([held.d, held.dmin], axis=-1)
    return ByteBlocks(values, np.ascontiguousarray(subs), np.ascontiguousarray(supers))


# Types whose minimums are per 16 values, finer than the byte form's one per 32: held
# as the byte form of their products and each sub-block's minimum (split_minimums).
SPLIT_MIN_TYPES = frozenset({GGMLQuantizationType.Q2_K})


def split_minimums(raw: np.ndarray, qtype: GGMLQuantizationType) -> tuple[ByteBlocks, np.ndarray]:
    """A Q2_K tensor's bytes [rows, row bytes] as the byte form of ``(d * sc) * q`` and
    each sub-block of 16's ``-(dmin * m)`` [rows, K/16] fp32 (both exact: their sum,
    rounded once in fp32, is the reference dequantizer's ``d * sc * q - dmin * m``)."""
    if qtype not in SPLIT_MIN_TYPES:
        raise ValueError(f"{qtype.name} has no minimums per 16")
    held = decode(raw, qtype)
    lows = -(held.dmin[..., None] * held.m.astype(np.float32))
    products = decoded_byte_blocks(held._replace(m=None, dmin=None))
    return products, np.ascontiguousarray(lows.reshape(raw.shape[0], -1))


def stack_byte_blocks(parts: list[ByteBlocks]) -> ByteBlocks:
    """Pieces of one layer (q, k and v; gate and up) stacked along the rows: where some
    have minimums the others get zero ones, and where their blocks differ in size (a
    Q8_0 piece beside a Q6_K one) the supers are repeated to one per group of 32. Values
    and their meaning are unchanged."""
    with_mins = any(p.subs.shape[2] == 3 for p in parts)
    widths = {p.supers.shape[1] for p in parts}
    out = []
    for p in parts:
        subs, supers = p.subs, p.supers
        if with_mins and subs.shape[2] == 2:
            subs = np.concatenate([subs, np.zeros_like(subs[..., :1])], axis=-1)
            supers = np.concatenate([supers, np.zeros_like(supers)], axis=-1)
        if len(widths) > 1:
            supers = np.repeat(supers, subs.shape[1] // supers.shape[1], axis=1)
        out.append(ByteBlocks(p.values, subs, supers))
    if len(out) == 1:
        return out[0]
    return ByteBlocks(*(np.concatenate(arrays) for arrays in zip(*out, strict=True)))


def widen_bytes(held: ByteBlocks) -> np.ndarray:
    """:class:`ByteBlocks` as float32 [rows, K]: the reference dequantizer's values."""
    rows, k = held.values.shape
    groups = held.subs.shape[1]
    per = groups // held.supers.shape[1]
    q = (held.values.astype(np.int16) - 128).astype(np.float32).reshape(rows, groups, 2, 16)
    d = np.repeat(held.supers[..., 0], per, axis=1)  # [rows, groups]
    scale = d[..., None] * held.subs[..., :2].astype(np.float32)  # [rows, groups, 2]
    values = q * scale[..., None]
    if held.subs.shape[2] == 3:
        dmin = np.repeat(held.supers[..., 1], per, axis=1)
        values += (-(dmin * held.subs[..., 2].astype(np.float32)))[..., None, None]
    return values.reshape(rows, k)


def widen(held: Int8Blocks) -> np.ndarray:
    """:class:`Int8Blocks` as float32 [rows, K]: ``q * scale (+ offset)`` in fp32, the
    reference dequantizer's values bit for bit (one copy of the blocks in float32)."""
    rows, k = held.q.shape
    values = held.q.reshape(rows, -1, held.block).astype(np.float32)
    values *= held.scales[..., None]
    if held.offsets is not None:
        values += held.offsets[..., None]
    return values.reshape(rows, k)


# Tensors kept as numbers, not blocks.
FLOAT_TYPES = frozenset(
    {GGMLQuantizationType.F32, GGMLQuantizationType.F16, GGMLQuantizationType.BF16}
)
# Every type the engine serves exactly in a form of its own (docs/engine.md, Loading);
# a quantized GGUF with a matrix of another type (IQ1, IQ2, IQ3, TQ, ...) is refused.
SERVED_TYPES = FLOAT_TYPES | INT4_TYPES | BYTE_TYPES | SPLIT_MIN_TYPES


def to_float32(raw: np.ndarray, qtype: GGMLQuantizationType) -> np.ndarray:
    """Any tensor's bytes (or elements, for F32/F16) as float32 [rows, columns]."""
    if qtype == GGMLQuantizationType.F32:
        return np.asarray(raw, dtype=np.float32)
    return np.asarray(dequantize(raw, qtype), dtype=np.float32)

"""The integer values and factors of the GGUF block types that the engine serves by
widening them into a form it has: Q4_1, Q5_0, Q5_1, Q3_K, Q2_K, IQ4_NL and IQ4_XS.

Each block of ``E`` weights decodes to small integers ``q`` (int8) and the factors
that make them the file's weights, ``w = (d * sc) * q - dmin * m``: ``d`` (and ``dmin``)
fp32 per block, ``sc`` an int8 scale per 16 weights, ``m`` an int8 multiplier of
``dmin`` per 32 weights (per 16 for Q2_K). Every product is exact in fp32 (an fp16
number times integers of at most 8 bits), so computed in that order the weights are
the ``gguf`` package's reference dequantizer's bit for bit:

* Q4_1 ``d * q + m``: ``sc = 1``, ``m = 1``, ``dmin = -m`` (q in 0..15, blocks of 32).
* Q5_0 ``d * (q - 16)``: ``sc = 1`` (q - 16 in -16..15, blocks of 32).
* Q5_1 ``d * q + m``: as Q4_1 (q in 0..31).
* Q3_K ``d * (sc - 32) * q``: ``sc - 32`` per 16 (q in -4..3, blocks of 256).
* Q2_K ``d * sc * q - dmin * m``: ``sc`` and ``m`` per 16 (q in 0..3, blocks of 256).
* IQ4_NL ``d * kvalues[i]``: ``q = kvalues[i]`` (the fixed table, -127..113), ``sc = 1``.
* IQ4_XS ``d * (ls - 32) * kvalues[i]``: ``sc = ls - 32`` per 32 (blocks of 256).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

Q = GGMLQuantizationType

# IQ4_NL's and IQ4_XS's 16 values (ggml's kvalues_iq4nl).
IQ4_VALUES = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113])


class Decoded(NamedTuple):
    """A tensor's blocks as integers and factors, ``w = (d * sc) * q - dmin * m``:
    ``q`` [rows, n, E] int8; ``sc`` [rows, n, E/16] int8; ``d`` [rows, n] fp32; ``m``
    [rows, n, E/32] int8 (E/16 for Q2_K) and ``dmin`` [rows, n] fp32, or None where the
    type has no minimum."""

    q: np.ndarray
    sc: np.ndarray
    d: np.ndarray
    m: np.ndarray | None
    dmin: np.ndarray | None


def block_view(raw: np.ndarray, qtype: GGMLQuantizationType) -> np.ndarray:
    """A tensor's bytes [rows, row bytes] as blocks [rows, blocks per row, block bytes]."""
    return raw.reshape(raw.shape[0], -1, GGML_QUANT_SIZES[qtype][1])


def fp16_field(block: np.ndarray, start: int) -> np.ndarray:
    """The fp16 field at byte ``start`` of each block, as fp32 [..., blocks]."""
    field = np.ascontiguousarray(block[..., start : start + 2]).view(np.float16)[..., 0]
    return field.astype(np.float32)


def _halves(packed: np.ndarray) -> np.ndarray:
    """Bytes [..., 16] whose low nibbles are values 0-15 and high nibbles 16-31 (ggml's
    order for blocks of 32) -> the 32 values [..., 32] uint8."""
    return np.concatenate([packed & 0x0F, packed >> 4], axis=-1)


def _fifth_bits(qh: np.ndarray) -> np.ndarray:
    """Q5_0's and Q5_1's 4 bytes [..., 4] (bit j of the little-endian word: value j's
    fifth bit) -> [..., 32] uint8 of 0 or 16."""
    bits = np.unpackbits(np.ascontiguousarray(qh), axis=-1, bitorder="little")
    return bits << 4


def _ones(shape: tuple[int, ...]) -> np.ndarray:
    return np.ones(shape, np.int8)


def _q4_1(b: np.ndarray) -> Decoded:
    q = _halves(b[..., 4:]).astype(np.int8)
    n = b.shape[:2]
    return Decoded(q, _ones((*n, 2)), fp16_field(b, 0), _ones((*n, 1)), -fp16_field(b, 2))


def _q5_0(b: np.ndarray) -> Decoded:
    q = (_halves(b[..., 6:]) | _fifth_bits(b[..., 2:6])).astype(np.int8) - np.int8(16)
    return Decoded(q, _ones((*b.shape[:2], 2)), fp16_field(b, 0), None, None)


def _q5_1(b: np.ndarray) -> Decoded:
    q = (_halves(b[..., 8:]) | _fifth_bits(b[..., 4:8])).astype(np.int8)
    n = b.shape[:2]
    return Decoded(q, _ones((*n, 2)), fp16_field(b, 0), _ones((*n, 1)), -fp16_field(b, 2))


def _crumbs(qs: np.ndarray) -> np.ndarray:
    """Q2_K's and Q3_K's 64 bytes [..., 64] of 2-bit values -> [..., 256] uint8: two
    halves of 128, each 32 bytes whose bits 2s, 2s+1 are values 32 s .. 32 s + 31."""
    shifts = np.array([0, 2, 4, 6], np.uint8).reshape(4, 1)
    parts = qs.reshape(*qs.shape[:-1], 2, 1, 32) >> shifts  # [..., half, s, 32]
    return (parts & 0x03).reshape(*qs.shape[:-1], 256)


def _q3_k(b: np.ndarray) -> Decoded:
    # 32 bytes of high bits (bit j of byte i: value 32 j + i), 64 of low 2 bits, 12 of
    # 6-bit scales, fp16 d. A value's high bit set means no -4.
    rows, n = b.shape[:2]
    low = _crumbs(b[..., 32:96]).astype(np.int8)
    high = b[..., 0:32].reshape(rows, n, 1, 32) >> np.arange(8, dtype=np.uint8).reshape(8, 1)
    q = low - ((~high & 0x01).reshape(rows, n, 256) << 2).astype(np.int8)
    packed = b[..., 96:108]
    low_sc = packed[..., 0:8].reshape(rows, n, 1, 8) >> np.array([0, 4], np.uint8).reshape(2, 1)
    two_bit = np.array([0, 2, 4, 6], np.uint8).reshape(4, 1)
    high_sc = packed[..., 8:12].reshape(rows, n, 1, 4) >> two_bit
    sc = (low_sc.reshape(rows, n, 16) & 0x0F) | ((high_sc.reshape(rows, n, 16) & 0x03) << 4)
    return Decoded(q, sc.astype(np.int8) - np.int8(32), fp16_field(b, 108), None, None)


def _q2_k(b: np.ndarray) -> Decoded:
    # 16 bytes of (m << 4 | sc) per 16 values, 64 bytes of 2-bit values, fp16 d, dmin.
    scales = b[..., 0:16]
    q = _crumbs(b[..., 16:80]).astype(np.int8)
    sc, m = (scales & 0x0F).astype(np.int8), (scales >> 4).astype(np.int8)
    return Decoded(q, sc, fp16_field(b, 80), m, fp16_field(b, 82))


def _iq4_nl(b: np.ndarray) -> Decoded:
    q = IQ4_VALUES.astype(np.int8)[_halves(b[..., 2:])]
    return Decoded(q, _ones((*b.shape[:2], 2)), fp16_field(b, 0), None, None)


def _iq4_xs(b: np.ndarray) -> Decoded:
    # fp16 d, 2 bytes of high 2 bits of the 6-bit scales (2 j: sub-block j), 4 bytes of
    # their low nibbles (sub-block 2 i low, 2 i + 1 high), 8 sub-blocks of 16 bytes.
    rows, n = b.shape[:2]
    high = np.ascontiguousarray(b[..., 2:4]).view("<u2")[..., 0]  # [rows, n]
    high = (high[..., None] >> (2 * np.arange(8, dtype=np.uint16))) & 0x03
    low = b[..., 4:8].reshape(rows, n, 4, 1) >> np.array([0, 4], np.uint8)
    ls = (low.reshape(rows, n, 8) & 0x0F) | (high.astype(np.uint8) << 4)
    sc = np.repeat(ls.astype(np.int8) - np.int8(32), 2, axis=-1)  # per 16
    q = IQ4_VALUES.astype(np.int8)[_halves(b[..., 8:].reshape(rows, n, 8, 16))]
    return Decoded(q.reshape(rows, n, 256), sc, fp16_field(b, 0), None, None)


_DECODERS = {
    Q.Q4_1: _q4_1,
    Q.Q5_0: _q5_0,
    Q.Q5_1: _q5_1,
    Q.Q3_K: _q3_k,
    Q.Q2_K: _q2_k,
    Q.IQ4_NL: _iq4_nl,
    Q.IQ4_XS: _iq4_xs,
}
DECODED_TYPES = frozenset(_DECODERS)


def decode(raw: np.ndarray, qtype: GGMLQuantizationType) -> Decoded:
    """A Q4_1, Q5_0, Q5_1, Q3_K, Q2_K, IQ4_NL or IQ4_XS tensor's bytes [rows, row bytes]
    as :class:`Decoded` (``ValueError`` for other types)."""
    if qtype not in _DECODERS:
        raise ValueError(f"{qtype.name} has no decoder here")
    return _DECODERS[qtype](block_view(raw, qtype))


def values(held: Decoded) -> np.ndarray:
    """:class:`Decoded` as float32 [rows, K], in the reference dequantizer's order:
    ``(d * sc) * q - dmin * m`` (bit for bit its values)."""
    rows, n, e = held.q.shape
    scale = held.d[..., None] * held.sc.astype(np.float32)  # [rows, n, E/16]
    w = held.q.reshape(rows, n, -1, 16).astype(np.float32) * scale[..., None]
    if held.m is not None:
        low = held.dmin[..., None] * held.m.astype(np.float32)  # [rows, n, E/32 or E/16]
        w = w.reshape(rows, n, low.shape[-1], -1) - low[..., None]
    return w.reshape(rows, n * e)

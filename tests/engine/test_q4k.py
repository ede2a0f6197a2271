"""A GGUF's Q4_K tensors served exactly: the file's 6-bit scales and minimums and fp16
super-block factors kept (``gguf_blocks.Q4KGroups``), each group's factors formed in
fp32 by the kernels. Checked against the ``gguf`` package's dequantizer bit for bit,
against the fp16 form's kernel bit for bit where the products fit fp16, on every kernel
family this CPU runs, in the fused decode layer, and end to end."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q
from gguf.quants import dequantize

from mellea.engine import cpu_kernels, gguf_blocks
from mellea.engine.formats.linear import Int4Linear
from mellea.engine.formats.quantize import dequantize_groups, dequantize_q4k
from mellea.engine.formats.tiles import tile_groups, tile_q4k, tile_q4k_torch
from tests.engine.decode_batch import decode_batch
from tests.engine.test_cpu_kernels import activation_error_bound
from tests.engine.test_gguf_blocks import random_k_blocks
from tests.engine.test_gguf_models import tiny_gguf  # noqa: F401 (a fixture)

N, K = 40, 512  # two tiles and a padded third; two super-blocks per row


def q4_k_blocks(rows: int = N, cols: int = K, seed: int = 7, fit_fp16: bool = False) -> np.ndarray:
    """Random Q4_K bytes [rows, row bytes] (every 6-bit pattern; one block with d and dmin
    zero). ``fit_fp16``: d and dmin of 5 significant bits, so that each d * sc and
    dmin * m (at most 11 bits) is an fp16 exactly and the fp16 form is exact too."""
    raw = random_k_blocks(Q.Q4_K, rows, cols, seed=seed)
    blocks = raw.reshape(rows, -1, 144)
    if fit_fp16:
        rng = np.random.default_rng(seed)
        five_bits = rng.integers(16, 32, (rows, blocks.shape[1], 2)) * 2.0**-14
        blocks[..., 0:4] = five_bits.astype(np.float16).view(np.uint8).reshape(rows, -1, 4)
    blocks[1, 0, 0:4] = 0
    return raw


def exact_weight(raw: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(dequantize(raw, Q.Q4_K))


def as_torch(groups) -> tuple[torch.Tensor, ...]:
    return tuple(torch.from_numpy(np.ascontiguousarray(g)) for g in groups)


def test_q4k_groups_are_the_files_values_bit_for_bit():
    """The kept form widens to the reference dequantizer's values exactly (NumPy and
    torch), holds the file's fields as they are, and the fp16 form did not."""
    raw = q4_k_blocks()
    reference = exact_weight(raw)
    groups = gguf_blocks.to_q4k(raw)
    assert torch.equal(torch.from_numpy(gguf_blocks.q4k_values(groups)), reference)
    assert torch.equal(dequantize_q4k(*as_torch(groups)), reference)
    blocks = raw.reshape(N, -1, 144)
    d_bits = groups.super_scales[..., 0].view(np.uint16)
    assert np.array_equal(d_bits, blocks[..., 0:2].copy().view(np.uint16)[..., 0])
    dmin_bits = blocks[..., 2:4].copy().view(np.uint16)[..., 0]
    assert np.array_equal(groups.super_scales[..., 1].view(np.uint16), dmin_bits ^ 0x8000)
    assert groups.sub_scales.max() == 63 and groups.sub_scales.min() == 0
    # The fp16 form (the same as to_int4 gives) is not the file's values.
    rounded = gguf_blocks.q4k_to_int4(groups)
    for got, want in zip(rounded, gguf_blocks.to_int4(raw, Q.Q4_K), strict=True):
        assert np.array_equal(got, want)
    assert not torch.equal(dequantize_groups(*as_torch(rounded)), reference)


def test_q4_k_exact_is_to_q4k(kernel_family):
    raw = q4_k_blocks(24, 1024, seed=9)
    ours = cpu_kernels.q4_k_exact(torch.from_numpy(raw))
    for got, want in zip(ours, gguf_blocks.to_q4k(raw), strict=True):
        assert got.numpy().dtype == want.dtype and got.shape == want.shape
        assert np.array_equal(got.numpy().view(np.uint8), want.view(np.uint8))


@pytest.mark.parametrize("rows", [16, 37])  # whole tiles, and a padded last one
def test_tile_q4k_weights_is_tile_q4k_torch(kernel_family, rows):
    groups = as_torch(gguf_blocks.to_q4k(q4_k_blocks(rows, K, seed=rows)))
    ours = cpu_kernels.tile_q4k_weights(*groups)
    want = tile_q4k_torch(*groups)
    assert want[1].shape == (-(-rows // 16), K // 32, 2, 16)
    assert want[2].shape == (-(-rows // 16), K // 256, 2, 16)
    for got, expected in zip(ours, want, strict=True):
        assert got.dtype == expected.dtype and torch.equal(got, expected)


def test_the_layer_serves_the_files_weights_exactly(kernel_family):
    raw = q4_k_blocks()
    layer = Int4Linear(None, None, groups=as_torch(gguf_blocks.to_q4k(raw)))
    assert layer.q4k and layer.tiled
    assert torch.equal(layer.dequantized(), exact_weight(raw))


@pytest.mark.parametrize("rows", [1, 2, 3, 4, 5, 8, 13, 33])
def test_q4k_vnni_linear_is_the_fp16_kernel_where_the_products_fit_fp16(kernel_family, rows):
    """Where every d * sc and dmin * m is an fp16, the fp16 form holds the same weights:
    the Q4_K kernel must then give that form's kernel's bits (tested on its own)."""
    raw = q4_k_blocks(fit_fp16=True)
    exact = tile_q4k(*as_torch(gguf_blocks.to_q4k(raw)))
    rounded = tile_groups(*as_torch(gguf_blocks.to_int4(raw, Q.Q4_K)))
    assert torch.equal(cpu_kernels.int4_vnni_dequantize(*rounded, N), exact_weight(raw))
    torch.manual_seed(rows)
    x = torch.randn(rows, K) * torch.logspace(-2, 2, K)
    x[0, :32] = 0.0  # a group with no step at all
    got = cpu_kernels.q4k_vnni_linear(x, *exact, N)
    assert got.shape == (rows, N)
    assert torch.equal(got, cpu_kernels.int4_vnni_linear(x, *rounded, N))


@pytest.mark.parametrize("rows", [1, 5, 33])
def test_q4k_vnni_linear_keeps_to_the_activations_bound(kernel_family, rows):
    """On products that do not fit fp16, the Q4_K kernel's only error is the activations'
    16 bits (the bound of int4_vnni_linear's test); the fp16 form is far outside it."""
    raw = q4_k_blocks(seed=rows)
    weight = exact_weight(raw)
    exact = tile_q4k(*as_torch(gguf_blocks.to_q4k(raw)))
    torch.manual_seed(rows)
    x = torch.randn(rows, K) * torch.logspace(-2, 2, K)
    want = x.double() @ weight.double().T
    bound = activation_error_bound(x, weight)
    error = (cpu_kernels.q4k_vnni_linear(x, *exact, N).double() - want).abs()
    assert (error <= bound).all(), (error / bound).max()
    rounded = tile_groups(*as_torch(gguf_blocks.to_int4(raw, Q.Q4_K)))
    fp16_error = (cpu_kernels.int4_vnni_linear(x, *rounded, N).double() - want).abs()
    assert (fp16_error > bound).any()


@pytest.mark.parametrize("kernel_family", ["avx2"], indirect=True)
@pytest.mark.parametrize("rows", [1, 2, 3, 4, 5, 9, 33])
def test_every_x86_dot_product_gives_the_avx512_builds_bits(kernel_family, rows):
    """The AVX2 build's three dot products (maddubs, AVX-VNNI, AVX512-VL VNNI, where
    this CPU has them) and the AVX-512 build compute the same bits."""
    if not cpu_kernels.cpu_runs("avx512-vnni"):
        pytest.skip("this CPU cannot run the avx512-vnni kernels to compare with")
    flags = cpu_kernels.cpu_build.cpu_flags()
    dots = ["maddubs"]
    if "avx_vnni" in flags:
        dots.append("avx-vnni")
    if {"avx512vl", "avx512_vnni"} <= flags:
        dots.append("avx512vl-vnni")
    exact = tile_q4k(*as_torch(gguf_blocks.to_q4k(q4_k_blocks())))
    torch.manual_seed(0)
    x = torch.randn(rows, K) * torch.logspace(-3, 3, K)
    x[0, 32:64] = torch.tensor([127.0, -127.0] * 16)  # the parts' extremes
    before = cpu_kernels.avx2_dot("")
    got = {}
    try:
        for dot in dots:
            assert cpu_kernels.avx2_dot(dot) == dot
            got[dot] = cpu_kernels.q4k_vnni_linear(x, *exact, N)
    finally:
        cpu_kernels.avx2_dot(before)
    cpu_kernels.select("avx512-vnni")
    want = cpu_kernels.q4k_vnni_linear(x, *exact, N)
    for dot, out in got.items():
        assert torch.equal(out, want), dot


def test_q4k_operands_are_checked(kernel_family):
    qweight, sub, super_ = tile_q4k(*as_torch(gguf_blocks.to_q4k(q4_k_blocks())))
    x = torch.randn(2, K)
    with pytest.raises(RuntimeError, match="sub: "):
        cpu_kernels.q4k_vnni_linear(x, qweight, sub[:, :-1].contiguous(), super_, N)
    with pytest.raises(RuntimeError, match="super: "):
        cpu_kernels.q4k_vnni_linear(x, qweight, sub, super_.float(), N)
    small = torch.zeros(3, 4, 4, 64, dtype=torch.uint8)  # K = 128: no whole block
    with pytest.raises(RuntimeError, match="multiple of 256"):
        cpu_kernels.q4k_vnni_linear(torch.randn(1, 128), small, sub, super_, N)


def _decode_step(runner, contexts: list[int]):
    """The model's inputs for one decode-only step of sequences with these contexts."""
    inputs = decode_batch(runner, contexts)
    return inputs.input_ids, inputs.positions, runner.kv_caches, inputs.meta


@pytest.mark.parametrize("contexts", [[70], [40, 70, 9]])
def test_fused_q4_k_m_layers_match_the_layer_path_bit_for_bit(kernel_family, tiny_gguf, contexts):  # noqa: F811
    """A Q4_K_M file at int4 (Q4_K exactly, its Q6_K tensors in the byte form) runs each
    layer as one C++ op (cpu_kernels.decode_layer), which tells the forms apart by dtype
    and shape; it must compute exactly what the layers' own path does."""
    from mellea.engine.compute_path import ComputePath
    from mellea.engine.engine import Engine

    engine = Engine(str(tiny_gguf("llama", Q.Q4_K, v_type=Q.Q6_K)), dtype="int4")
    try:
        model = engine.runner.model
        assert model.path is ComputePath.CPP_FUSED
        layer = model.layers[0]
        assert layer.mlp.down_proj.q4k and layer.self_attn.o_proj.q4k
        q_k, v = layer.self_attn.qkv_proj.parts  # Q4_K attn_q, attn_k; Q6_K attn_v
        assert q_k.q4k and v.exact  # Q4_K as it is, Q6_K in the byte form
        assert len(model._fused[0][2]) == 15  # qkv in two parts
        args = _decode_step(engine.runner, contexts)
        with torch.inference_mode():
            fused = model(*args)
            model.set_path(ComputePath.CPP)
            layered = model(*args)
        assert torch.equal(fused, layered)
        assert layered.abs().max() > 0
    finally:
        engine.shutdown()


async def test_a_q4_k_file_at_int4_answers_as_at_float32(tiny_gguf):  # noqa: F811
    """The same greedy tokens as float32 on the same file (the file's weights exactly;
    only the activations' 16 bits differ), its layers all in the exact form."""
    from mellea.engine.engine import Engine
    from mellea.engine.types import SamplingParams
    from tests.engine.conftest import generate

    path = str(tiny_gguf("llama", Q.Q4_K))
    fp32, int4 = Engine(path, dtype="float32"), Engine(path, dtype="int4")
    try:
        layers = [m for m in int4.runner.model.modules() if isinstance(m, Int4Linear)]
        assert layers and all(m.q4k for m in layers if m is not int4.runner.model.lm_head.inner)
        prompts = [[1, 504, 1575, 282, 1649, 314], [1, 1955, 665, 17, 1073, 416, 339, 237]]
        params = SamplingParams(max_tokens=8)
        want = await generate(fp32, prompts, params)
        got = await generate(int4, prompts, params)
        assert [r[0] for r in got] == [r[0] for r in want]
    finally:
        fp32.shutdown()
        int4.shutdown()

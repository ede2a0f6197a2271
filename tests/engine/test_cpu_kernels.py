"""The C++ ops of the CPU path against the PyTorch code they replace, on every kernel
family (AVX-512, AVX2, generic) this CPU can execute; the others skip, saying why."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

from mellea.engine import cpu_kernels
from mellea.engine.kernels.rms_norm import rms_norm_ref

pytestmark = pytest.mark.skipif(
    os.environ.get("MELLEA_CPU_KERNEL") == "0", reason="C++ CPU ops switched off"
)

DTYPES = [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)]


@pytest.fixture(autouse=True)
def every_family(kernel_family: str) -> str:
    """Every test of this module runs once per kernel family."""
    return kernel_family


def test_the_selected_build_is_the_family_it_says(kernel_family: str) -> None:
    assert cpu_kernels.family() == kernel_family
    assert cpu_kernels._ops().family() == kernel_family


def gathered_attention(q, k_cache, v_cache, tables, lens, scale, window):
    """Decode attention as the PyTorch CPU path does it: gather, mask, SDPA in fp32."""
    batch, n_heads, dim = q.shape
    block, n_kv = k_cache.shape[1], k_cache.shape[2]
    width = tables.shape[1] * block
    keys = k_cache[tables.long()].reshape(batch, width, n_kv, dim).float()
    values = v_cache[tables.long()].reshape(batch, width, n_kv, dim).float()
    span = torch.arange(width)
    keep = span[None] < lens[:, None]
    if window is not None:
        keep &= span[None] >= lens[:, None] - window
    out = F.scaled_dot_product_attention(
        q.float().view(batch, n_kv, n_heads // n_kv, dim),
        keys.transpose(1, 2),
        values.transpose(1, 2),
        attn_mask=keep[:, None, None, :],
        scale=scale,
    )
    return out.reshape(batch, n_heads, dim)


@pytest.mark.parametrize(("dtype", "atol"), DTYPES)
@pytest.mark.parametrize("window", [None, 5])
@pytest.mark.parametrize(("n_heads", "n_kv"), [(4, 4), (6, 2)])
def test_paged_decode_matches_gathered_sdpa(dtype, atol, window, n_heads, n_kv) -> None:
    torch.manual_seed(0)
    block, dim, num_blocks = 4, 16, 40
    k_cache = torch.randn(num_blocks, block, n_kv, dim).to(dtype)
    v_cache = torch.randn(num_blocks, block, n_kv, dim).to(dtype)
    lens = torch.tensor([1, 7, 13, 4], dtype=torch.int32)
    tables = torch.randperm(num_blocks)[:16].view(4, 4).to(torch.int32)
    # q as the model passes it: the first heads of a wider q|k row, not contiguous.
    qk = torch.randn(4, n_heads + n_kv, dim).to(dtype)
    q = qk[:, :n_heads]
    got = cpu_kernels.paged_decode(q, k_cache, v_cache, tables, lens, 0.3, window)
    want = gathered_attention(q, k_cache, v_cache, tables, lens, 0.3, window)
    assert got.dtype == dtype and got.shape == q.shape
    torch.testing.assert_close(got.float(), want, atol=atol, rtol=0)


@pytest.mark.parametrize("window", [None, 150])
@pytest.mark.parametrize("batch", [1, 3])
def test_paged_decode_splits_long_contexts_between_threads(batch: int, window) -> None:
    """Fewer sequences than threads: each context is cut into pieces, one task each,
    merged by their maxima; the result is still attention over the whole context."""
    torch.manual_seed(0)
    block, dim, n_heads, n_kv, num_blocks = 16, 64, 9, 3, 64
    k_cache = torch.randn(num_blocks, block, n_kv, dim)
    v_cache = torch.randn(num_blocks, block, n_kv, dim)
    lens = torch.tensor([300, 5, 170][:batch], dtype=torch.int32)  # one too short to split
    tables = torch.randperm(num_blocks)[: batch * 20].view(batch, 20).to(torch.int32)
    q = 3 * torch.randn(batch, n_heads, dim)  # peaked scores: the merge's maxima matter
    threads = torch.get_num_threads()
    torch.set_num_threads(8)
    try:
        got = cpu_kernels.paged_decode(q, k_cache, v_cache, tables, lens, 0.125, window)
    finally:
        torch.set_num_threads(threads)
    want = gathered_attention(q, k_cache, v_cache, tables, lens, 0.125, window)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("with_residual", [False, True])
def test_rms_norm_matches_reference(dtype, with_residual) -> None:
    torch.manual_seed(0)
    x = torch.randn(5, 64).to(dtype)
    weight = torch.randn(64).to(dtype)
    residual = torch.randn(5, 64).to(dtype) if with_residual else None
    want, want_residual = rms_norm_ref(x, weight, 1e-6, residual)
    updated = residual.clone() if residual is not None else None
    got = cpu_kernels.rms_norm(x, weight, 1e-6, updated)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    if with_residual:
        assert torch.equal(updated, want_residual)  # updated in place to x + residual


def test_rms_norm_reads_strided_rows() -> None:
    x = torch.randn(3, 80)[:, :64]
    weight = torch.rand(64)
    torch.testing.assert_close(
        cpu_kernels.rms_norm(x, weight, 1e-6), rms_norm_ref(x, weight, 1e-6)[0]
    )


def test_mixed_precisions_are_converted_not_refused() -> None:
    torch.manual_seed(0)
    k_cache = torch.randn(8, 4, 2, 16).to(torch.bfloat16)
    v_cache = torch.randn(8, 4, 2, 16).to(torch.bfloat16)
    tables = torch.arange(8, dtype=torch.int32).view(2, 4)
    lens = torch.tensor([3, 16], dtype=torch.int32)
    q = torch.randn(2, 4, 16)
    got = cpu_kernels.paged_decode(q, k_cache, v_cache, tables, lens, 0.25, None)
    want = gathered_attention(q.bfloat16(), k_cache, v_cache, tables, lens, 0.25, None)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, want, atol=2e-2, rtol=0)
    x, residual, weight = torch.randn(3, 32), torch.randn(3, 32).double(), torch.rand(32)
    want, want_residual = rms_norm_ref(x.double(), weight.double(), 1e-6, residual)
    got = cpu_kernels.rms_norm(x, weight, 1e-6, residual)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(residual, want_residual)


@pytest.mark.parametrize("rows", [1, 3, 4, 7, 17])  # activation rows: tiles of 4 and the rest
@pytest.mark.parametrize(("n", "k"), [(70, 64), (9, 40)])  # weight rows not in 4s; K % 16 != 0
def test_int8_linear_matches_the_dequantized_matmul(rows: int, n: int, k: int) -> None:
    torch.manual_seed(0)
    q = torch.randint(-127, 128, (n, k), dtype=torch.int8)
    scale = torch.rand(n) + 0.01
    x = torch.randn(rows, k)
    want = x.double() @ (q.double() * scale.double()[:, None]).T
    got = cpu_kernels.int8_linear(x, q, scale)
    assert got.dtype == torch.float32 and got.shape == (rows, n)
    torch.testing.assert_close(got.double(), want, atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("rows", [1, 2, 5, 8, 33])
@pytest.mark.parametrize(("n", "k"), [(70, 64), (6, 96)])
def test_int4_linear_and_dequantize_match_the_layout(rows: int, n: int, k: int) -> None:
    torch.manual_seed(0)
    nibbles = torch.randint(0, 16, (n, k // 32, 32), dtype=torch.uint8)
    packed = (nibbles[..., :16] | (nibbles[..., 16:] << 4)).reshape(n, k // 2).contiguous()
    scales, mins = torch.rand(n, k // 32).half(), torch.randn(n, k // 32).half()
    weight = (nibbles.double() * scales.double()[..., None] + mins.double()[..., None]).view(n, k)
    got_weight = cpu_kernels.int4_dequantize(packed, scales, mins)
    torch.testing.assert_close(got_weight.double(), weight, atol=1e-6, rtol=1e-6)
    x = torch.randn(rows, k)
    got = cpu_kernels.int4_linear(x, packed, scales, mins)
    assert got.dtype == torch.float32 and got.shape == (rows, n)
    torch.testing.assert_close(got.double(), x.double() @ weight.T, atol=1e-4, rtol=1e-5)


def activation_error_bound(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """[rows, n]: how far int4_vnni_linear may be from x @ weight.T: each group of 32
    activations is held to half of its step, |x| max / (127 * 256), plus fp32 slop."""
    rows, k = x.shape
    step = x.abs().view(rows, k // 32, 32).amax(-1) / (127 * 256)  # [rows, groups]
    weight_mass = weight.abs().view(weight.shape[0], k // 32, 32).sum(-1)  # [n, groups]
    return step.double() @ weight_mass.double().T / 2 + 1e-5 * (x.abs() @ weight.abs().T)


@pytest.mark.parametrize("rows", [1, 2, 5, 8, 33])
@pytest.mark.parametrize(("n", "k"), [(70, 64), (6, 96), (32, 576)])
def test_int4_vnni_linear_keeps_the_activations_to_16_bits(rows: int, n: int, k: int) -> None:
    from mellea.engine.formats.quantize import dequantize_groups, quantize_groups
    from mellea.engine.formats.tiles import tile_groups

    torch.manual_seed(0)
    packed, scales, mins = quantize_groups(torch.randn(n, k))
    weight = dequantize_groups(packed, scales, mins)
    tiled = tile_groups(packed, scales, mins)
    assert tiled[0].shape == (-(-n // 16), k // 32, 4, 64)
    assert torch.equal(cpu_kernels.int4_vnni_dequantize(*tiled, n), weight)
    x = torch.randn(rows, k) * torch.logspace(-2, 2, k)  # groups of very different sizes
    x[0, :32] = 0.0  # a group with no step at all
    got = cpu_kernels.int4_vnni_linear(x, *tiled, n)
    assert got.dtype == torch.float32 and got.shape == (rows, n)
    error = (got.double() - x.double() @ weight.double().T).abs()
    bound = activation_error_bound(x, weight)
    assert (error <= bound).all(), (error / bound).max()
    # The bound is tight enough to catch a lost low part: int8 alone is 256x coarser.
    assert bound.max() < 1e-3 * (x.abs() @ weight.abs().T).max()


@pytest.mark.parametrize("rows", [1, 2, 5, 8, 33])
@pytest.mark.parametrize(("n", "k"), [(70, 64), (6, 96), (32, 576)])
def test_int8_vnni_linear_keeps_the_activations_to_16_bits(rows: int, n: int, k: int) -> None:
    from mellea.engine.formats.quantize import quantize_rows
    from mellea.engine.formats.tiles import tile_rows

    torch.manual_seed(0)
    q, scale = quantize_rows(torch.randn(n, k))
    q[0, :8] = torch.tensor([127, -127, 127, -127, 127, 127, -127, -127], dtype=torch.int8)
    weight = q.float() * scale[:, None]
    qweight, wsum, tiled_scale = tile_rows(q, scale)
    assert qweight.shape == (-(-n // 16), k // 32, 8, 64) and wsum.dtype == torch.int32
    assert wsum[0, 0, 0] == q[0, :32].sum()
    x = torch.randn(rows, k) * torch.logspace(-2, 2, k)  # groups of very different sizes
    x[0, :32] = 0.0  # a group with no step at all
    x[-1, 32:64] = -x[-1, 32:64].abs()  # a group of negative values only
    got = cpu_kernels.int8_vnni_linear(x, qweight, wsum, tiled_scale, n)
    assert got.dtype == torch.float32 and got.shape == (rows, n)
    error = (got.double() - x.double() @ weight.double().T).abs()
    bound = activation_error_bound(x, weight)
    assert (error <= bound).all(), (error / bound).max()
    assert bound.max() < 1e-3 * (x.abs() @ weight.abs().T).max()


def random_byte_blocks(
    n: int, k: int, mins: bool, per_super: int, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A GGUF layer's blocks in the byte form, untiled (gguf_blocks.ByteBlocks), with
    the ranges' ends: values over all of 0..255 (Q8_0's q from -128), int8 scales from
    -128, 6-bit minimums where ``mins``, fp16 ``d`` (and ``dmin``) per ``per_super``
    groups of 32."""
    gen = torch.Generator().manual_seed(seed)
    values = torch.randint(0, 256, (n, k), dtype=torch.uint8, generator=gen)
    values[0, :4] = torch.tensor([0, 255, 0, 255], dtype=torch.uint8)
    parts = 3 if mins else 2
    subs = torch.randint(-128, 128, (n, k // 32, parts), dtype=torch.int8, generator=gen)
    subs[0, 0, :2] = -128
    if mins:
        subs[..., 2] = torch.randint(0, 64, (n, k // 32), dtype=torch.int8, generator=gen)
    supers = torch.rand(n, k // 32 // per_super, parts - 1, generator=gen) * 1e-3
    return values, subs, supers.half().float()


def byte_blocks_weight(blocks: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """The fp32 weight the blocks stand for (gguf_blocks' NumPy widening)."""
    from mellea.engine.gguf_blocks import ByteBlocks, widen_bytes

    return torch.from_numpy(widen_bytes(ByteBlocks(*(t.numpy() for t in blocks))))


BYTE_CASES = [(70, 64, False, 1), (6, 96, True, 1), (40, 512, True, 8), (33, 256, False, 8)]


@pytest.mark.parametrize("rows", [1, 2, 5, 8, 33])
@pytest.mark.parametrize(("n", "k", "mins", "per_super"), BYTE_CASES)
def test_bytes_linear_keeps_the_activations_to_16_bits(rows, n, k, mins, per_super) -> None:
    """The exact byte form (a GGUF's Q6_K/Q8_0 blocks, Q4_K/Q5_K ones with minimums):
    its layout widens to the blocks' values bit for bit, and its product is within the
    two-part activations' bound of the exact one."""
    from mellea.engine.formats.tiles import tile_bytes

    blocks = random_byte_blocks(n, k, mins, per_super)
    weight = byte_blocks_weight(blocks)
    tiled = tile_bytes(*blocks)
    assert tiled[0].shape == (-(-n // 16), k // 32, 8, 64) and tiled[0].dtype == torch.uint8
    assert tiled[1].shape == (-(-n // 16), k // 32, 3 if mins else 2, 16)
    assert torch.equal(cpu_kernels.bytes_dequantize(*tiled, n), weight)
    torch.manual_seed(0)
    x = torch.randn(rows, k) * torch.logspace(-2, 2, k)  # groups of very different sizes
    x[0, :32] = 0.0  # a group with no step at all
    x[-1, 32:64] = -x[-1, 32:64].abs()  # a group of negative values only
    got = cpu_kernels.bytes_linear(x, *tiled, n)
    assert got.dtype == torch.float32 and got.shape == (rows, n)
    error = (got.double() - x.double() @ weight.double().T).abs()
    bound = activation_error_bound(x, weight)
    assert (error <= bound).all(), (error / bound).max()
    assert bound.max() < 1e-3 * (x.abs() @ weight.abs().T).max()


def six_bit_blocks(n: int, k: int, mins: bool, per_super: int) -> tuple[torch.Tensor, ...]:
    """:func:`random_byte_blocks` whose q are all in Q6_K's -32..31 (both ends present)."""
    values, subs, supers = random_byte_blocks(n, k, mins, per_super)
    values = values % 64 + 96
    values[0, :2] = torch.tensor([96, 159], dtype=torch.uint8)
    return values, subs, supers


# rows: each row block of 4 and its remainders; 8 at a time (vpmaddwd's) and the rest
@pytest.mark.parametrize("rows", [1, 2, 3, 4, 5, 8, 13, 33])
@pytest.mark.parametrize(("n", "k", "mins", "per_super"), BYTE_CASES)
def test_the_six_bit_form_gives_the_byte_forms_bits(rows, n, k, mins, per_super) -> None:
    """Values in -32..31 (Q6_K, Q5_K, Q4_K) pack into 6 bits a weight; the tiles rebuild
    the byte form from them: the same weights, and the same product bit for bit."""
    from mellea.engine.formats.tiles import pack_six, tile_bytes

    tiled = tile_bytes(*six_bit_blocks(n, k, mins, per_super))
    six = pack_six(tiled[0], n)
    assert six is not None and six.shape == (-(-n // 16), k // 32, 6, 64)
    assert torch.equal(cpu_kernels.bytes_to_six(tiled[0], n), six)  # the loader's C++ twin
    rebuilt = cpu_kernels.six_to_bytes(six)
    real = tiled[0].permute(0, 3, 1, 2).reshape(-1, 16, 4, k // 32, 8)  # [T, row, ...]
    assert torch.equal(
        rebuilt.permute(0, 3, 1, 2).reshape(-1, 16, 4, k // 32, 8).flatten(0, 1)[:n],
        real.flatten(0, 1)[:n],
    )
    assert torch.equal(
        cpu_kernels.bytes_dequantize(six, *tiled[1:], n),
        cpu_kernels.bytes_dequantize(*tiled, n),
    )
    torch.manual_seed(rows)
    x = torch.randn(rows, k) * torch.logspace(-2, 2, k)
    x[0, :32] = 0.0
    want = cpu_kernels.bytes_linear(x, *tiled, n)
    assert torch.equal(cpu_kernels.bytes_linear(x, six, *tiled[1:], n), want)


def test_values_outside_6_bits_keep_the_byte_form() -> None:
    from mellea.engine.formats.tiles import pack_six, tile_bytes

    for low, high in ((95, 159), (96, 160)):  # q = -33, or q = 32 (Q8_0's range)
        values, subs, supers = six_bit_blocks(16, 64, False, 1)
        values[3, 7], values[4, 9] = low, high
        tiled = tile_bytes(values, subs, supers)[0]
        assert pack_six(tiled, 16) is None and cpu_kernels.bytes_to_six(tiled, 16) is None


def tiled_linears(rows: int, extremes: bool) -> Callable[[], list[torch.Tensor]]:
    """Seeded operands of every tiled linear (int4, int8, the byte form and its six-bit
    packing, with and without minimums) for ``rows`` activation rows, and a call that runs them all on the kernels
    selected at that time. ``extremes``: the int8 range's ends in the weights and the
    activation parts' extremes in row 0."""
    from mellea.engine.formats.quantize import quantize_groups, quantize_rows
    from mellea.engine.formats.tiles import pack_six, tile_bytes, tile_groups, tile_rows

    torch.manual_seed(0)
    n, k = 40, 160
    int4 = tile_groups(*quantize_groups(torch.randn(n, k)))
    q, scale = quantize_rows(torch.randn(n, k))
    q[:, :32] = torch.randint(-127, 128, (n, 32), dtype=torch.int8)  # the int8 range's ends
    int8 = tile_rows(q, scale)
    x = torch.randn(rows, k) * torch.logspace(-3, 3, k)
    if extremes:
        x[0, 32:64] = torch.tensor([127.0, -127.0] * 16)  # the parts' extremes
    exact = [tile_bytes(*random_byte_blocks(n, 256, mins, 8)) for mins in (False, True)]
    for mins in (False, True):
        qweight, subs, supers = tile_bytes(*six_bit_blocks(n, 256, mins, 8))
        exact.append((pack_six(qweight, n), subs, supers))
    x256 = torch.randn(rows, 256) * torch.logspace(-3, 3, 256)

    def each() -> list[torch.Tensor]:
        return [
            cpu_kernels.int4_vnni_linear(x, *int4, n),
            cpu_kernels.int8_vnni_linear(x, *int8, n),
            *(cpu_kernels.bytes_linear(x256, *form, n) for form in exact),
        ]

    return each


# activation rows: the row blocks of 4 and each remainder, one block or several
@pytest.mark.parametrize("kernel_family", ["avx2"], indirect=True)
@pytest.mark.parametrize("rows", [1, 2, 3, 4, 5, 8, 9, 13, 32, 33])
def test_the_simd_families_compute_the_same_bits(kernel_family: str, rows: int) -> None:
    """AVX2 takes the AVX-512 build's roundings in the same order and its integer dot
    products are exact: the tiled linears give the same bits on both (the generic build
    only within the bound above)."""
    if not cpu_kernels.cpu_runs("avx512-vnni"):
        pytest.skip("this CPU cannot run the avx512-vnni kernels to compare with")
    each = tiled_linears(rows, extremes=True)
    got = each()
    cpu_kernels.select("avx512-vnni")
    want = each()
    assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))


@pytest.mark.parametrize(
    ("rows", "n", "k"), [(1, 49152, 32), (5, 1000, 7), (3, 20, 20), (2, 37, 1)]
)
def test_top_k_matches_torch_and_puts_the_first_of_equals_first(rows: int, n: int, k: int):
    torch.manual_seed(0)
    x = torch.randn(rows, n) * 3
    x[0, n // 2] = float("-inf")  # a masked logit
    values, indices = cpu_kernels.top_k(x, k)
    want = x.topk(k, dim=-1)
    assert indices.dtype == torch.long and values.shape == indices.shape == (rows, k)
    assert torch.equal(values, want.values) and torch.equal(indices, want.indices)
    assert torch.equal(cpu_kernels.top_k(x, 1)[1][:, 0], x.max(dim=-1).indices)
    # Ties: values in order, equal ones by index, as greedy decoding needs.
    tied = torch.tensor([[1.0, 3.0, 3.0, 2.0, 3.0] + [0.0] * 40])
    assert cpu_kernels.top_k(tied, 4)[1].tolist() == [[1, 2, 4, 3]]
    assert cpu_kernels.top_k(torch.zeros(1, 50), 3)[1].tolist() == [[0, 1, 2]]


@pytest.mark.parametrize(("tokens", "inner"), [(1, 1536), (9, 40)])  # 40: a partial vector
def test_silu_and_mul_matches_the_reference(tokens: int, inner: int) -> None:
    from mellea.engine.kernels.activation import silu_and_mul_ref

    torch.manual_seed(0)
    x = torch.randn(tokens, 2 * inner) * 4
    x[0, 0], x[0, 1] = -120.0, 120.0  # exp's range clamps
    got = cpu_kernels.silu_and_mul(x)
    assert got.shape == (tokens, inner)
    torch.testing.assert_close(got, silu_and_mul_ref(x), atol=1e-6, rtol=1e-6)
    # A batch-shaped input [B, T, 2I], as a caller of the MLP module may give it.
    batched = cpu_kernels.silu_and_mul(x.unsqueeze(0))
    assert batched.shape == (1, tokens, inner) and torch.equal(batched[0], got)


def test_quantized_linears_refuse_mismatched_operands() -> None:
    q, scale = torch.zeros(8, 32, dtype=torch.int8), torch.ones(8)
    with pytest.raises(RuntimeError, match="qweight"):
        cpu_kernels.int8_linear(torch.randn(2, 16), q, scale)
    with pytest.raises(RuntimeError, match=r"K a multiple of 32|qweight"):
        cpu_kernels.int4_linear(
            torch.randn(2, 48), torch.zeros(8, 24, dtype=torch.uint8), scale.half(), scale.half()
        )
    from mellea.engine.formats.tiles import tile_bytes

    qweight, subs, supers = tile_bytes(*random_byte_blocks(8, 64, False, 1))
    with pytest.raises(RuntimeError, match="subs"):
        cpu_kernels.bytes_linear(torch.randn(2, 64), qweight, subs[:, :1], supers, 8)
    with pytest.raises(RuntimeError, match="supers"):
        cpu_kernels.bytes_linear(torch.randn(2, 64), qweight, subs, supers[:, :, :0], 8)
    with pytest.raises(RuntimeError, match="K = 32"):
        cpu_kernels.bytes_linear(torch.randn(2, 96), qweight, subs, supers, 8)
    with pytest.raises(RuntimeError, match="n: the rows"):
        cpu_kernels.bytes_linear(torch.randn(2, 64), qweight, subs, supers, 17)


@pytest.mark.parametrize(("heads", "kv_heads"), [(4, 4), (6, 2)])
def test_rope_store_kv_matches_the_complex_multiply_and_index_copy(heads, kv_heads) -> None:
    torch.manual_seed(0)
    tokens, dim, blocks, block = 5, 8, 6, 4
    qkv = torch.randn(tokens, (heads + 2 * kv_heads) * dim)
    angles = torch.rand(tokens, 1, dim // 2) * 6
    rope = torch.polar(torch.ones_like(angles), angles)  # complex [T, 1, D/2]
    slots = torch.tensor([3, 0, 17, 9, 22])
    k_cache, v_cache = (
        torch.zeros(blocks, block, kv_heads, dim),
        torch.zeros(blocks, block, kv_heads, dim),
    )
    # The PyTorch path: q|k rotated as complex pairs, then K and V rows copied to the slots.
    q_k = qkv[:, : (heads + kv_heads) * dim].reshape(tokens, heads + kv_heads, -1, 2)
    rotated = torch.view_as_real(torch.view_as_complex(q_k.contiguous()) * rope)
    rotated = rotated.reshape(tokens, (heads + kv_heads) * dim)
    want_k = torch.zeros_like(k_cache).view(-1, kv_heads, dim)
    want_v = torch.zeros_like(v_cache).view(-1, kv_heads, dim)
    want_k.index_copy_(0, slots, rotated[:, heads * dim :].view(tokens, kv_heads, dim))
    want_v.index_copy_(0, slots, qkv[:, (heads + kv_heads) * dim :].view(tokens, kv_heads, dim))
    got = qkv.clone()
    cpu_kernels.rope_store_kv(got, rope, k_cache, v_cache, slots, heads, kv_heads)
    torch.testing.assert_close(got[:, : (heads + kv_heads) * dim], rotated)
    assert torch.equal(got[:, (heads + kv_heads) * dim :], qkv[:, (heads + kv_heads) * dim :])
    torch.testing.assert_close(k_cache.view(-1, kv_heads, dim), want_k)
    assert torch.equal(v_cache.view(-1, kv_heads, dim), want_v)
    with pytest.raises(RuntimeError, match="slot out of the cache"):
        cpu_kernels.rope_store_kv(qkv.clone(), rope, k_cache, v_cache, slots + 100, heads, kv_heads)


@pytest.mark.parametrize("kernel_family", ["avx2"], indirect=True)
@pytest.mark.parametrize("dot", ["avx-vnni", "avx512vl-vnni"])
@pytest.mark.parametrize("rows", [1, 2, 5, 8, 13])
def test_the_avx2_builds_vnni_tiles_match_its_maddubs_ones(kernel_family: str, dot: str, rows):
    """The AVX2 build runs its tiles on 8-lane vpdpbusd where the CPU has AVX-VNNI; the
    same code with AVX-512's encoding of that instruction runs it on an AVX-512 CPU.
    Both give vpmaddubsw's bits (the integer dot products are exact either way)."""
    flags = cpu_kernels.cpu_build.cpu_flags()
    if dot == "avx-vnni" and "avx_vnni" not in flags:
        pytest.skip("this CPU has no AVX-VNNI")
    if dot == "avx512vl-vnni" and not {"avx512vl", "avx512_vnni"} <= flags:
        pytest.skip("this CPU has no AVX512-VL VNNI")
    each = tiled_linears(rows, extremes=False)
    before = cpu_kernels.avx2_dot("maddubs")
    try:
        want = each()
        assert cpu_kernels.avx2_dot(dot) == dot
        got = each()
    finally:
        cpu_kernels.avx2_dot(before)
    assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
    with pytest.raises(RuntimeError, match="maddubs, avx-vnni or avx512vl-vnni"):
        cpu_kernels.avx2_dot("sse")


def test_paged_decode_gives_the_same_bits_at_any_thread_count() -> None:
    """The engine's thread tuner changes the count between steps; attention splits a
    context by the CPUs, not the threads, so a step's result stays the same."""
    torch.manual_seed(0)
    block, dim, n_heads, n_kv, num_blocks = 16, 64, 9, 3, 64
    k_cache = torch.randn(num_blocks, block, n_kv, dim)
    v_cache = torch.randn(num_blocks, block, n_kv, dim)
    lens = torch.tensor([300], dtype=torch.int32)
    tables = torch.randperm(num_blocks)[:20].view(1, 20).to(torch.int32)
    q = 3 * torch.randn(1, n_heads, dim)
    threads = torch.get_num_threads()
    got = []
    try:
        for n in (1, os.cpu_count() or 1):
            torch.set_num_threads(n)
            got.append(cpu_kernels.paged_decode(q, k_cache, v_cache, tables, lens, 0.125, None))
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(got[0], got[1])

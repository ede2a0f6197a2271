"""The KV cache's dtype (``kv_cache_dtype``): float16 on CPU by default, read and written
by every compute path, and close to a float32 cache."""

from __future__ import annotations

import asyncio

import pytest
import torch

from mellea.engine import cpu_kernels
from mellea.engine.compute_path import ComputePath
from mellea.engine.config import ModelConfig, resolve_kv_dtype
from mellea.engine.types import SamplingParams

CPU, CUDA = torch.device("cpu"), torch.device("cuda")
needs_kernels = pytest.mark.skipif(not cpu_kernels.available(), reason="no C++ CPU ops")


def test_auto_is_float16_on_cpu_and_the_models_dtype_on_gpu() -> None:
    assert resolve_kv_dtype("auto", CPU, torch.float32) is torch.float16
    assert resolve_kv_dtype(None, CPU, torch.float32) is torch.float16
    assert resolve_kv_dtype("auto", CUDA, torch.bfloat16) is torch.bfloat16
    assert resolve_kv_dtype("float32", CPU, torch.float32) is torch.float32
    assert resolve_kv_dtype("bfloat16", CPU, torch.float32) is torch.bfloat16
    assert resolve_kv_dtype(torch.float16, CUDA, torch.bfloat16) is torch.float16
    with pytest.raises(ValueError, match="kv_cache_dtype must be one of"):
        resolve_kv_dtype("q8_0", CPU, torch.float32)
    with pytest.raises(ValueError, match="not a cache dtype"):
        resolve_kv_dtype(torch.int8, CPU, torch.float32)


def test_a_half_width_cache_holds_twice_the_tokens(make_engine) -> None:
    """The same budget holds twice the tokens in float16 as in float32, and the cache
    is allocated in the dtype asked for."""
    budget = 1 << 20
    wide = make_engine(kv_cache_memory=budget, kv_cache_dtype="float32")
    half = make_engine(kv_cache_memory=budget, kv_cache_dtype="auto")  # float16 on CPU
    assert wide.runner.k_cache.dtype is torch.float32
    assert half.runner.k_cache.dtype is torch.float16
    assert half.blocks.num_blocks == 2 * wide.blocks.num_blocks
    assert half.runner.kv_cache_bytes == wide.runner.kv_cache_bytes


def test_tokens_per_gib_of_the_bundled_and_1_7b_shapes() -> None:
    """What a GiB holds, from the configs: layers x kv_heads x head_dim x 2 x bytes a
    token (the numbers docs/engine.md quotes)."""

    def per_gib(layers: int, kv_heads: int, head_dim: int, dtype: torch.dtype) -> int:
        cfg = ModelConfig.from_dict(
            {
                "model_type": "llama",
                "vocab_size": 100,
                "hidden_size": kv_heads * head_dim,
                "intermediate_size": 64,
                "num_hidden_layers": layers,
                "num_attention_heads": kv_heads,
                "num_key_value_heads": kv_heads,
                "max_position_embeddings": 2048,
            }
        )
        return (1 << 30) // cfg.kv_bytes_per_token(dtype)

    # SmolLM2-135M: 30 layers, 3 KV heads of 64; SmolLM2-1.7B: 24 layers, 32 of 64.
    assert per_gib(30, 3, 64, torch.float32) == 23_301
    assert per_gib(30, 3, 64, torch.float16) == 46_603
    assert per_gib(24, 32, 64, torch.float32) == 2_730
    assert per_gib(24, 32, 64, torch.float16) == 5_461


PATHS = {
    ComputePath.REFERENCE: ({"MELLEA_ENGINE_REFERENCE": "1"}, "float32"),
    ComputePath.TORCH: ({"MELLEA_CPU_KERNEL": "0"}, "float32"),
    ComputePath.CPP: ({}, "float32"),
    ComputePath.CPP_FUSED: ({}, "int4"),
}


async def _greedy(engine, prompt: list[int]) -> tuple[list[int], torch.Tensor]:
    """The greedy tokens of ``prompt`` and their logprobs."""
    tokens, logprobs = [], []
    async for out in engine.add_request(prompt, SamplingParams(max_tokens=12, logprobs=0)):
        tokens += out.token_ids
        logprobs += [lp.logprob for lp in out.logprobs]
    return tokens, torch.tensor(logprobs)


@pytest.mark.parametrize("path", list(PATHS), ids=lambda p: p.value)
@pytest.mark.parametrize("kv_dtype", ["float16", "bfloat16"])
def test_a_half_width_cache_stays_close_to_float32_on_each_path(
    make_engine, monkeypatch, path: ComputePath, kv_dtype: str
) -> None:
    """float16: greedy tokens identical and their logprobs within 0.05 nats of a float32
    cache's (measured: at most 0.03), through prefill, prefix-cache hit and decode, on
    every CPU compute path. bfloat16 drifts about 8x more (0.17 nats before the texts
    part): it stays an opt-in."""
    if path.cpp and not cpu_kernels.available():
        pytest.skip("no C++ CPU ops")
    env, weights = PATHS[path]
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    prompts = [[1, *range(40 + 7 * i, 60 + 9 * i)] for i in range(3)]
    outs = {}
    for dtype in ("float32", kv_dtype):
        engine = make_engine(dtype=weights, kv_cache_dtype=dtype)
        assert engine.core.config.compute_path is path
        # The first prompt again at the end: then it comes from the prefix cache (a
        # prefill that reads the cache back).
        outs[dtype] = [asyncio.run(_greedy(engine, p)) for p in [*prompts, prompts[0]]]
        assert engine.runner.k_cache.dtype is getattr(torch, dtype)
    for (want, want_lp), (got, got_lp) in zip(outs["float32"], outs[kv_dtype], strict=True):
        if kv_dtype == "float16":
            assert got == want
            assert (got_lp - want_lp).abs().max() <= 0.05
        else:  # bf16's 8-bit mantissa: this random model's ties may part after a few tokens
            same = next(
                (i for i, (a, b) in enumerate(zip(want, got, strict=False)) if a != b), len(want)
            )
            assert same >= 4
            assert (got_lp[:same] - want_lp[:same]).abs().max() <= 0.25


@needs_kernels
@pytest.mark.parametrize("kv_dtype", [torch.float16, torch.bfloat16])
def test_paged_decode_reads_a_half_width_cache_with_fp32_queries(kv_dtype, kernel_family) -> None:
    """fp32 queries over a bf16/fp16 cache: attention over the cache's values as fp32,
    an fp32 result."""
    from tests.engine.test_cpu_kernels import gathered_attention

    torch.manual_seed(0)
    block, dim, n_heads, n_kv, num_blocks = 4, 64, 6, 2, 64
    k_cache = torch.randn(num_blocks, block, n_kv, dim).to(kv_dtype)
    v_cache = torch.randn(num_blocks, block, n_kv, dim).to(kv_dtype)
    lens = torch.tensor([1, 7, 13, 60], dtype=torch.int32)
    tables = torch.randperm(num_blocks)[:64].view(4, 16).to(torch.int32)
    q = torch.randn(4, n_heads, dim)
    got = cpu_kernels.paged_decode(q, k_cache, v_cache, tables, lens, 0.125, None)
    want = gathered_attention(q, k_cache.float(), v_cache.float(), tables, lens, 0.125, None)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)


@needs_kernels
@pytest.mark.parametrize("kv_dtype", [torch.float16, torch.bfloat16])
def test_rope_store_kv_rounds_into_a_half_width_cache_as_torch_does(
    kv_dtype, kernel_family
) -> None:
    """The C++ op writes what the PyTorch path's index_copy_ of k.to(cache dtype) writes,
    bit for bit (round to nearest even)."""
    torch.manual_seed(0)
    tokens, dim, heads, kv_heads, blocks, block = 5, 64, 4, 2, 6, 4
    qkv = 30 * torch.randn(tokens, (heads + 2 * kv_heads) * dim)
    angles = torch.rand(tokens, 1, dim // 2) * 6
    rope = torch.polar(torch.ones_like(angles), angles)
    slots = torch.tensor([3, 0, 17, 9, 22])
    fp32 = [torch.zeros(blocks, block, kv_heads, dim) for _ in range(2)]
    half = [torch.zeros(blocks, block, kv_heads, dim, dtype=kv_dtype) for _ in range(2)]
    rotated = qkv.clone()
    cpu_kernels.rope_store_kv(rotated, rope, *fp32, slots, heads, kv_heads)
    got = qkv.clone()
    cpu_kernels.rope_store_kv(got, rope, *half, slots, heads, kv_heads)
    assert torch.equal(got, rotated)  # q and k rotated as with an fp32 cache
    for wide, narrow in zip(fp32, half, strict=True):
        assert torch.equal(narrow, wide.to(kv_dtype))


def test_serve_settings_take_the_engines_kv_dtypes_and_refuse_others(
    tmp_path, tiny_model_dir
) -> None:
    """--kv-cache-dtype lists the engine's names, reaches each engine built (auto leaves
    the engine's default), and a bad value stops the start."""
    from cli.serve.settings import KV_CACHE_DTYPES, ServeSettings, SettingsError, check_settings
    from mellea.backends.runtime import Runtime
    from mellea.engine.config import KV_CACHE_DTYPES as ENGINE_KV_DTYPES

    assert tuple(ENGINE_KV_DTYPES) == KV_CACHE_DTYPES
    settings = ServeSettings(program=str(tmp_path / "p.py"), kv_cache_dtype="float32")
    assert settings.runtime().kv_cache_dtype == "float32"
    assert ServeSettings(program="p.py").kv_cache_dtype == "auto"
    with pytest.raises(SettingsError, match="--kv-cache-dtype 'q4'"):
        check_settings(ServeSettings(program="p.py", kv_cache_dtype="q4"))
    built: list[dict] = []

    def factory(model, **kwargs):
        built.append(kwargs)
        raise RuntimeError("not built")

    for kv_dtype in ("float32", "auto"):
        runtime = Runtime(kv_cache_dtype=kv_dtype, engine_factory=factory)
        with pytest.raises(RuntimeError, match="not built"):
            runtime.engine(str(tiny_model_dir))
    assert built[0]["kv_cache_dtype"] == "float32"
    assert "kv_cache_dtype" not in built[1]


@pytest.mark.model
@pytest.mark.parametrize("weights", ["float32", "int4"])
def test_float16_kv_passes_the_quality_bar_on_the_default_model(real_engine, weights: str):
    """The default model with a float16 cache against the same weights with a float32
    one, over the 12 quality prompts x 32 tokens, teacher-forced through the cache (a
    fresh prefill never reads it): mean logprob of the float32 cache's greedy text within
    0.2 % (KV_LOGPROB_TOLERANCE) and identical greedy text on at least
    MIN_EXACT_AGREEMENT['kv-float16'] of the prompts (see tests/format_quality.py for
    the numbers measured)."""
    from mellea.engine.engine import Engine
    from tests import format_quality as quality

    wide = real_engine if weights == "float32" else Engine(dtype=weights, kv_cache_dtype="float32")
    try:
        assert wide.runner.k_cache.dtype is torch.float32
        reference = quality.reference(wide, through_cache=True)
    finally:
        if wide is not real_engine:
            wide.shutdown()
    engine = Engine(dtype=weights)  # auto: float16 on CPU
    try:
        assert engine.runner.k_cache.dtype is torch.float16
        score = quality.compare("kv-float16", engine, reference)
    finally:
        engine.shutdown()
    assert score.relative_logprob_drop <= quality.KV_LOGPROB_TOLERANCE, score.summary()
    assert score.exact_agreement >= quality.MIN_EXACT_AGREEMENT["kv-float16"], score.summary()


@needs_kernels
@pytest.mark.parametrize("kv_dtype", ["float16", "bfloat16"])
def test_fused_decode_layers_on_a_half_width_cache_match_the_layer_path(make_engine, kv_dtype):
    """The fused C++ layer on a float16/bfloat16 cache computes exactly what the layers'
    own path does on it (the two share rope_store_kv and paged_decode)."""
    from tests.engine.decode_batch import decode_batch

    runner = make_engine(dtype="int4", kv_cache_dtype=kv_dtype).runner
    model = runner.model
    assert model.path is ComputePath.CPP_FUSED
    inputs = decode_batch(runner, [40, 70, 9])
    args = (inputs.input_ids, inputs.positions, runner.kv_caches, inputs.meta)
    with torch.inference_mode():
        fused = model(*args)
        model.set_path(ComputePath.CPP)
        layered = model(*args)
    assert torch.equal(fused, layered)
    assert layered.abs().max() > 0

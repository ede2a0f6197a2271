"""Weight formats (mellea/engine/formats/): layers, conversion, the flag's path, quality."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from mellea.engine.formats.convert import convert_weights
from mellea.engine.formats.head import RefinedHead
from mellea.engine.formats.linear import Bf16Linear, Int4Linear, Int8Linear
from mellea.engine.formats.quantize import quantize_rows
from mellea.engine.formats.resolve import FORMATS, resolve_format

CPU = torch.device("cpu")


@pytest.mark.parametrize("rows", [1, 3, 12, 13, 40])  # both of Int8Linear's kernels
def test_int8_linear_matches_fp32_linear(rows: int):
    torch.manual_seed(0)
    linear = nn.Linear(96, 80, bias=True)
    x = torch.randn(rows, 96)
    int8 = Int8Linear(linear.weight, linear.bias)
    want = linear(x)
    got = int8(x)
    assert got.dtype == torch.float32 and got.shape == want.shape
    # int8 rounding of the weights (<= scale/2 each) plus bf16 rounding of x.
    assert (got - want).abs().max() <= 0.02 * want.abs().max()
    # Against the dequantized weights, only the bf16 rounding of x remains.
    exact = x @ int8.dequantized().T + linear.bias
    assert (got - exact).abs().max() <= 0.01 * exact.abs().max()


TILED_FAMILIES = ["avx512-vnni", "avx2", "generic"]


@pytest.fixture(params=[*TILED_FAMILIES, "no-kernels"])
def tiled(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch):
    """Whether the quantized layers built in the test take the C++ kernels' tiled layout:
    yes under each kernel family this CPU runs (the same layout for all), no without
    the kernels."""
    from mellea.engine import cpu_kernels

    if request.param == "no-kernels":
        monkeypatch.setattr(cpu_kernels, "available", lambda: False)
        yield False
        return
    if not cpu_kernels.cpu_runs(request.param):
        pytest.skip(f"this CPU cannot run the {request.param} kernels")
    before = cpu_kernels.select(request.param)
    yield True
    cpu_kernels.select(before)


@pytest.mark.parametrize("rows", [1, 32, 33])  # the kernel, then the bf16 GEMM
def test_int8_layouts_hold_the_same_weights(rows: int, tiled: bool):
    torch.manual_seed(0)
    weight, bias = torch.randn(40, 64), torch.randn(40)
    layer = Int8Linear(weight, bias)
    assert layer.tiled == tiled
    q = quantize_rows(weight)[0]
    assert torch.equal(layer.rows(), q)
    x = torch.randn(rows, 64)
    want = x.double() @ layer.dequantized().double().T + bias.double()
    if tiled and rows <= layer.max_kernel_rows:
        from tests.engine.test_cpu_kernels import activation_error_bound

        bound = activation_error_bound(x, layer.dequantized()) + 1e-5
        assert ((layer(x).double() - want).abs() <= bound).all()
    else:  # fp32 activations, or bf16 ones for the GEMM
        assert (layer(x).double() - want).abs().max() <= 0.01 * want.abs().max()


@pytest.mark.parametrize("rows", [1, 33, 300])  # decode steps and prompt chunks
def test_the_byte_form_takes_every_length_to_its_kernel(rows: int, tiled: bool):
    """A GGUF layer in the exact byte form multiplies its exact weights at every input
    length (prompt chunks too: no bf16 widening, which would round them), with the bias
    and the input's leading dimensions kept; without the C++ kernels it is refused by
    name (the loader then keeps per-row int8)."""
    from tests.engine.test_cpu_kernels import (
        activation_error_bound,
        byte_blocks_weight,
        random_byte_blocks,
    )

    blocks = random_byte_blocks(40, 64, True, 1)
    bias = torch.randn(40)
    if not tiled:
        with pytest.raises(ValueError, match="needs the C"):
            Int8Linear(None, bias, blocks=blocks)
        return
    layer = Int8Linear(None, bias, blocks=blocks)
    weight = byte_blocks_weight(blocks)
    assert layer.exact and torch.equal(layer.dequantized(), weight)
    with pytest.raises(ValueError, match="no per-row int8"):
        layer.rows()
    torch.manual_seed(0)
    x = torch.randn(2, rows, 64)
    got = layer(x)
    assert got.shape == (2, rows, 40)
    want = x.double() @ weight.double().T + bias.double()
    bound = activation_error_bound(x.view(-1, 64), weight).view(2, rows, 40) + 1e-5
    assert ((got.double() - want).abs() <= bound).all()


@pytest.mark.parametrize(
    ("flags", "onednn", "native"),
    [
        ({"avx2", "avx512_bf16"}, "", True),
        ({"avx2", "amx_bf16"}, "AVX512_CORE_AMX", True),
        ({"avx2", "avx512_bf16"}, "AVX2", False),  # the AVX2 path on an AVX-512 CPU
        ({"avx2", "fma"}, "", False),
    ],
)
def test_int8_kernel_takes_prompt_chunks_where_bf16_is_emulated(monkeypatch, flags, onednn, native):
    """Widening int8 to the bf16 GEMM only pays where the CPU multiplies bf16 itself."""
    from mellea.engine.formats import cpu_support

    monkeypatch.setattr(cpu_support, "cpu_flags", lambda: flags)
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", onednn)
    assert cpu_support.bf16_gemm_is_native() is native
    most = cpu_support.int8_vnni_max_rows()
    assert (most == cpu_support.INT8_VNNI_MAX_ROWS) is native and (
        most >= cpu_support.INT8_VNNI_MAX_ROWS
    )


def test_quantize_rows_is_symmetric_per_output_channel():
    w = torch.tensor([[0.5, -1.0, 0.25], [100.0, 50.0, -25.0]])
    q, scale = quantize_rows(w)
    assert q.dtype == torch.int8
    assert scale.tolist() == pytest.approx([1.0 / 127, 100.0 / 127])
    assert q[:, 1].abs().max() <= 127 and q[0, 1] == -127 and q[1, 0] == 127
    assert torch.allclose(q.float() * scale[:, None], w, atol=scale.max().item() / 2)


def test_bf16_linear_returns_fp32_close_to_fp32():
    torch.manual_seed(0)
    linear = nn.Linear(64, 32)
    x = torch.randn(5, 64)
    got = Bf16Linear(linear.weight, linear.bias)(x)
    assert got.dtype == torch.float32
    assert (got - linear(x)).abs().max() <= 0.02 * linear(x).abs().max()


@pytest.mark.parametrize("fmt", ["bfloat16", "int8"])
def test_refined_head_gives_the_best_logits_in_fp32(fmt: str):
    torch.manual_seed(0)
    weight = torch.randn(500, 48)
    inner = Bf16Linear(weight, None) if fmt == "bfloat16" else Int8Linear(weight, None)
    hidden = 4 * torch.randn(3, 48)  # logits of size ~25: bf16 output steps of 1/8
    logits = RefinedHead(inner, weight)(hidden)
    exact = hidden @ weight.T
    top = exact.topk(5, dim=-1).indices
    assert torch.allclose(logits.gather(1, top), exact.gather(1, top), atol=1e-4)
    assert torch.equal(logits.argmax(-1), exact.argmax(-1))
    rounded = inner(hidden)  # without the refinement: the format's own rounding
    assert (rounded.float().gather(1, top) - exact.gather(1, top)).abs().max() > 1e-3


def test_resolve_format_names_and_errors():
    assert resolve_format(None, CPU) == "float32"
    assert resolve_format("bf16", CPU) == "bfloat16"
    assert resolve_format(torch.float32, CPU) == "float32"
    assert resolve_format("auto", CPU) in FORMATS[1:]
    assert resolve_format("auto", torch.device("cuda")) == "bfloat16"
    with pytest.raises(ValueError, match="unknown dtype 'int3'"):
        resolve_format("int3", CPU)
    for fmt in ("int8", "int4"):
        with pytest.raises(ValueError, match="CPU only"):
            resolve_format(fmt, torch.device("cuda"))


def _checkpoint(path: Path, weight: torch.Tensor) -> Path:
    from safetensors.torch import save_file

    path.mkdir(parents=True, exist_ok=True)
    save_file(
        {
            "model.embed_tokens.weight": torch.randn(10, weight.shape[1]),
            "model.layers.0.self_attn.q_proj.weight": weight.contiguous(),
            "model.norm.weight": torch.ones(weight.shape[1]),
        },
        str(path / "model.safetensors"),
    )
    return path


def test_auto_serves_a_checkpoint_as_it_is_stored(tmp_path, monkeypatch):
    """int4 for weights that are 4-bit already (a Q4 GGUF's), else the checkpoint's own
    dtype: never int8, which rounds trained weights (issue 21)."""
    from mellea.engine.formats import detect, quantize, resolve

    torch.manual_seed(0)
    trained = torch.randn(64, 96)
    four_bit = quantize.dequantize_groups(*quantize.quantize_groups(trained))  # as from a Q4 GGUF
    q4_dir, fp_dir = _checkpoint(tmp_path / "q4", four_bit), _checkpoint(tmp_path / "fp", trained)
    bf16_dir = _checkpoint(tmp_path / "bf16", trained.bfloat16())
    fp16_dir = _checkpoint(tmp_path / "fp16", trained.half())
    assert detect.checkpoint_is_4bit(q4_dir) and not detect.checkpoint_is_4bit(fp_dir)
    short_q4 = _checkpoint(tmp_path / "short", four_bit[:32])  # fewer rows than it reads
    assert detect.checkpoint_is_4bit(short_q4) and not detect.checkpoint_is_4bit(bf16_dir)
    assert [detect.stored_dtype(d) for d in (fp_dir, bf16_dir, fp16_dir)] == [
        "float32",
        "bfloat16",
        "float16",
    ]
    monkeypatch.setattr(resolve.cpu_kernels, "available", lambda: True)
    monkeypatch.setattr(resolve.cpu_kernels, "family", lambda: "avx2")
    for native_bf16 in (True, False):
        monkeypatch.setattr(resolve, "cpu_has_native_bf16", lambda native=native_bf16: native)
        assert resolve_format("auto", CPU, q4_dir) == "int4"
        assert resolve_format("auto", CPU, fp_dir) == "float32"
        assert resolve_format("auto", CPU, fp16_dir) == "float32"  # bf16 would round fp16
        want = "bfloat16" if native_bf16 else "float32"
        assert resolve_format("auto", CPU, bf16_dir) == want
        assert resolve_format("auto", CPU) == "float32"  # no checkpoint to read
    for slow in ("generic", "none"):  # no SIMD kernels, or none at all
        monkeypatch.setattr(resolve.cpu_kernels, "family", lambda slow=slow: slow)
        assert resolve_format("auto", CPU, q4_dir) == "float32"  # exact, and no slow int4


@pytest.mark.model
def test_auto_keeps_int4_for_the_default_models_q4_gguf():
    """The bundled model is served from its Q4_1 GGUF (a metadata directory pointing at
    the file, no safetensors weights), and auto serves it as the file holds it."""
    from mellea.engine import cpu_kernels
    from mellea.engine.formats.detect import checkpoint_is_4bit, stored_dtype
    from mellea.engine.gguf_file import gguf_source
    from mellea.engine.loader import resolve_model

    path = resolve_model(None)
    assert gguf_source(path) is not None and stored_dtype(path) is None
    assert checkpoint_is_4bit(path)
    # A quantized GGUF is served in its own bits wherever the C++ kernels run (issue 39).
    want = "int4" if cpu_kernels.available() else "float32"
    assert resolve_format("auto", CPU, path) == want


def test_auto_names_the_faster_opt_in_once_at_start(tmp_path, tiny_model_dir, caplog):
    from mellea.engine.core import EngineCore

    with caplog.at_level("INFO", logger="mellea.engine"):
        core = EngineCore(tiny_model_dir, dtype="auto")
    assert core.config.weights == "float32"  # the tiny model is stored in fp32
    notes = [r.getMessage() for r in caplog.records if "--dtype int8" in r.getMessage()]
    assert len(notes) == 1 and "float32, the checkpoint's own" in notes[0], notes
    caplog.clear()
    with caplog.at_level("INFO", logger="mellea.engine"):
        EngineCore(tiny_model_dir, dtype="float32")  # asked for: nothing to say
    assert not [r for r in caplog.records if "--dtype int8" in r.getMessage()]


def test_int4_groups_round_trip_and_tell_4bit_weights_apart():
    from mellea.engine.formats.detect import int4_is_exact
    from mellea.engine.formats.quantize import dequantize_groups, quantize_groups

    torch.manual_seed(0)
    weight = torch.randn(5, 64)
    packed, scales, mins = quantize_groups(weight)
    assert packed.shape == (5, 32) and packed.dtype == torch.uint8
    assert scales.shape == mins.shape == (5, 2)
    assert scales.dtype == mins.dtype == torch.float16
    back = dequantize_groups(packed, scales, mins)
    step = scales.float().repeat_interleave(32, dim=1)
    assert ((back - weight).abs() <= step / 2 + 2e-3).all()  # the nearest step (fp16 scales)
    assert torch.equal(mins, weight.view(5, 2, 32).amin(-1).half())  # each group's minimum
    assert not int4_is_exact(weight) and int4_is_exact(back)
    constant = torch.full((2, 32), 0.5)  # a group of one value: no step at all
    assert torch.equal(dequantize_groups(*quantize_groups(constant)), constant)
    with pytest.raises(ValueError, match="divisible by 32"):
        quantize_groups(torch.randn(3, 40))


@pytest.mark.parametrize("rows", [1, 31, 32, 33, 70])  # the kernel and the fp32 GEMM
def test_int4_linear_rounds_only_its_weights(rows: int, tiled: bool):
    """Exact for its stored weights on fp32 activations; in the kernels the activations
    keep about 16 bits (see tests/engine/test_cpu_kernels.py for the bound)."""
    from mellea.engine.formats.linear import Int4Linear

    torch.manual_seed(0)
    weight, bias = torch.randn(48, 64), torch.randn(48)
    layer = Int4Linear(weight, bias)
    assert layer.tiled == tiled
    x = torch.randn(rows, 64)
    want = x.double() @ layer.dequantized().double().T + bias.double()
    if tiled:  # the kernel at every length
        from tests.engine.test_cpu_kernels import activation_error_bound

        bound = activation_error_bound(x, layer.dequantized()) + 1e-5
        assert ((layer(x).double() - want).abs() <= bound).all()
    else:
        torch.testing.assert_close(layer(x).double(), want, atol=1e-4, rtol=1e-5)
    assert (layer(x) - (x @ weight.T + bias)).abs().max() > 1e-3  # it is 4-bit, though


def test_settings_list_the_same_formats_as_the_engine():
    from cli.serve.settings import DTYPES

    assert DTYPES == FORMATS


@pytest.mark.parametrize("fmt", ["bfloat16", "int8", "int4"])
def test_engine_converts_its_weights_and_stays_close_to_fp32(make_engine, fmt: str):
    fp32 = make_engine(dtype="float32")
    other = make_engine(dtype=fmt)
    model = other.runner.model
    assert other.config.weights == fmt and other.config.dtype == torch.float32
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    assert linears == []  # every linear layer converted
    wanted = {"bfloat16": Bf16Linear, "int8": Int8Linear, "int4": Int4Linear}[fmt]
    assert isinstance(model.layers[0].mlp.down_proj, wanted)
    assert isinstance(model.lm_head, RefinedHead)  # the tied head, over the embedding table
    assert isinstance(model.lm_head.inner, wanted)
    assert isinstance(model.embed_tokens, nn.Embedding)  # lookups stay fp32
    assert torch.equal(model.lm_head.exact, model.embed_tokens.weight)
    from tests import format_quality as quality

    if fmt == "int4":  # 4 bits of the tiny model's large random weights move it far:
        _round_weights_like(fp32.runner.model, fmt)  # compare with the same weights
    prompt = fp32.tokenizer.encode("The tiny model says")
    (continuation,) = quality.greedy_continuations(fp32, [prompt], 8)
    want = quality.teacher_forced_logprobs(fp32, prompt, continuation)
    got = quality.teacher_forced_logprobs(other, prompt, continuation)
    assert got.shape == want.shape == (len(continuation), fp32.model_config.vocab_size)
    # The next-token distributions stay close: a conversion bug (a weight transposed,
    # unscaled, a row order lost) puts their L1 distance near its maximum of 2; the
    # tiny model's large random weights make rounding cost more than on a real model
    # (greedy tokens are compared on the real model, in the quality test below).
    assert (got.exp() - want.exp()).abs().sum(-1).max() < 0.4
    picked = torch.tensor(continuation)[:, None]
    assert abs(got.gather(1, picked).mean() - want.gather(1, picked).mean()) < 0.1


def test_runtime_keys_engines_by_resolved_format(tmp_path: Path):
    from mellea.backends.runtime import Runtime
    from tests.stub_engine import FakeEngine as Fake

    (tmp_path / "config.json").write_text("{}")
    runtime = Runtime(engine_factory=Fake, dtype="int8")  # what m serve --dtype int8 sets
    int8 = runtime.engine(str(tmp_path))
    assert int8.kwargs["dtype"] == "int8"
    assert runtime.engine(str(tmp_path), dtype="int8") is int8
    fp32 = runtime.engine(str(tmp_path), dtype="float32")  # a session's own choice wins
    assert fp32 is not int8 and fp32.kwargs["dtype"] == "float32"
    assert runtime.engine(str(tmp_path), dtype="fp32") is fp32  # another spelling
    auto = runtime.engine(str(tmp_path), dtype="auto")
    assert (auto is fp32) == (resolve_format("auto", CPU) == "float32")
    assert (auto is int8) == (resolve_format("auto", CPU) == "int8")


def test_serve_settings_reach_the_runtime_and_bad_values_are_refused(tmp_path: Path):
    from cli.serve.settings import ServeSettings, SettingsError, check_settings

    settings = ServeSettings(program=str(tmp_path / "p.py"), dtype="bfloat16")
    assert settings.runtime().dtype == "bfloat16"
    assert ServeSettings(program="p.py").dtype == "auto"
    with pytest.raises(SettingsError, match="--dtype 'fp8'"):
        check_settings(ServeSettings(program="p.py", dtype="fp8"))


def test_convert_weights_leaves_float32_alone():
    model = nn.Sequential(nn.Linear(4, 4))
    assert convert_weights(model, "float32")[0].__class__ is nn.Linear


def test_quality_bar_holds_at_each_formats_lowest_measured_agreement():
    """bfloat16 measured 6/12 identical on an AVX2-only CPU (8/12 with native bf16):
    the bar, the same on every CPU family, must take both; int4 must stay exact."""
    from tests.format_quality import FormatQuality

    def score(fmt: str, identical: int) -> FormatQuality:
        return FormatQuality(fmt, -0.681, -0.680, identical / 12, 1.0, 20.0, [])

    assert score("bfloat16", 6).passes and score("int8", 6).passes
    assert not score("bfloat16", 5).passes and not score("int8", 5).passes
    assert score("int4", 12).passes and not score("int4", 11).passes
    worse = FormatQuality("bfloat16", -0.70, -0.68, 1.0, 1.0, 32.0, [])  # 2.9 % lower
    assert not worse.passes


@pytest.mark.model
@pytest.mark.parametrize("fmt", ["bfloat16", "int8", "int4"])
def test_format_passes_the_quality_bar_on_the_default_model(real_engine, fmt: str):
    """Mean logprob of fp32's greedy continuations within 2 % of fp32's own, and
    greedy outputs identical to fp32's (on the same CPU path) for at least half of the
    12 prompts: the bar holds on AVX-512 and AVX2-only CPUs alike (see
    tests/format_quality.py, MIN_EXACT_AGREEMENT). The default model's linear layers
    are 4-bit in its GGUF, so int4 holds them exactly: all 12 identical."""
    from mellea.engine.engine import Engine
    from tests import format_quality as quality

    assert real_engine.config.weights == "float32"
    reference = quality.reference(real_engine)
    engine = Engine(dtype=fmt)
    try:
        score = quality.compare(fmt, engine, reference)
    finally:
        engine.shutdown()
    assert score.relative_logprob_drop <= quality.LOGPROB_TOLERANCE, score.summary()
    assert score.exact_agreement >= quality.MIN_EXACT_AGREEMENT[fmt], score.summary()
    assert score.passes
    if fmt == "int4":
        assert score.exact_agreement == 1.0, score.summary()


def _round_weights_like(model: nn.Module, fmt: str) -> None:
    """Round an fp32 model's linear layers as ``fmt`` stores them, keeping them fp32:
    what remains between the two is the kernels' own rounding (and the LM head's, but
    for its refined best logits)."""
    from mellea.engine.formats.quantize import GROUP, dequantize_groups, quantize_groups

    with torch.no_grad():
        for module in model.layers.modules():
            if isinstance(module, nn.Linear):
                w = module.weight
                if fmt == "int4" and w.shape[1] % GROUP == 0:
                    w.copy_(dequantize_groups(*quantize_groups(w)))
                elif fmt in ("int8", "int4"):
                    q, scale = quantize_rows(w)
                    w.copy_(q.float() * scale[:, None])
                else:
                    w.copy_(w.to(torch.bfloat16).float())


@pytest.mark.parametrize("fmt", ["bfloat16", "int8", "int4"])
def test_every_family_runs_in_each_format(fmt: str, tmp_path_factory, tiny_model_dir: Path):
    """Biases, untied heads, q/k norms, fused checkpoints, soft-capping: converted
    weights serve every family. Against fp32 with the same rounded weights, only the
    kernels' bf16 activations differ, so the next-token distributions stay close
    (the tiny models' large random weights amplify that; a wrong row, scale or
    layout puts the L1 distance near its maximum of 2)."""
    from mellea.engine.engine import Engine
    from tests import format_quality as quality
    from tests.engine.test_families import FAMILY_CONFIGS, build_family

    for name in FAMILY_CONFIGS:
        path = tmp_path_factory.mktemp(f"{name}-{fmt}")
        build_family(name, path, tiny_model_dir)
        fp32, other = Engine(str(path), dtype="float32"), Engine(str(path), dtype=fmt)
        try:
            assert not [m for m in other.runner.model.modules() if isinstance(m, nn.Linear)]
            _round_weights_like(fp32.runner.model, fmt)
            prompt = list(range(5, 40))
            (continuation,) = quality.greedy_continuations(fp32, [prompt], 4)
            want = quality.teacher_forced_logprobs(fp32, prompt, continuation)
            got = quality.teacher_forced_logprobs(other, prompt, continuation)
            distance = (got.exp() - want.exp()).abs().sum(-1).max().item()
            assert distance < 0.4, (name, distance)
        finally:
            fp32.shutdown()
            other.shutdown()


def _mix_in_int8(model) -> None:
    """Make the first layer's qkv and down projections int8 (as a Q4_K_M GGUF's Q6_K
    tensors are) and plan the fused layers again."""
    from mellea.engine.compute_path import ComputePath
    from mellea.engine.formats.linear import Int8Linear

    layer = model.layers[0]
    torch.manual_seed(1)
    for owner, name in ((layer.self_attn, "qkv_proj"), (layer.mlp, "down_proj")):
        old = getattr(owner, name)
        weight = torch.randn(old.out_features, old.in_features) * 0.05
        setattr(owner, name, Int8Linear(weight, None))
    model._fused = None
    model.set_path(ComputePath.CPP)
    assert model.plan_fused_decode() is ComputePath.CPP_FUSED
    model.set_path(ComputePath.CPP_FUSED)


def _mix_in_bytes(model) -> None:
    """Make the first layer's qkv and down projections the exact byte form of a GGUF's
    blocks (qkv with minimums, as a Q4_K_M file's Q4_K q/k beside its Q6_K v; down
    without, as its Q6_K ffn_down) and plan the fused layers again."""
    from mellea.engine.compute_path import ComputePath
    from mellea.engine.formats.linear import Int8Linear
    from tests.engine.test_cpu_kernels import random_byte_blocks

    layer = model.layers[0]
    for (owner, name), mins in (
        ((layer.self_attn, "qkv_proj"), True),
        ((layer.mlp, "down_proj"), False),
    ):
        old = getattr(owner, name)
        blocks = random_byte_blocks(old.out_features, old.in_features, mins, 1, seed=len(name))
        blocks[2].mul_(50)  # weights of the size of the model's own
        setattr(owner, name, Int8Linear(None, None, blocks=blocks))
    model._fused = None
    model.set_path(ComputePath.CPP)
    assert model.plan_fused_decode() is ComputePath.CPP_FUSED
    model.set_path(ComputePath.CPP_FUSED)


@pytest.mark.parametrize("contexts", [[70], [40, 70, 9]])
@pytest.mark.parametrize("weights", ["int4", "int8", "int4 and int8", "int4 and bytes"])
@pytest.mark.parametrize("tiled", TILED_FAMILIES, indirect=True)  # the fused layer is C++
def test_fused_decode_layers_match_the_layer_path_bit_for_bit(
    make_engine, contexts, weights, tiled
):
    """A decode-only int4 or int8 step with the kernels (any family) runs each
    Llama-shaped layer as one C++ op (cpu_kernels.decode_layer), also when a layer mixes
    the two; it must compute exactly what the layers' own path does."""
    from mellea.engine.compute_path import ComputePath
    from tests.engine.decode_batch import decode_batch

    runner = make_engine(dtype="int8" if weights == "int8" else "int4").runner
    model = runner.model
    assert model.path is ComputePath.CPP_FUSED  # the tiny Llama qualifies
    if weights == "int4 and int8":
        _mix_in_int8(model)
    if weights == "int4 and bytes":
        _mix_in_bytes(model)
    inputs = decode_batch(runner, contexts)
    args = (inputs.input_ids, inputs.positions, runner.kv_caches, inputs.meta)
    with torch.inference_mode():
        fused = model(*args)
        model.set_path(ComputePath.CPP)  # the layers' own path
        layered = model(*args)
    assert torch.equal(fused, layered)
    assert layered.abs().max() > 0


def test_auto_logs_its_format_the_kernel_family_and_why(tmp_path, monkeypatch, caplog):
    """One line at start says what `auto` chose on which kernels; on the generic
    kernels (no AVX2, no NEON dot product) the quantized formats lose to float32, so
    auto takes float32."""
    import logging

    from mellea.engine.formats import quantize, resolve

    torch.manual_seed(0)
    four_bit = quantize.dequantize_groups(*quantize.quantize_groups(torch.randn(64, 96)))
    q4_dir = _checkpoint(tmp_path / "q4", four_bit)
    monkeypatch.setattr(resolve, "_logged", set())
    monkeypatch.setattr(resolve, "cpu_has_native_bf16", lambda: False)
    with caplog.at_level(logging.INFO, logger="mellea.engine.formats.resolve"):
        for family, want in [
            ("avx512-vnni", "int4"),
            ("avx2", "int4"),
            ("neon-dotprod", "int4"),
            ("generic", "float32"),
        ]:
            monkeypatch.setattr(resolve.cpu_kernels, "family", lambda f=family: f)
            assert resolve.resolve_format("auto", CPU, q4_dir) == want
            assert resolve.resolve_format("auto", CPU, q4_dir) == want  # logged once
    lines = [r.getMessage() for r in caplog.records if r.name == "mellea.engine.formats.resolve"]
    assert len(lines) == 4
    assert lines[1].startswith("weight format int4 (dtype auto), CPU kernels avx2: ")
    assert lines[2].startswith("weight format int4 (dtype auto), CPU kernels neon-dotprod: ")
    assert "4-bit" in lines[1] and "float32" in lines[3] and "generic" in lines[3]

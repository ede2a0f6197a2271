"""LoRA and aLoRA adapters (mellea/engine/lora/) against PEFT + transformers.

Tiny random models of two families (Llama 3 with biases; OLMo 2 with q/k norms over
the whole projection, whose q/k rows the CPU path reorders) get random PEFT adapters
made here (``init_lora_weights=False``, so B is not zero): a LoRA on every projection,
an rsLoRA on a few, and an aLoRA. Base, adapter and aLoRA requests run in one batch,
with small prefill chunks and KV blocks, then again with their prefixes cached. Each
one's greedy tokens and top-5 logprobs must equal PEFT's with the same adapter, in
fp32 exactly (within ``LOGPROB_ATOL``) and in bf16, int8 and int4 against PEFT over
the base weights rounded as that format stores them (bf16: its products too), within
what the kernels' own rounding leaves. A Mistral-shaped model (no biases or q/k
norms) runs its int4 decode steps through the fused C++ decode layer, which adds the
adapters' products itself, under each kernel family this CPU runs.
"""

from __future__ import annotations

import asyncio
import functools
from pathlib import Path

import pytest
import torch
from torch import nn

from mellea.engine.types import SamplingParams, SamplingParamsError
from tests.engine.test_families import build_family

LOGPROB_ATOL = 2e-3  # fp32 on both sides (see test_families)
TOP_K = 5
NEW_TOKENS = 6
BLOCK_SIZE = 4
CHUNK = 16  # max_num_batched_tokens: longer prompts prefill in several steps
INVOCATION = [901, 902, 903]  # the aLoRA's invocation tokens
FAMILIES = ["llama3", "olmo2"]
ALL_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]

P1 = list(range(300, 323))
P2 = list(range(7000, 7031, 2))
CONVERSATION = list(range(1200, 1240, 3))
P3 = CONVERSATION + [5, 6, 7] + INVOCATION + [11, 12]  # the aLoRA applies from INVOCATION


def make_adapter(model_dir: Path, out: Path, seed: int, **lora: object) -> Path:
    """Save a random PEFT adapter for the model in ``model_dir`` to ``out``."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    torch.manual_seed(seed)
    config = LoraConfig(task_type="CAUSAL_LM", init_lora_weights=False, **lora)
    model = get_peft_model(base, config)
    with torch.no_grad():  # PEFT's B init is small next to these models' weights
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.mul_(4.0)
    model.save_pretrained(out)
    return out


ADAPTERS = {
    "lora": dict(r=4, lora_alpha=8, target_modules=ALL_TARGETS),
    "rslora": dict(
        r=8, lora_alpha=4, use_rslora=True, target_modules=["q_proj", "v_proj", "down_proj"]
    ),
    "alora": dict(
        r=4,
        lora_alpha=8,
        target_modules=["q_proj", "k_proj", "v_proj"],
        alora_invocation_tokens=INVOCATION,
    ),
}


@pytest.fixture(scope="module", params=FAMILIES)
def family(request, tmp_path_factory, tiny_model_dir):
    """(name, model dir, {adapter name: dir}) of each family."""
    name = request.param
    path = tmp_path_factory.mktemp(name)
    build_family(name, path, tiny_model_dir)
    dirs = {
        adapter: make_adapter(path, path / f"adapter-{adapter}", seed, **config)
        for seed, (adapter, config) in enumerate(ADAPTERS.items())
    }
    return name, path, dirs


def _bf16_linear(module: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """What Bf16Linear computes: a bf16 multiply (its product rounded), the bias in fp32."""
    out = nn.functional.linear(x.to(torch.bfloat16), module.weight.to(torch.bfloat16)).float()
    return out if module.bias is None else out + module.bias


def round_linears(model: nn.Module, fmt: str) -> None:
    """Round a transformers model's decoder linears as ``fmt`` stores them (in place);
    for bfloat16 their products too, as Bf16Linear does (a LoRA's stay fp32)."""
    from mellea.engine.formats.quantize import (
        GROUP,
        dequantize_groups,
        quantize_groups,
        quantize_rows,
    )

    if fmt == "float32":
        return
    with torch.no_grad():
        for name, module in list(model.named_modules()):
            if ".layers." not in name or "lora" in name or type(module) is not nn.Linear:
                continue
            w = module.weight
            if fmt == "int4" and w.shape[1] % GROUP == 0:
                w.copy_(dequantize_groups(*quantize_groups(w)))
            elif fmt in ("int8", "int4"):
                q, scale = quantize_rows(w)
                w.copy_(q.float() * scale[:, None])
            else:
                w.copy_(w.to(torch.bfloat16).float())
                module.forward = functools.partial(_bf16_linear, module)


def reference_model(path: Path, dirs: dict[str, Path], fmt: str):
    """PEFT over the base model (weights rounded as ``fmt``) with every adapter loaded."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    round_linears(base, fmt)
    names = list(dirs)
    model = PeftModel.from_pretrained(base, dirs[names[0]], adapter_name=names[0])
    for name in names[1:]:
        model.load_adapter(dirs[name], adapter_name=name)
    return model.eval()


def reference(model, adapter: str | None, prompt: list[int], tokens: list[int]) -> torch.Tensor:
    """[len(tokens), vocab] log-softmax before each of ``tokens`` under ``adapter`` (on
    the CPU, wherever the model runs)."""
    ids = torch.tensor([prompt + tokens], device=model.device)
    with torch.inference_mode():
        if adapter is None:
            with model.disable_adapter():
                logits = model(input_ids=ids).logits[0]
        else:
            model.set_adapter(adapter)
            logits = model(input_ids=ids).logits[0]
    return torch.log_softmax(logits.float()[len(prompt) - 1 : -1], dim=-1).cpu()


def reference_greedy(model, adapter: str | None, prompt: list[int], n: int) -> list[int]:
    """PEFT's own greedy continuation (its generate, with aLoRA offsets of its own)."""
    kwargs = dict(max_new_tokens=n, do_sample=False, pad_token_id=0)
    ids = torch.tensor([prompt])
    mask = torch.ones_like(ids)
    with torch.inference_mode():
        if adapter is None:
            with model.disable_adapter():
                out = model.generate(input_ids=ids, attention_mask=mask, **kwargs)
        else:
            model.set_adapter(adapter)
            out = model.generate(input_ids=ids, attention_mask=mask, **kwargs)
    return out[0, len(prompt) :].tolist()


async def run(engine, requests: list[tuple[list[int], str | None]]):
    """Submit all at once; per request (tokens, logprob entries, last output)."""

    async def one(prompt, adapter):
        params = SamplingParams(
            max_tokens=NEW_TOKENS, logprobs=TOP_K, ignore_eos=True, adapter=adapter
        )
        tokens, entries, last = [], [], None
        async for out in engine.add_request(prompt, params):
            tokens += out.token_ids
            entries += out.logprobs or []
            last = out
        return tokens, entries, last

    return await asyncio.gather(*(one(p, a) for p, a in requests))


def check(model, adapter, prompt, tokens, entries, fmt: str) -> None:
    """Our tokens and top-5 logprobs against PEFT's under the same adapter."""
    want = reference(model, adapter, prompt, tokens)
    assert len(entries) == len(tokens) == NEW_TOKENS
    if fmt == "float32":
        assert tokens == reference_greedy(model, adapter, prompt, NEW_TOKENS), adapter
    for row, token, entry in zip(want, tokens, entries, strict=True):
        values, ids = row.topk(TOP_K)
        got = torch.tensor([v for _, v in entry.top])
        if fmt == "float32":
            assert [t for t, _ in entry.top] == ids.tolist(), adapter
            torch.testing.assert_close(got, values, atol=LOGPROB_ATOL, rtol=0)
        else:  # the kernels round activations: close, and greedy wherever it is clear
            ours = torch.tensor([t for t, _ in entry.top])
            torch.testing.assert_close(row[ours], got, atol=FORMAT_ATOL[fmt], rtol=0)
            if values[0] - values[1] > 2 * FORMAT_ATOL[fmt]:
                assert token == ids[0].item(), adapter


# What the kernels' own rounding (int8's and int4's of activations, the order of bf16
# sums) moves a logprob by on these tiny models, measured up to 0.10 (bf16), 0.02
# (int8), 0.07 (int4); a missing or misplaced delta moves the tokens themselves.
FORMAT_ATOL = {"bfloat16": 0.2, "int8": 0.1, "int4": 0.15}


@pytest.mark.parametrize(
    ("fmt", "route"),
    [
        ("float32", "stacked"),
        ("float32", "grouped"),
        ("bfloat16", "stacked"),
        ("int8", "packed"),
        ("int4", "packed"),
        ("int4", "stacked"),
    ],
)
async def test_adapters_match_peft_in_mixed_batches(family, fmt: str, route: str, monkeypatch):
    """How the hooks add the deltas: ``stacked``, in fp32 on the stacked pairs where
    steps mix adapters; ``grouped``, in fp32 per adapter; ``packed``, int8/int4 weights
    on the C++ kernels, through ``lora_add`` from the fp16 packs (prompt chunks too)."""
    from mellea.engine.lora import adapter_set, deltas
    from mellea.engine.lora import step as lora_step

    if route == "grouped":
        monkeypatch.setattr(lora_step, "STACKED_MIN_SHARE", 2.0)
    if route == "stacked" and fmt == "int4":  # as without the C++ kernels: no packs
        monkeypatch.setattr(adapter_set, "reads_packs", lambda model: False)
    stacked_calls, packed_rows = [], []
    real_stacked, real_packed = deltas.apply_stacked, deltas.apply_packed
    monkeypatch.setattr(
        deltas, "apply_stacked", lambda *a: stacked_calls.append(1) or real_stacked(*a)
    )
    monkeypatch.setattr(
        deltas,
        "apply_packed",
        lambda out, x, *a: packed_rows.append(x.shape[0]) or real_packed(out, x, *a),
    )
    _, path, dirs = family
    engine = await mixed_batches_match_peft(path, dirs, fmt)
    packed = route == "packed" and engine.runner.model.path.cpp  # on the C++ kernels
    assert bool(packed_rows) == packed
    assert bool(stacked_calls) == (route == "stacked" or (route == "packed" and not packed))
    if packed:  # prompt chunks (CHUNK rows) as well as decode steps
        assert max(packed_rows) == CHUNK


KERNEL_FAMILIES = ["avx512-vnni", "avx2", "generic"]


@pytest.fixture(params=KERNEL_FAMILIES)
def kernel_family(request):
    """Each C++ kernel family this CPU runs, selected for the test."""
    from mellea.engine import cpu_kernels

    if not cpu_kernels.available():
        pytest.skip("no C++ CPU kernels here")
    if not cpu_kernels.cpu_runs(request.param):
        pytest.skip(f"this CPU cannot run the {request.param} kernels")
    before = cpu_kernels.select(request.param)
    yield request.param
    cpu_kernels.select(before)


@pytest.fixture(scope="module")
def fused_family(tmp_path_factory, tiny_model_dir):
    """A Mistral-shaped model, whose int4 layers all fit the fused decode layer, and
    its adapters: (model dir, {adapter name: dir})."""
    path = tmp_path_factory.mktemp("mistral")
    build_family("mistral", path, tiny_model_dir)
    dirs = {
        adapter: make_adapter(path, path / f"adapter-{adapter}", seed, **config)
        for seed, (adapter, config) in enumerate(ADAPTERS.items())
    }
    return path, dirs


async def test_fused_decode_layer_adds_adapters_as_peft(fused_family, kernel_family, monkeypatch):
    """int4 decode steps with adapter rows run each layer as one C++ op that adds the
    adapters' products itself; tokens and logprobs still match PEFT's."""
    from mellea.engine import cpu_kernels
    from mellea.engine.compute_path import ComputePath

    fused_with_lora = []
    real = cpu_kernels.decode_layer

    def spy(*args, **kwargs):
        if kwargs.get("lora") is not None:
            fused_with_lora.append(kwargs["lora_slots"].tolist())
        return real(*args, **kwargs)

    monkeypatch.setattr(cpu_kernels, "decode_layer", spy)
    path, dirs = fused_family
    engine = await mixed_batches_match_peft(path, dirs, "int4")
    assert engine.runner.model.path is ComputePath.CPP_FUSED
    # Decode steps mixing the base, one adapter and several went through the fused op.
    assert any(len(set(slots)) >= 3 and -1 in slots for slots in fused_with_lora)


async def mixed_batches_match_peft(path: Path, dirs: dict[str, Path], fmt: str):
    """Base, LoRA, rsLoRA and aLoRA requests in one batch, then on their cached
    prefixes: each equals PEFT's under its adapter. Returns the (shut down) engine."""
    from mellea.engine.engine import Engine

    model = reference_model(path, dirs, fmt)
    engine = Engine(
        str(path),
        dtype=fmt,
        block_size=BLOCK_SIZE,
        max_num_batched_tokens=CHUNK,
        kv_cache_dtype="float32",  # held to the fp32 reference's logprobs
    )
    try:
        for adapter, where in dirs.items():
            engine.load_adapter(adapter, where)
        info = engine.adapters
        assert info["alora"].is_alora and not info["lora"].is_alora
        assert info["rslora"].rank == 8 and info["rslora"].targets == (
            "down_proj",
            "q_proj",
            "v_proj",
        )
        first = [
            (P1, None),
            (P1, "lora"),
            (P2, "rslora"),
            (P3, "alora"),
            (P2, "alora"),  # no invocation: the base model throughout
        ]
        results = await run(engine, first)
        for (prompt, adapter), (tokens, entries, _) in zip(first, results, strict=True):
            check(model, adapter, prompt, tokens, entries, fmt)
        base_p1, lora_p1, _, alora_p3, alora_p2 = (r[0] for r in results)
        if fmt == "float32":  # the adapters change the output
            assert lora_p1 != base_p1
            assert alora_p3 != reference_greedy(model, None, P3, NEW_TOKENS)
            assert alora_p2 == reference_greedy(model, None, P2, NEW_TOKENS)

        # Second round: the prefixes are cached, each under the adapter that computed it.
        second = [
            (P1[:20] + [50, 51], "lora"),
            (P1[:20] + [50, 51], None),
            (P2[:12] + [60, 61], None),  # P2 ran with adapters only, or as the base
            (P3[:-1] + [13], "alora"),
        ]
        results = await run(engine, second)
        for (prompt, adapter), (tokens, entries, _) in zip(second, results, strict=True):
            check(model, adapter, prompt, tokens, entries, fmt)
        cached = [r[2].cached_tokens for r in results]
        assert cached[0] == cached[1] == 20  # P1's first 5 blocks, each from its own run
        assert cached[2] == 12  # from the aLoRA request on P2, which ran as the base
        start = P3.index(INVOCATION[0])
        assert cached[3] == len(P3) - 1 - (len(P3) - 1) % BLOCK_SIZE  # incl. aLoRA blocks
        assert cached[3] > start
    finally:
        engine.shutdown()
    return engine


async def test_lora_blocks_never_serve_the_base_model(family):
    from mellea.engine.engine import Engine

    _, path, dirs = family
    engine = Engine(
        str(path), block_size=BLOCK_SIZE, max_num_batched_tokens=CHUNK, kv_cache_dtype="float32"
    )
    try:
        engine.load_adapter("lora", dirs["lora"])
        ((_, _, lora_run),) = await run(engine, [(P1, "lora")])
        ((_, _, base_run),) = await run(engine, [(P1, None)])
        ((_, _, again),) = await run(engine, [(P1, "lora")])
    finally:
        engine.shutdown()
    assert lora_run.cached_tokens == 0 and base_run.cached_tokens == 0
    assert again.cached_tokens == 20


async def test_alora_after_a_base_answer_reuses_its_blocks(family):
    """The check right after an answer: the aLoRA prompt is the conversation, the
    base model's answer and the invocation; every full block before the invocation
    comes from the base request's cache, and the tokens still equal PEFT's."""
    from mellea.engine.engine import Engine

    _, path, dirs = family
    model = reference_model(path, {"alora": dirs["alora"]}, "float32")
    engine = Engine(
        str(path), block_size=BLOCK_SIZE, max_num_batched_tokens=CHUNK, kv_cache_dtype="float32"
    )
    try:
        engine.load_adapter("alora", dirs["alora"])
        ((answer, _, first),) = await run(engine, [(CONVERSATION, None)])
        prompt = CONVERSATION + answer + INVOCATION + [11]
        ((tokens, entries, last),) = await run(engine, [(prompt, "alora")])
    finally:
        engine.shutdown()
    assert first.cached_tokens == 0
    computed = len(CONVERSATION) + len(answer) - 1  # the answer's last token has no KV yet
    assert last.cached_tokens == computed - computed % BLOCK_SIZE
    assert last.cached_tokens >= len(CONVERSATION)
    check(model, "alora", prompt, tokens, entries, "float32")


async def test_unknown_adapter_is_a_sampling_params_error(make_engine):
    engine = make_engine()
    with pytest.raises(SamplingParamsError, match="no adapter named 'nope'") as err:
        engine.add_request([5, 6, 7], SamplingParams(adapter="nope"))
    assert err.value.field == "adapter"


def test_bad_adapter_directories_are_refused_with_what_is_wrong(
    make_engine, tmp_path, tiny_model_dir, family
):
    import json
    import shutil

    from mellea.engine.lora import AdapterLoadError

    _, _, dirs = family
    engine = make_engine()  # the tiny Llama: 2 layers, the family models have 3
    with pytest.raises(AdapterLoadError, match="does not exist"):
        engine.load_adapter("x", tmp_path / "missing")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(AdapterLoadError, match=r"no adapter_config\.json"):
        engine.load_adapter("x", empty)
    no_weights = tmp_path / "no-weights"
    no_weights.mkdir()
    shutil.copy(dirs["lora"] / "adapter_config.json", no_weights)
    with pytest.raises(AdapterLoadError, match=r"no adapter_model\.safetensors"):
        engine.load_adapter("x", no_weights)
    with pytest.raises(AdapterLoadError, match=r"another base model|has 2 layers"):
        engine.load_adapter("x", dirs["lora"])  # made for a model of another shape
    dora = tmp_path / "dora"
    shutil.copytree(dirs["lora"], dora)
    config = json.loads((dora / "adapter_config.json").read_text())
    (dora / "adapter_config.json").write_text(json.dumps({**config, "use_dora": True}))
    with pytest.raises(AdapterLoadError, match="use_dora"):
        engine.load_adapter("x", dora)
    own = make_adapter(tiny_model_dir, tmp_path / "own", 0, r=2, target_modules=["o_proj"])
    engine.load_adapter("own", own)
    with pytest.raises(AdapterLoadError, match="already loaded"):
        engine.load_adapter("own", own)
    head = make_adapter(tiny_model_dir, tmp_path / "head", 0, r=2, target_modules=["lm_head"])
    with pytest.raises(AdapterLoadError, match="lm_head"):
        engine.load_adapter("head", head)
    assert list(engine.adapters) == ["own"]


def test_block_hashes_carry_the_adapter_from_where_it_applies():
    from mellea.engine.block_manager import BlockManager
    from mellea.engine.lora import AdapterUse, activation_start
    from mellea.engine.sequence import Sequence

    assert activation_start([1, 2, 3, 1, 2, 3, 4], [1, 2]) == 3
    assert activation_start([1, 2, 3], [2, 4]) is None
    tokens = list(range(100, 117))  # 4 full blocks of 4 and one token
    seqs = {}
    for kind, use in [
        ("base", None),
        ("lora", AdapterUse(0, 0, b"L" * 16)),
        ("alora", AdapterUse(1, 9, b"A" * 16)),  # applies from the third block
    ]:
        blocks = BlockManager(8, 4)
        seq = Sequence(kind, tokens, SamplingParams(), 4)
        seq.adapter = use
        blocks.grow(seq, len(tokens))
        seq.num_computed = len(tokens)
        blocks.commit(seq)
        seqs[kind] = seq.block_hashes
    assert all(a != b for a, b in zip(seqs["base"], seqs["lora"], strict=True))
    assert seqs["alora"][:2] == seqs["base"][:2]
    assert all(a != b for a, b in zip(seqs["base"][2:], seqs["alora"][2:], strict=True))


def _random_adapter(slot: int, pieces: list[tuple[int, int]], rank: int, k: int, seed: int):
    """A LoraAdapter with one projection (layer 0's qkv_proj) of ``pieces`` (first row,
    rows), each of rank ``rank`` on ``k`` inputs."""
    from mellea.engine.lora import AdapterInfo, LoraAdapter, low_rank

    gen = torch.Generator().manual_seed(seed)
    parts = [
        (0, first, torch.randn(rank, k, generator=gen), torch.randn(rows, rank, generator=gen))
        for first, rows in pieces
    ]
    info = AdapterInfo(rank=rank, targets=("q_proj",), is_alora=False)
    return LoraAdapter(f"a{slot}", info, {(0, "self_attn.qkv_proj"): low_rank(parts)})


def lora_reference(out, x, adapters, slots, key):
    """``out`` plus each row's adapter's delta, in float64 from the fp32 pairs."""
    want = out.double().clone()
    for t, slot in enumerate(slots):
        update = adapters[slot].updates.get(key) if slot >= 0 else None
        if update is None:
            continue
        h = update.a.double() @ x[t].double()
        for r0, r1, c0, c1, b in update.parts:
            want[t, r0:r1] += b.double() @ h[c0:c1]
    return want


@pytest.mark.parametrize("k", [64, 72])  # 72: the AVX paths' tails too
def test_lora_add_gathers_each_rows_adapter(kernel_family, k: int):
    """The fused layer's LoRA op against the per-row reference: rows of one adapter in
    blocks of 4 and a remainder, base rows, an adapter without this projection, pieces
    of a fused projection whose widths are not multiples of the vector length."""
    from mellea.engine import cpu_kernels
    from mellea.engine.lora import AdapterInfo, LoraAdapter, pack_fused

    key = (0, "self_attn.qkv_proj")
    qkv = [(0, 80), (80, 40), (120, 40)]  # q, k, v pieces: 160 output rows
    adapters = [
        _random_adapter(0, qkv, 4, k, 0),
        _random_adapter(1, qkv[:1] + qkv[2:], 16, k, 1),  # q and v only
        LoraAdapter("other", AdapterInfo(2, ("o_proj",), False), {}),  # not on qkv
        _random_adapter(3, [(0, 160)], 8, k, 3),  # one piece over all rows
    ]
    slots = [1, -1, 0, 1, 1, 2, 1, 1, 3, 0, -1]  # slot 1: five rows (4 + 1)
    torch.manual_seed(0)
    x, out = torch.randn(len(slots), k), torch.randn(len(slots), 160)
    want = lora_reference(out, x, adapters, slots, key)
    got = out.clone()
    cpu_kernels.lora_add(got, x, *pack_fused(adapters, key), torch.tensor(slots, dtype=torch.int32))
    delta = (want - out.double()).abs().max()
    assert delta > 10  # the adapters move the rows a lot
    # fp16 pairs: about 3 digits of each product; a wrong row, piece or slot is off by ~delta
    torch.testing.assert_close(got.double(), want, atol=2e-3 * delta.item(), rtol=0)
    for t in (1, 5, 10):  # base rows, and a slot without a pair here: untouched
        assert torch.equal(got[t], out[t])


@pytest.mark.parametrize("rows", [1, 3, 4, 5, 8, 9])
def test_lora_add_rows_together_equal_rows_alone(kernel_family, rows: int):
    """Each row's delta is the same bits whether its adapter's rows run alone or
    together (in blocks of up to 4, beside other adapters' rows and base rows), on
    pieces wider than a block of the packed B (64 rows) and with ranks that are not a
    multiple of how many of A's rows one pass multiplies."""
    from mellea.engine import cpu_kernels
    from mellea.engine.lora import LORA_BLOCK, pack_fused

    key = (0, "self_attn.qkv_proj")
    qkv = [(0, 150), (150, 70), (220, 20)]  # q spans 3 blocks, its last one partial
    assert qkv[0][1] > 2 * LORA_BLOCK
    adapters = [_random_adapter(s, qkv, rank, 72, s) for s, rank in enumerate((5, 16, 3))]
    pack = pack_fused(adapters, key)
    # `rows` rows of adapter 1, one row each of adapters 0 and 2, a base row, interleaved
    slots = [1] * rows + [0, -1, 2]
    slots = slots[::2] + slots[1::2]
    torch.manual_seed(rows)
    x, out = torch.randn(len(slots), 72), torch.randn(len(slots), 240)
    together = out.clone()
    cpu_kernels.lora_add(together, x, *pack, torch.tensor(slots, dtype=torch.int32))
    for t, slot in enumerate(slots):
        alone = out[t : t + 1].clone()
        cpu_kernels.lora_add(alone, x[t : t + 1], *pack, torch.tensor([slot], dtype=torch.int32))
        assert torch.equal(together[t], alone[0]), (t, slot)
        assert torch.equal(together[t], out[t]) == (slot == -1)
    want = lora_reference(out, x, adapters, slots, key)
    delta = (want - out.double()).abs().max().item()
    torch.testing.assert_close(together.double(), want, atol=2e-3 * delta, rtol=0)


def test_pack_fused_keeps_pairs_of_any_magnitude_within_fp16(kernel_family):
    """A pair whose A is past fp16's largest value and whose B is below its smallest
    still multiplies right: each rank is rescaled between A and B before rounding."""
    from mellea.engine import cpu_kernels
    from mellea.engine.lora import pack_fused

    key = (0, "self_attn.qkv_proj")
    adapter = _random_adapter(0, [(0, 48)], 4, 32, 5)
    update = adapter.updates[key]
    update.a.mul_(1e6)  # |A| up to ~4e6: inf in fp16
    update.parts[0][4].mul_(1e-9)  # |B| ~1e-9: zero in fp16
    x, out = torch.randn(2, 32), torch.zeros(2, 48)
    want = lora_reference(out, x, [adapter], [0, 0], key)
    a, bt, segs = pack_fused([adapter], key)
    assert torch.isfinite(a).all() and torch.isfinite(bt).all() and bt.abs().max() > 0.01
    cpu_kernels.lora_add(out, x, a, bt, segs, torch.tensor([0, 0], dtype=torch.int32))
    torch.testing.assert_close(out.double(), want, atol=2e-3 * want.abs().max().item(), rtol=0)


def test_fused_layer_adds_the_deltas_of_the_layers_path(
    make_engine, tiny_model_dir, tmp_path, kernel_family, monkeypatch
):
    """One decode-only int4 step with base rows and rows of three adapters (one row of
    some, five of another): the fused C++ layers (fp16 pairs) compute what the layers'
    own path computes with the deltas from the fp32 pairs (:func:`fp32_lora_add` in
    place of ``lora_add``), within fp16's rounding of the deltas."""
    from mellea.engine.compute_path import ComputePath
    from mellea.engine.lora import deltas
    from tests.engine.decode_batch import decode_batch

    engine = make_engine(dtype="int4")
    runner = engine.runner
    model = runner.model
    if model.path is not ComputePath.CPP_FUSED:
        pytest.skip("no C++ kernels here: the fused layer is a C++ op")
    specs = {
        "all": dict(r=4, lora_alpha=8, target_modules=ALL_TARGETS),
        "qvd": dict(
            r=8, lora_alpha=4, use_rslora=True, target_modules=["q_proj", "v_proj", "down_proj"]
        ),
        "ogu": dict(r=2, lora_alpha=2, target_modules=["o_proj", "gate_proj", "up_proj"]),
    }
    for seed, (name, spec) in enumerate(specs.items()):
        engine.load_adapter(name, make_adapter(tiny_model_dir, tmp_path / name, seed, **spec))
    names = ["qvd", None, "all", "qvd", "ogu", "qvd", "qvd", None, "qvd"]
    inputs = decode_batch(runner, [9 + 7 * i for i in range(len(names))], names)
    assert inputs.lora is not None and inputs.lora.row_slots.tolist() == [
        -1 if n is None else runner.adapters.by_name[n] for n in names
    ]
    runner.adapters.install(model)
    args = (inputs.input_ids, inputs.positions, runner.kv_caches, inputs.meta)
    with torch.inference_mode():
        base = model(*args)
        runner.adapters.current = inputs.lora
        try:
            fused = model(*args)
            model.set_path(ComputePath.CPP)  # the layers' own path, LoRA from fp32 pairs
            monkeypatch.setattr(deltas, "apply_packed", fp32_lora_add(runner.adapters))
            layered = model(*args)
        finally:
            runner.adapters.current = None
            model.set_path(ComputePath.CPP_FUSED)
    moved = (layered - base).abs().amax(dim=1)
    assert (moved[[0, 2, 3, 4, 5, 6, 8]] > 0.1).all() and (moved[[1, 7]] == 0).all()
    torch.testing.assert_close(fused, layered, atol=0.01 * moved.max().item(), rtol=0)


def fp32_lora_add(adapters):
    """A stand-in for the hooks' ``lora_add`` (``apply_packed``) that adds each row's
    adapter's delta from the fp32 pairs (:func:`lora_reference`), to compare with."""
    from mellea.engine import lora

    keys = {
        id(pack[3 * j]): (i, proj)
        for i, pack in enumerate(adapters.fused)
        for j, proj in enumerate(lora.PROJECTIONS)
    }

    def add(out, x, row_slots, pack):
        x = x.reshape(out.shape[0], -1)
        slots = row_slots.tolist()
        return lora_reference(out, x, adapters.adapters, slots, keys[id(pack[0])]).to(out.dtype)

    return add


def _prefill_step(runner, prefills, decodes):
    """``runner.prepare`` of one step: ``decodes`` (context, adapter) and ``prefills``
    (tokens, tokens already computed, chunk length, adapter), each sequence's blocks
    after the last one's; the KV cache is filled with seeded noise first."""
    from mellea.engine.scheduler import ScheduledBatch
    from mellea.engine.sequence import Sequence
    from mellea.engine.types import SamplingParams

    torch.manual_seed(0)
    with torch.no_grad():
        runner.k_cache.normal_()
        runner.v_cache.normal_()
    next_block, made = 1, []
    specs = [
        ([(7 * i + j) % 300 + 3 for j in range(ctx)], ctx - 1, 1, name)
        for i, (ctx, name) in enumerate(decodes)
    ]
    for tokens, computed, n, name in specs + list(prefills):
        seq = Sequence(f"s{len(made)}", tokens, SamplingParams(), 8)
        if name is not None:
            seq.adapter = runner.adapters.use(name, tokens)
        blocks = -(-len(tokens) // runner.block_size)
        seq.block_table = list(range(next_block, next_block + blocks))
        next_block += blocks
        seq.num_computed = computed
        made.append((seq, n))
    batch = ScheduledBatch(
        decodes=[s for s, _ in made[: len(decodes)]], prefills=made[len(decodes) :]
    )
    return runner.prepare(batch)


@pytest.mark.parametrize("dtype", ["int4", "int8"])
def test_prompt_chunks_through_lora_add_equal_the_fp32_hooks(
    make_engine, tiny_model_dir, tmp_path, kernel_family, dtype, monkeypatch
):
    """A step of prompt chunks (one from the start, others after computed tokens, one
    whose aLoRA activates inside the chunk) beside decode rows, base and adapter rows
    mixed: the hooks' ``lora_add`` (fp16 packs, all rows of the step in one op per
    projection) adds to each projection what the fp32 stacked pairs add to the same
    input, within fp16's rounding of the delta, and leaves the base rows as the base
    model's; through the model, what the deltas from the fp32 pairs give
    (:func:`fp32_lora_add`)."""
    from mellea.engine import lora
    from mellea.engine.lora import deltas

    engine = make_engine(dtype=dtype, block_size=BLOCK_SIZE)
    runner, model, adapters = engine.runner, engine.runner.model, engine.runner.adapters
    if not model.path.cpp:
        pytest.skip("no C++ kernels here: lora_add is a C++ op")
    specs = {
        "all": dict(r=4, lora_alpha=8, target_modules=ALL_TARGETS),
        "qvd": dict(
            r=8, lora_alpha=4, use_rslora=True, target_modules=["q_proj", "v_proj", "down_proj"]
        ),
        "alora": ADAPTERS["alora"],
    }
    for seed, (name, spec) in enumerate(specs.items()):
        engine.load_adapter(name, make_adapter(tiny_model_dir, tmp_path / name, seed, **spec))
    invoked = list(range(40, 47)) + INVOCATION + list(range(60, 72))  # activates at 7
    prefills = [
        (list(range(100, 130)), 9, 21, None),  # base, after 9 computed tokens
        (list(range(200, 213)), 0, 13, "all"),  # a whole prompt
        (invoked, 3, 17, "alora"),  # rows 3-6 base, 7-19 the aLoRA's
        (list(range(300, 340)), 16, 24, "qvd"),  # a later chunk
    ]
    decodes = [(11, "qvd"), (6, None), (14, "all")]
    inputs = _prefill_step(runner, prefills, decodes)
    slots = inputs.lora.row_slots.tolist()
    by = adapters.by_name
    assert slots[:3] == [by["qvd"], -1, by["all"]]
    assert slots[3:24] == [-1] * 21 and slots[37:41] == [-1] * 4
    assert slots[41:54] == [by["alora"]] * 13
    adapters.install(model)
    keys = {
        id(pack[3 * j]): (i, proj)
        for i, pack in enumerate(adapters.fused)
        for j, proj in enumerate(lora.PROJECTIONS)
    }
    errors = []  # per projection: (largest error, largest fp32 delta)
    real = deltas.apply_packed

    def packed_beside_fp32(out, x, row_slots, pack):
        step, key = adapters.current, keys[id(pack[0])]
        want = out.clone()
        deltas.apply_stacked(want, x, step, adapters.stack(key))
        got = real(out.clone(), x, row_slots, pack)
        errors.append(((got - want).abs().max().item(), (want - out).abs().max().item()))
        unadapted = (want == out).all(dim=1)  # base rows, and adapters not on `key`
        assert (got[unadapted] == out[unadapted]).all(), key
        return real(out, x, row_slots, pack)

    monkeypatch.setattr(deltas, "apply_packed", packed_beside_fp32)
    args = (inputs.input_ids, inputs.positions, runner.kv_caches, inputs.meta)
    with torch.inference_mode():
        base = model(*args)
        adapters.current = inputs.lora
        try:
            packed = model(*args)
            assert len(errors) == 4 * len(model.layers)  # every projection through lora_add
            monkeypatch.setattr(deltas, "apply_packed", fp32_lora_add(adapters))
            hooked = model(*args)
        finally:
            adapters.current = None
    assert len(errors) == 4 * len(model.layers)  # the fp32 reference did not call it
    for error, delta in errors:
        assert delta > 1 and error <= 2e-3 * delta
    moved = (hooked - base).abs().amax(dim=1)
    adapted = torch.tensor(slots) >= 0
    assert (moved[adapted] > 0.1).all() and (moved[~adapted] == 0).all()
    assert (packed[~adapted] == base[~adapted]).all()
    # Through the layers, the deltas' rounding grows with these tiny models' large
    # deltas (down_proj's up to ~200 against hidden states of ~10), to ~2% of moved.
    torch.testing.assert_close(packed, hooked, atol=0.03 * moved.max().item(), rtol=0)

"""Models the fast engine does not cover run on the transformers fallback, announced once.

The model is a tiny random Granite 4 "H" (granitemoehybrid: Mamba and attention layers).
"""

from __future__ import annotations

import asyncio
import json
import logging
import shutil

import pytest
import torch

from mellea.engine.types import SamplingParams
from tests.engine.conftest import collect, generate, hf_greedy, hf_logprobs

PROMPTS = [list(range(300, 309)), list(range(7000, 7023))]


@pytest.fixture(scope="module")
def hybrid(tmp_path_factory, tiny_model_dir):
    """(model dir, transformers model) of a tiny random granitemoehybrid."""
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    config = AutoConfig.for_model(
        "granitemoehybrid",
        vocab_size=49152,
        hidden_size=64,
        intermediate_size=96,
        shared_intermediate_size=96,
        num_local_experts=0,
        num_hidden_layers=2,
        layer_types=["mamba", "attention"],
        num_attention_heads=4,
        num_key_value_heads=2,
        mamba_n_heads=4,
        mamba_d_head=16,
        mamba_n_groups=1,
        mamba_d_state=16,
        mamba_expand=1,
        mamba_chunk_size=16,
        max_position_embeddings=128,
        initializer_range=0.5,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )
    hf = AutoModelForCausalLM.from_config(config).eval()
    path = tmp_path_factory.mktemp("hybrid")
    hf.save_pretrained(path)
    for file in tiny_model_dir.iterdir():
        if file.name.startswith("tokenizer") or file.suffix == ".jinja":
            shutil.copy(file, path / file.name)
    return path, hf


@pytest.fixture(scope="module")
def fallback(hybrid):
    from mellea.engine import build_engine

    engine = build_engine(str(hybrid[0]))
    yield engine
    engine.shutdown()


def test_build_engine_picks_the_fallback_and_says_so_once(hybrid, caplog):
    from mellea.engine import build_engine
    from mellea.engine.fallback import FallbackEngine

    with caplog.at_level(logging.INFO, logger="mellea.engine"):
        engine = build_engine(str(hybrid[0]))
    engine.shutdown()
    assert isinstance(engine, FallbackEngine)
    lines = [
        r.getMessage() for r in caplog.records if "fast engine does not cover" in r.getMessage()
    ]
    assert len(lines) == 1 and "granitemoehybrid" in lines[0] and "\n" not in lines[0]


def test_build_engine_keeps_covered_families_on_the_fast_engine(tiny_model_dir):
    from mellea.engine import build_engine
    from mellea.engine.engine import Engine

    engine = build_engine(str(tiny_model_dir))
    engine.shutdown()
    assert isinstance(engine, Engine)


def test_an_architecture_nothing_runs_fails_with_one_line(tmp_path):
    from mellea.engine import build_engine
    from mellea.engine.factory import ModelNotSupportedError

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "no_such_arch"}))
    with pytest.raises(ModelNotSupportedError) as info:
        build_engine(str(tmp_path))
    message = str(info.value)
    assert "\n" not in message and "no_such_arch" in message


async def test_greedy_matches_transformers_for_concurrent_requests(fallback, hybrid):
    results = await generate(fallback, PROMPTS, SamplingParams(max_tokens=8, ignore_eos=True))
    for prompt, (tokens, text, last) in zip(PROMPTS, results, strict=True):
        assert tokens == hf_greedy(hybrid[1], prompt, 8)
        assert last.finish_reason == "length" and last.completion_tokens == 8
        assert text == fallback.tokenizer.decode(tokens, skip_special_tokens=True)


def test_the_fallback_core_steps_without_a_thread(hybrid):
    """The core alone: requests take turns, one token each, and match transformers."""
    from mellea.engine.fallback import FallbackCore
    from mellea.engine.loader import ResolvedModel
    from mellea.engine.stats import StepTimes

    core = FallbackCore(ResolvedModel(hybrid[0], str(hybrid[0])))
    params = SamplingParams(max_tokens=6, ignore_eos=True)
    seqs = [core.new_sequence(f"r{i}", prompt, params) for i, prompt in enumerate(PROMPTS)]
    for seq in seqs:
        core.add(seq)
    order: list[str] = []
    while core.has_work():
        (out,) = core.step()
        order.append(out.seq.request_id)
    assert order == ["r0", "r1"] * 6
    for seq, prompt in zip(seqs, PROMPTS, strict=True):
        assert seq.token_ids[len(prompt) :] == hf_greedy(hybrid[1], prompt, 6)
        assert seq.finish_reason == "length"
    assert core.stats(StepTimes())["running"] == 0


async def test_logprobs_match_transformers(fallback, hybrid):
    params = SamplingParams(max_tokens=5, logprobs=3, ignore_eos=True)
    tokens, entries, prompt = [], [], PROMPTS[0]
    async for out in fallback.add_request(prompt, params):
        tokens += out.token_ids
        entries += out.logprobs
    reference = hf_logprobs(hybrid[1], prompt, tokens)
    for row, token, entry in zip(reference, tokens, entries, strict=True):
        values, ids = row.topk(3)
        assert entry.token_id == token and [t for t, _ in entry.top] == ids.tolist()
        assert [v for _, v in entry.top] == pytest.approx(values.tolist(), abs=1e-3)


async def test_prompt_logprobs_match_transformers_and_max_tokens_zero_scores_only(fallback, hybrid):
    prompt = PROMPTS[1]
    params = SamplingParams(max_tokens=0, prompt_logprobs=2)
    tokens, _, last = await collect(fallback.add_request(prompt, params))
    assert tokens == [] and last.finish_reason == "length"
    entries = last.prompt_logprobs
    assert entries[0] is None and len(entries) == len(prompt)
    reference = hf_logprobs(hybrid[1], prompt[:1], prompt[1:])
    for entry, token, row in zip(entries[1:], prompt[1:], reference, strict=True):
        assert entry.token_id == token
        assert entry.logprob == pytest.approx(float(row[token]), abs=1e-4)
        assert [t for t, _ in entry.top] == row.topk(2).indices.tolist()


async def test_sampling_options_are_honoured(fallback):
    prompt = PROMPTS[1]
    seeded = SamplingParams(max_tokens=10, temperature=1.0, seed=7, ignore_eos=True)
    first, second = await generate(fallback, [prompt, prompt], seeded)
    assert first[0] == second[0]  # same seed, same draw
    other = await generate(fallback, [prompt], SamplingParams(**{**seeded.__dict__, "seed": 8}))
    assert other[0][0] != first[0]
    (greedy,) = await generate(fallback, [prompt], SamplingParams(max_tokens=10, ignore_eos=True))
    top1 = SamplingParams(max_tokens=10, temperature=1.0, top_k=1, seed=1, ignore_eos=True)
    (one,) = await generate(fallback, [prompt], top1)
    assert one[0] == greedy[0]  # top_k=1 leaves only the argmax
    stop_at = greedy[0][3]
    (stopped,) = await generate(
        fallback, [prompt], SamplingParams(max_tokens=10, stop_token_ids=[stop_at])
    )
    assert stopped[0] == greedy[0][:4] and stopped[2].finish_reason == "stop"
    cut = greedy[1][len(greedy[1]) // 2 :].strip()[:3]
    if cut:
        (by_text,) = await generate(fallback, [prompt], SamplingParams(max_tokens=10, stop=[cut]))
        assert cut not in by_text[1] and by_text[2].finish_reason == "stop"


async def test_constrained_decoding_follows_the_schema(fallback):
    from mellea.engine.constraints import json_schema_grammar

    schema = {
        "type": "object",
        "properties": {"ok": {"type": "boolean"}},
        "required": ["ok"],
        "additionalProperties": False,
    }
    params = SamplingParams(max_tokens=40, grammar=json_schema_grammar(schema))
    _, text, last = await collect(fallback.add_request(PROMPTS[0], params))
    if last.finish_reason == "stop":
        assert isinstance(json.loads(text)["ok"], bool)
    else:
        assert last.finish_reason == "length" and text.lstrip().startswith("{")


async def test_abort_and_prompt_checks(fallback):
    from mellea.engine.types import PromptTooLongError

    stream = fallback.add_request(PROMPTS[0], SamplingParams(max_tokens=100, ignore_eos=True))
    await stream.__anext__()
    await stream.aclose()
    for _ in range(100):
        if fallback.stats()["running"] == 0:
            break
        await asyncio.sleep(0.01)
    assert fallback.stats()["running"] == 0
    with pytest.raises(PromptTooLongError):
        fallback.add_request(list(range(10, 10 + fallback.max_model_len)), SamplingParams())
    with pytest.raises(ValueError):
        fallback.add_request(PROMPTS[0], SamplingParams(top_p=0))


def test_a_checkpoint_that_does_not_fit_its_family_goes_to_the_fallback(tmp_path, tiny_model_dir):
    """A tensor the family does not have is never dropped silently."""
    from safetensors.torch import load_file, save_file

    from mellea.engine import build_engine
    from mellea.engine.fallback import FallbackEngine

    for file in tiny_model_dir.iterdir():
        shutil.copy(file, tmp_path / file.name)
    weights = load_file(tmp_path / "model.safetensors")
    weights["model.layers.0.self_attn.sinks"] = torch.zeros(4)
    save_file(weights, tmp_path / "model.safetensors", metadata={"format": "pt"})
    engine = build_engine(str(tmp_path))
    engine.shutdown()
    assert isinstance(engine, FallbackEngine)


@pytest.mark.e2e
def test_served_through_m_serve_streaming_with_a_schema(hybrid):
    """The fallback behind `m serve`: announced once in the log, streams, honours a schema."""
    import openai

    from tests.server import PROGRAMS, serve

    with serve(PROGRAMS / "local_model.py", env={"LOCAL_MODEL": str(hybrid[0])}) as server:
        client = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="x", max_retries=0)
        ask = dict(model="m", messages=[{"role": "user", "content": "hi"}], temperature=0)
        chunks = list(client.chat.completions.create(stream=True, max_tokens=6, **ask))
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        whole = client.chat.completions.create(max_tokens=6, **ask)
        assert text == whole.choices[0].message.content
        assert whole.usage.completion_tokens == 6
        constrained = client.chat.completions.create(
            max_tokens=30, response_format={"type": "json_object"}, **ask
        )
        assert constrained.choices[0].message.content.lstrip().startswith("{")
        assert server.log.count("fast engine does not cover") == 1

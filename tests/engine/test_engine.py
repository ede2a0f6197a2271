"""Engine behaviour on a tiny random Llama: fast, and still the real code paths."""

from __future__ import annotations

import asyncio

import pytest

from mellea.engine.types import PromptTooLongError, RequestOutput, SamplingParams, TokenLogprobs
from tests.engine.conftest import collect, generate, hf_greedy, hf_logprobs
from tests.waiting import until

PROMPTS = [
    list(range(100, 105)),
    list(range(2000, 2023)),
    list(range(500, 540, 2)),
    list(range(30000, 30037)),
]


@pytest.mark.parametrize("reference", [False, True], ids=["cpu-path", "kernel-path"])
async def test_greedy_matches_hf(make_engine, tiny_hf_model, monkeypatch, reference):
    if reference:
        monkeypatch.setenv("MELLEA_ENGINE_REFERENCE", "1")
    engine = make_engine()
    results = await generate(engine, PROMPTS, SamplingParams(max_tokens=20))
    for prompt, (tokens, _, last) in zip(PROMPTS, results, strict=True):
        assert tokens == hf_greedy(tiny_hf_model, prompt, 20)
        assert last.finish_reason == "length"
        assert last.completion_tokens == 20
        assert last.prompt_tokens == len(prompt)


async def test_chunked_prefill_matches_hf(make_engine, tiny_hf_model):
    engine = make_engine(max_num_batched_tokens=8)
    results = await generate(engine, PROMPTS, SamplingParams(max_tokens=12))
    for prompt, (tokens, _, _) in zip(PROMPTS, results, strict=True):
        assert tokens == hf_greedy(tiny_hf_model, prompt, 12)


async def test_requests_progress_together(make_engine):
    engine = make_engine()
    streams = [engine.add_request(p, SamplingParams(max_tokens=30)) for p in PROMPTS[:3]]
    seen: list[str] = []

    async def read(stream):
        async for out in stream:
            seen.append(out.request_id if not out.finished else "done")

    await asyncio.gather(*(read(s) for s in streams))
    first_done = seen.index("done")
    # Every request produced output before the first one finished...
    assert {s.request_id for s in streams} <= set(seen[:first_done])
    # ...and they shared forward passes: ~30 decode steps, not 90.
    assert engine.stats()["steps"] < 45


async def test_late_request_joins_running_batch(make_engine, tiny_hf_model):
    engine = make_engine()
    first = engine.add_request(PROMPTS[0], SamplingParams(max_tokens=40))
    out = await first.__anext__()
    tokens = list(out.token_ids)
    late = asyncio.ensure_future(
        collect(engine.add_request(PROMPTS[1], SamplingParams(max_tokens=5)))
    )
    finished_late_first = False
    async for out in first:
        tokens += out.token_ids
        if late.done() and not out.finished:
            finished_late_first = True
    assert finished_late_first, "the late short request had to wait for the long one"
    assert tokens == hf_greedy(tiny_hf_model, PROMPTS[0], 40)
    late_tokens, _, _ = await late
    assert late_tokens == hf_greedy(tiny_hf_model, PROMPTS[1], 5)


async def test_preemption_keeps_outputs_correct(make_engine, tiny_hf_model):
    # 12 blocks of 4 tokens; each request needs up to 8 blocks, so three cannot all fit.
    per_block = 4 * 2 * 2 * 2 * 16 * 4  # tokens * (k, v) * layers * kv heads * head_dim * fp32
    engine = make_engine(block_size=4, kv_cache_memory=12 * per_block)
    assert engine.stats()["kv_blocks_total"] == 12
    prompts = [list(range(100 + 10 * i, 110 + 10 * i)) for i in range(3)]
    results = await generate(engine, prompts, SamplingParams(max_tokens=20))
    assert engine.stats()["preemptions"] > 0
    for prompt, (tokens, _, _) in zip(prompts, results, strict=True):
        assert tokens == hf_greedy(tiny_hf_model, prompt, 20)
    assert engine.stats()["kv_blocks_used"] == 0


async def test_abort_frees_blocks(make_engine):
    engine = make_engine()
    stream = engine.add_request(PROMPTS[3], SamplingParams(max_tokens=200), request_id="a")
    await stream.__anext__()
    assert engine.stats()["kv_blocks_used"] > 0
    engine.abort("a")
    assert engine.stats()["kv_blocks_used"] == 0
    outs = [out async for out in stream]
    assert outs[-1].finished and outs[-1].finish_reason == "abort"


async def test_aclose_and_dropping_abort(make_engine):
    engine = make_engine()
    stream = engine.add_request(PROMPTS[3], SamplingParams(max_tokens=200))
    await stream.__anext__()
    await stream.aclose()
    assert engine.stats()["running"] == 0
    assert engine.stats()["kv_blocks_used"] == 0

    dropped = engine.add_request(PROMPTS[2], SamplingParams(max_tokens=200), request_id="d")
    await dropped.__anext__()
    seq = engine.core.requests["d"]
    del dropped  # garbage: the engine aborts it at its next step
    await until(lambda: seq.is_finished, "the dropped request's end")
    assert seq.finish_reason == "abort"
    assert seq.num_output < 200
    assert engine.stats()["kv_blocks_used"] == 0


async def test_cancelled_reader_aborts(make_engine):
    engine = make_engine()
    stream = engine.add_request(PROMPTS[3], SamplingParams(max_tokens=200))
    task = asyncio.ensure_future(collect(stream))
    await until(lambda: engine.stats()["running"] == 1, "the request running")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert engine.stats()["kv_blocks_used"] == 0


async def test_prefix_reuse(make_engine):
    engine = make_engine()
    prompt = list(range(1000, 1040))  # 2 full blocks of 16, plus 8 tokens
    ((tokens1, _, first),) = await generate(engine, [prompt], SamplingParams(max_tokens=10))
    assert first.cached_tokens == 0
    ((tokens2, _, second),) = await generate(engine, [prompt], SamplingParams(max_tokens=10))
    assert second.cached_tokens == 32
    assert tokens2 == tokens1
    # A prompt sharing only its first block reuses that one.
    other = prompt[:20] + list(range(5000, 5020))
    ((_, _, third),) = await generate(engine, [other], SamplingParams(max_tokens=2))
    assert third.cached_tokens == 16
    stats = engine.stats()
    assert stats["prefix_cache_hit_tokens"] == 48
    assert stats["prefix_cache_query_tokens"] == 120
    assert (stats["prefix_cache_hits"], stats["prefix_cache_queries"]) == (2, 3)


async def test_prefix_reuse_keeps_last_token_uncached(make_engine, tiny_hf_model):
    engine = make_engine()
    prompt = list(range(1000, 1032))  # exactly 2 blocks
    await generate(engine, [prompt], SamplingParams(max_tokens=3))
    ((tokens, _, out),) = await generate(engine, [prompt], SamplingParams(max_tokens=3))
    assert out.cached_tokens == 16
    assert tokens == hf_greedy(tiny_hf_model, prompt, 3)


async def test_stop_string_across_token_boundary(make_engine):
    engine = make_engine()
    prompt = PROMPTS[1]
    ((tokens, text, _),) = await generate(engine, [prompt], SamplingParams(max_tokens=20))
    pieces = [engine.tokenizer.decode(tokens[: i + 1]) for i in range(len(tokens))]
    # A stop string made of the end of one token's text and the start of the next.
    for i in range(2, len(tokens) - 1):
        cut = len(pieces[i])
        stop = text[cut - 2 : cut + 2]
        if (
            len(stop) == 4
            and len(pieces[i]) - len(pieces[i - 1]) >= 2
            and text.find(stop) == cut - 2
        ):
            break
    else:
        pytest.fail("no suitable token boundary in this output: the test checks nothing")
    deltas = []
    stream = engine.add_request(prompt, SamplingParams(max_tokens=20, stop=[stop]))
    async for out in stream:
        deltas.append(out.text)
    assert "".join(deltas) == text[: cut - 2]
    assert out.finish_reason == "stop"
    assert all(stop[:1] not in d or d.find(stop[:2]) == -1 for d in deltas)


async def test_stop_token_ids_and_eos(make_engine):
    engine = make_engine()
    prompt = PROMPTS[2]
    ((tokens, _, _),) = await generate(engine, [prompt], SamplingParams(max_tokens=20))
    params = SamplingParams(max_tokens=20, stop_token_ids=[tokens[4]])
    ((stopped, text, last),) = await generate(engine, [prompt], params)
    assert stopped == tokens[: tokens.index(tokens[4]) + 1]
    assert last.finish_reason == "stop"
    assert text == engine.tokenizer.decode(stopped[:-1], skip_special_tokens=True)
    # A biased EOS ends the request at once, unless ignore_eos.
    params = SamplingParams(max_tokens=5, logit_bias={2: 1000.0})
    ((stopped, text, last),) = await generate(engine, [prompt], params)
    assert (stopped, text, last.finish_reason) == ([2], "", "stop")
    params = SamplingParams(max_tokens=5, logit_bias={2: 1000.0}, ignore_eos=True)
    ((stopped, _, last),) = await generate(engine, [prompt], params)
    assert (stopped, last.finish_reason) == ([2] * 5, "length")


async def test_seed_is_reproducible_regardless_of_batch(make_engine):
    engine = make_engine()
    params = SamplingParams(max_tokens=15, temperature=1.0, top_p=0.95, seed=1234)
    ((alone, _, _),) = await generate(engine, [PROMPTS[1]], params)
    others = [SamplingParams(max_tokens=20, temperature=1.0), SamplingParams(max_tokens=3)]
    results = await generate(
        engine, [PROMPTS[0], PROMPTS[1], PROMPTS[3]], [others[0], params, others[1]]
    )
    assert results[1][0] == alone
    different = SamplingParams(max_tokens=15, temperature=1.0, top_p=0.95, seed=99)
    ((other, _, _),) = await generate(engine, [PROMPTS[1]], different)
    assert other != alone


async def test_prompt_too_long_and_max_tokens_clipped(make_engine):
    engine = make_engine()
    assert engine.max_model_len == 256
    with pytest.raises(PromptTooLongError, match="256"):
        engine.add_request(list(range(100, 356)), SamplingParams())
    ((_, _, last),) = await generate(
        engine, [list(range(100, 350))], SamplingParams(max_tokens=100)
    )
    assert (last.completion_tokens, last.finish_reason) == (6, "length")
    ((_, _, last),) = await generate(engine, [list(range(100, 350))], SamplingParams())
    assert last.completion_tokens == 6


async def test_invalid_requests(make_engine):
    engine = make_engine()
    for bad in (
        SamplingParams(temperature=-1),
        SamplingParams(top_p=0),
        SamplingParams(top_k=-1),
        SamplingParams(max_tokens=0),
        SamplingParams(logit_bias={10**9: 1.0}),
        SamplingParams(logprobs=21),
        SamplingParams(logprobs=-1),
    ):
        with pytest.raises(ValueError):
            engine.add_request(PROMPTS[0], bad)
    with pytest.raises(ValueError):
        engine.add_request([], SamplingParams())
    engine.add_request(PROMPTS[0], SamplingParams(max_tokens=50), request_id="x")
    with pytest.raises(ValueError, match="already"):
        engine.add_request(PROMPTS[0], SamplingParams(), request_id="x")
    engine.abort("x")


async def test_string_prompt_and_chat_template(make_engine):
    engine = make_engine()
    ids = engine.apply_chat_template([{"role": "user", "content": "Hi"}])
    tail = engine.tokenizer.encode("<|im_start|>assistant\n", add_special_tokens=False)
    assert ids[-len(tail) :] == tail
    expected = engine.tokenizer.apply_chat_template(
        [{"role": "user", "content": "Hi"}], add_generation_prompt=True, tokenize=True
    )
    assert ids == list(expected["input_ids"] if hasattr(expected, "keys") else expected)
    ((_, text, last),) = await generate(engine, ["Hello there"], SamplingParams(max_tokens=4))
    assert last.prompt_tokens == len(engine.tokenizer.encode("Hello there"))
    assert isinstance(text, str)


def test_the_engine_reads_the_models_config_once(make_engine, monkeypatch):
    """The main thread reads the config (for the imports a build needs) and hands it to
    the core its thread builds, rather than each reading the file."""
    from mellea.engine.config import ModelConfig

    read = ModelConfig.from_dir
    configs = []

    def counted(path):
        configs.append(read(path))
        return configs[-1]

    monkeypatch.setattr(ModelConfig, "from_dir", counted)
    engine = make_engine()
    assert len(configs) == 1
    assert engine.model_config is configs[0]


def test_stats_shape(make_engine):
    stats = make_engine().stats()
    for key in (
        "kv_blocks_total",
        "kv_blocks_used",
        "kv_blocks_free",
        "running",
        "waiting",
        "prefix_cache_hit_tokens",
        "prefix_cache_query_tokens",
    ):
        assert key in stats
    assert stats["kv_blocks_used"] == 0
    assert stats["kv_blocks_free"] == stats["kv_blocks_total"]


async def test_failed_forward_fails_its_requests_only(make_engine, monkeypatch):
    engine = make_engine()
    real_execute = engine.runner.execute

    def broken(inputs):
        raise MemoryError("boom")

    monkeypatch.setattr(engine.runner, "execute", broken)
    with pytest.raises(RuntimeError, match="boom"):
        await collect(engine.add_request(PROMPTS[0], SamplingParams(max_tokens=3)))
    assert engine.stats()["kv_blocks_used"] == 0
    monkeypatch.setattr(engine.runner, "execute", real_execute)
    ((tokens, _, _),) = await generate(engine, [PROMPTS[0]], SamplingParams(max_tokens=3))
    assert len(tokens) == 3


async def test_shutdown_ends_open_streams(make_engine):
    engine = make_engine()
    stream = engine.add_request(PROMPTS[0], SamplingParams(max_tokens=200))
    await stream.__anext__()
    engine.shutdown()
    outs = [out async for out in stream]
    assert outs[-1].finish_reason == "abort"
    with pytest.raises(RuntimeError):
        engine.add_request(PROMPTS[0], SamplingParams())


async def collect_logprobs(stream) -> tuple[list[int], list[TokenLogprobs] | None, RequestOutput]:
    """Drain a stream: (all token ids, all logprobs entries or None, the final output)."""
    tokens: list[int] = []
    entries: list[TokenLogprobs] | None = None
    async for out in stream:
        tokens += out.token_ids
        if out.logprobs is not None:
            entries = (entries or []) + out.logprobs
        else:
            assert entries is None, "logprobs in some outputs of a request but not others"
    return tokens, entries, out


def check_against_hf(model, prompt: list[int], tokens: list[int], entries, k: int) -> None:
    """Each entry is the HF model's raw log-softmax at its position (fp32, peaked logits
    of magnitude ~100 on the tiny model: allow a few ulps of that)."""
    reference = hf_logprobs(model, prompt, tokens[: len(entries)])
    for row, token, entry in zip(reference, tokens, entries, strict=False):
        assert entry.token_id == token
        assert entry.logprob == pytest.approx(row[token].item(), abs=1e-4)
        values, ids = row.topk(k)
        assert [t for t, _ in entry.top] == ids.tolist()
        assert [v for _, v in entry.top] == pytest.approx(values.tolist(), abs=1e-4)


async def test_logprobs_match_hf(make_engine, tiny_hf_model):
    engine = make_engine()
    greedy = SamplingParams(max_tokens=12, logprobs=3)
    sampled = SamplingParams(max_tokens=12, logprobs=1, temperature=1.0, seed=5)
    streams = [
        engine.add_request(PROMPTS[0], greedy),
        engine.add_request(PROMPTS[1], SamplingParams(max_tokens=12)),
        engine.add_request(PROMPTS[2], sampled),
    ]
    results = await asyncio.gather(*(collect_logprobs(s) for s in streams))
    (tokens, entries, last), (_, none, _), (drawn, drawn_entries, _) = results
    assert tokens == hf_greedy(tiny_hf_model, PROMPTS[0], 12)
    assert last.finish_reason == "length" and len(entries) == len(tokens) == 12
    check_against_hf(tiny_hf_model, PROMPTS[0], tokens, entries, 3)
    assert all(e.top[0] == (e.token_id, e.logprob) for e in entries)  # greedy
    assert none is None
    assert len(drawn_entries) == len(drawn)
    check_against_hf(tiny_hf_model, PROMPTS[2], drawn, drawn_entries, 1)


async def test_logprobs_skip_only_a_final_stop_token(make_engine):
    engine = make_engine()
    prompt = PROMPTS[2]
    ((tokens, text, _),) = await generate(engine, [prompt], SamplingParams(max_tokens=20))
    params = SamplingParams(max_tokens=20, stop_token_ids=[tokens[4]], logprobs=0)
    stopped, entries, last = await collect_logprobs(engine.add_request(prompt, params))
    assert last.finish_reason == "stop" and stopped[-1] == tokens[4]
    assert [e.token_id for e in entries] == stopped[:-1]
    assert all(e.top == [] for e in entries)
    # EOS: the request ends at once with no entry at all.
    params = SamplingParams(max_tokens=5, logit_bias={2: 1000.0}, logprobs=2)
    stopped, entries, last = await collect_logprobs(engine.add_request(prompt, params))
    assert (stopped, entries, last.finish_reason) == ([2], [], "stop")
    # A stop string is text: the tokens that make it up keep their entries.
    stop = text[len(text) // 2 : len(text) // 2 + 2]
    params = SamplingParams(max_tokens=20, stop=[stop], logprobs=1)
    stopped, entries, last = await collect_logprobs(engine.add_request(prompt, params))
    assert last.finish_reason == "stop" and len(stopped) < 20
    assert [e.token_id for e in entries] == stopped


async def test_logprobs_are_taken_before_the_grammar_mask(make_engine, tiny_hf_model):
    from mellea.engine.constraints import json_schema_grammar

    engine = make_engine()
    prompt = engine.tokenizer.encode("hello")
    grammar = json_schema_grammar({"type": "object", "properties": {"a": {"type": "integer"}}})
    params = SamplingParams(max_tokens=8, grammar=grammar, logprobs=2)
    tokens, entries, _ = await collect_logprobs(engine.add_request(prompt, params))
    check_against_hf(tiny_hf_model, prompt, tokens, entries, 2)
    assert any(e.top[0][0] != e.token_id for e in entries)  # the mask overrode the model


def test_merge_concatenates_logprobs():
    from mellea.engine.front import _merge

    def out(token: int, logprobs: bool) -> RequestOutput:
        entries = [TokenLogprobs(token, -1.0, [])] if logprobs else None
        return RequestOutput("r", "", [token], 1, 1, logprobs=entries)

    merged = _merge(out(3, True), out(4, True))
    assert merged.token_ids == [3, 4]
    assert [e.token_id for e in merged.logprobs] == [3, 4]
    assert _merge(out(3, False), out(4, False)).logprobs is None


def test_naive_engine_rejects_logprobs(tiny_model_dir):
    from benchmarks.hf_generate import HFGenerateEngine

    engine = HFGenerateEngine(str(tiny_model_dir))
    with pytest.raises(ValueError, match="logprobs"):
        engine.add_request([1, 2, 3], SamplingParams(logprobs=1))


async def test_naive_engine_never_streams_the_start_of_a_stop_string(tiny_model_dir):
    from benchmarks.hf_generate import HFGenerateEngine

    async def stream(params: SamplingParams) -> list[str]:
        return [out.text async for out in engine.add_request(PROMPTS[0], params)]

    engine = HFGenerateEngine(str(tiny_model_dir))
    whole = "".join(await stream(SamplingParams(max_tokens=24, ignore_eos=True)))
    middle = len(whole) // 2
    stop = whole[middle : middle + 3]
    expected = whole[: whole.index(stop)]
    pieces = await stream(SamplingParams(max_tokens=24, ignore_eos=True, stop=[stop]))
    assert "".join(pieces) == expected, (pieces, stop)

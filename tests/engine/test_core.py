"""EngineCore driven by hand, one ``step()`` at a time, with no thread (tiny random Llama)."""

from __future__ import annotations

import math

import pytest

from mellea.engine.core import EngineCore, StepOutput
from mellea.engine.output import DeltaBuilder
from mellea.engine.sequence import Sequence
from mellea.engine.types import SamplingParams
from tests.engine.conftest import generate, hf_greedy

PROMPTS = [
    list(range(100, 105)),
    list(range(2000, 2023)),
    list(range(500, 540, 2)),
    list(range(30000, 30037)),
]


@pytest.fixture
def core(tiny_model_dir) -> EngineCore:
    return EngineCore(tiny_model_dir, eos_token_ids={2})


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


def add(core: EngineCore, request_id: str, prompt: list[int], **params) -> Sequence:
    seq = core.new_sequence(request_id, prompt, SamplingParams(**params))
    core.add(seq)
    return seq


def run(core: EngineCore, max_steps: int = 500) -> list[StepOutput]:
    """Step until no sequence is left; every output, in order."""
    outputs: list[StepOutput] = []
    for _ in range(max_steps):
        if not core.has_work():
            return outputs
        outputs += core.step()
    raise AssertionError("the core never finished")


def tokens_of(outputs: list[StepOutput], seq: Sequence) -> list[int]:
    return [o.token for o in outputs if o.seq is seq and o.token is not None]


def test_steps_generate_hf_greedy_tokens(core, tiny_hf_model):
    seqs = [add(core, f"r{i}", p, max_tokens=12) for i, p in enumerate(PROMPTS)]
    outputs = run(core)
    for seq, prompt in zip(seqs, PROMPTS, strict=True):
        assert tokens_of(outputs, seq) == hf_greedy(tiny_hf_model, prompt, 12)
        assert seq.output_ids == tokens_of(outputs, seq)
        last = [o for o in outputs if o.seq is seq][-1]
        assert last.finish_reason == "length" and seq.finish_reason == "length"
    # Every sampled token is an output; the four shared forward passes.
    assert len(outputs) == 4 * 12
    assert core.num_steps < 20
    assert core.requests == {} and core.blocks.num_used == 0


def test_step_with_nothing_to_do_returns_nothing(core):
    assert core.step() == []
    assert core.num_steps == 0


def test_abort_between_steps_frees_blocks_and_drops_the_request(core, tiny_hf_model):
    keep = add(core, "keep", PROMPTS[1], max_tokens=10)
    drop = add(core, "drop", PROMPTS[3], max_tokens=200)
    core.step()
    core.step()
    used = core.blocks.num_used
    assert core.abort("drop") is drop
    assert drop.finish_reason == "abort" and core.blocks.num_used < used
    assert core.abort("drop") is None  # already gone
    outputs = run(core)
    assert all(o.seq is keep for o in outputs)
    assert keep.output_ids == hf_greedy(tiny_hf_model, PROMPTS[1], 10)
    assert core.blocks.num_used == 0


def test_abort_only_matches_its_own_sequence(core):
    first = add(core, "x", PROMPTS[0], max_tokens=5)
    stranger = Sequence("x", PROMPTS[0], SamplingParams(), 5)
    assert core.abort("x", only=stranger) is None
    assert not first.is_finished
    with pytest.raises(ValueError, match="already running"):
        add(core, "x", PROMPTS[1])
    assert core.abort("x", only=first) is first


def test_abort_while_the_model_runs_skips_that_token(core):
    seq = add(core, "a", PROMPTS[0], max_tokens=10)
    other = add(core, "b", PROMPTS[1], max_tokens=3)
    scheduled = core.schedule()
    sampled = core.execute(scheduled)
    core.abort("a")  # what another thread may do between the phases
    outputs = core.update(scheduled, sampled)
    assert [o.seq for o in outputs] == [other]
    assert seq.num_output == 0


@pytest.mark.parametrize("breakage", ["sampling", "preparing", "appending"])
def test_a_failing_sequence_does_not_fail_the_others(core, tiny_hf_model, breakage):
    victims = [add(core, "v1", PROMPTS[1], max_tokens=8), add(core, "v2", PROMPTS[2], max_tokens=8)]
    bad = add(core, "bad", PROMPTS[0], max_tokens=8, temperature=1.0, logit_bias={5: 1.0})
    core.step()  # all three prefill and get a first token
    error = RuntimeError("broken stop checker")
    if breakage == "sampling":
        bad.params.logit_bias[5] = math.nan
    elif breakage == "preparing":
        bad.params.logit_bias["not a token"] = 1.0  # type: ignore[index]
    else:

        def broken(token: int, num_output: int) -> None:
            raise error

        bad.stop_checker.check_token = broken  # type: ignore[union-attr]
    outputs = run(core)
    failures = [o for o in outputs if o.error is not None]
    assert [o.seq for o in failures] == [bad]
    assert failures[0].finish_reason == "abort" and bad.finish_reason == "abort"
    if breakage == "appending":
        assert failures[0].error is error
    for seq, prompt in zip(victims, (PROMPTS[1], PROMPTS[2]), strict=True):
        assert seq.output_ids == hf_greedy(tiny_hf_model, prompt, 8)
        assert seq.finish_reason == "length"
    assert core.blocks.num_used == 0


def test_a_failed_forward_fails_that_batch_and_the_core_keeps_going(core, monkeypatch):
    def broken(inputs):
        raise MemoryError("boom")

    seq = add(core, "a", PROMPTS[0], max_tokens=3)
    monkeypatch.setattr(core.runner, "execute", broken)
    outputs = core.step()
    assert [(o.seq, type(o.error)) for o in outputs] == [(seq, MemoryError)]
    assert core.blocks.num_used == 0 and not core.has_work()
    monkeypatch.undo()
    again = add(core, "a", PROMPTS[0], max_tokens=3)
    run(core)
    assert again.num_output == 3


def test_prefix_reuse_survives_between_requests(core):
    prompt = list(range(1000, 1040))  # 2 full blocks of 16, plus 8 tokens
    first = add(core, "1", prompt, max_tokens=6)
    run(core)
    second = add(core, "2", prompt, max_tokens=6)
    run(core)
    assert (first.num_cached, second.num_cached) == (0, 32)
    assert second.output_ids == first.output_ids
    assert core.scheduler.prefix_hit_tokens == 32


def test_stop_token_ends_the_sequence_in_the_same_step(core):
    probe = add(core, "probe", PROMPTS[2], max_tokens=10)
    run(core)
    stop_at = probe.output_ids[3]
    seq = add(core, "s", PROMPTS[2], max_tokens=10, stop_token_ids=[stop_at])
    outputs = run(core)
    assert seq.output_ids == probe.output_ids[: probe.output_ids.index(stop_at) + 1]
    assert outputs[-1].finish_reason == "stop" and "s" not in core.requests


async def test_outputs_equal_the_threaded_engines(core, tokenizer, make_engine):
    params = [
        SamplingParams(max_tokens=16),
        SamplingParams(max_tokens=16, logprobs=2),
        SamplingParams(max_tokens=16, stop=[" "]),
        SamplingParams(max_tokens=16, logit_bias={2: 1000.0}),
    ]
    engine = make_engine()
    threaded = await generate(engine, PROMPTS, params)

    builders = {}
    for i, (prompt, p) in enumerate(zip(PROMPTS, params, strict=True)):
        seq = core.new_sequence(f"r{i}", prompt, p)
        core.add(seq)
        builders[seq.request_id] = DeltaBuilder(seq, tokenizer)
    texts = {rid: "" for rid in builders}
    tokens = {rid: [] for rid in builders}
    last = {}
    while builders:
        for out in core.step():
            rid = out.seq.request_id
            if rid not in builders:
                continue
            delta = builders[rid].add(out.token, out.logprobs, out.finish_reason)
            texts[rid] += delta.text
            tokens[rid] += delta.token_ids
            if delta.finished:
                core.finish(out.seq, delta.finish_reason)  # a stop string: the front's job
                del builders[rid]
                last[rid] = delta
    for i, (want_tokens, want_text, want_last) in enumerate(threaded):
        rid = f"r{i}"
        assert (tokens[rid], texts[rid]) == (want_tokens, want_text)
        assert last[rid].finish_reason == want_last.finish_reason
        assert last[rid].completion_tokens == want_last.completion_tokens
    assert last["r2"].finish_reason == "stop"  # the stop string is exercised
    assert core.blocks.num_used == 0


async def test_text_and_stop_strings_are_built_off_the_engine_lock(make_engine, monkeypatch):
    from mellea.engine.detokenizer import IncrementalDetokenizer
    from mellea.engine.stops import StopChecker

    engine = make_engine()
    held: list[bool] = []
    step, feed = IncrementalDetokenizer.step, StopChecker.feed

    def watched_step(self, token_ids):
        held.append(engine._lock.locked())
        return step(self, token_ids)

    def watched_feed(self, text):
        held.append(engine._lock.locked())
        return feed(self, text)

    monkeypatch.setattr(IncrementalDetokenizer, "step", watched_step)
    monkeypatch.setattr(StopChecker, "feed", watched_feed)
    ((tokens, text, _),) = await generate(engine, [PROMPTS[1]], SamplingParams(max_tokens=12))
    stop = text[len(text) // 2 : len(text) // 2 + 2]
    params = SamplingParams(max_tokens=12, stop=[stop])
    results = await generate(
        engine, [PROMPTS[1], PROMPTS[2]], [params, SamplingParams(max_tokens=12)]
    )
    assert results[0][1] == text[: text.index(stop)] and results[0][2].finish_reason == "stop"
    assert len(held) > 2 * len(tokens)
    assert not any(held), "the detokenizer or stop checker ran under the engine lock"
    assert engine.stats()["kv_blocks_used"] == 0


async def test_a_broken_last_delta_fails_its_request_and_frees_its_id(make_engine, monkeypatch):
    import asyncio

    from tests.engine.conftest import collect

    engine = make_engine()
    add = DeltaBuilder.add

    def broken(self, token, logprobs, reason):
        if reason is not None:  # the token the core ended the sequence with
            raise ValueError("bad text")
        return add(self, token, logprobs, reason)

    monkeypatch.setattr(DeltaBuilder, "add", broken)
    stream = engine.add_request(PROMPTS[0], SamplingParams(max_tokens=3), request_id="x")
    with pytest.raises(RuntimeError, match="bad text"):
        await asyncio.wait_for(collect(stream), 30)
    monkeypatch.undo()
    stream = engine.add_request(PROMPTS[0], SamplingParams(max_tokens=3), request_id="x")
    tokens, _, last = await asyncio.wait_for(collect(stream), 30)
    assert len(tokens) == 3 and last.finish_reason == "length"
    assert engine.stats()["kv_blocks_used"] == 0


def test_the_engine_thread_builds_the_core_and_a_failed_build_raises(make_engine, monkeypatch):
    """The model is built where it runs (one OpenMP team, see Engine), and what goes
    wrong there reaches the caller of Engine() as itself."""
    import threading

    from mellea.engine import engine as engine_module

    built_on: list[str] = []
    real = engine_module.EngineCore

    def recording(*args, **kwargs):
        built_on.append(threading.current_thread().name)
        return real(*args, **kwargs)

    monkeypatch.setattr(engine_module, "EngineCore", recording)
    engine = make_engine()
    assert built_on == ["mellea-engine"] and engine.core.runner.model is not None

    def engine_threads() -> int:
        return sum(t.name == "mellea-engine" for t in threading.enumerate())

    running = engine_threads()
    with pytest.raises(ValueError, match="holds no block"):
        make_engine(kv_cache_memory=16)
    assert engine_threads() == running  # the failed build's thread has ended

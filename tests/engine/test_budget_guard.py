"""Budget-aware closing (issue 23): a constrained answer cut by ``max_tokens`` is still
a complete value of its schema, from a token source that never closes anything."""

from __future__ import annotations

import json

import pytest
import torch
from pydantic import BaseModel, Field

from mellea.engine.budget_guard import Lexical, closing_path
from mellea.engine.constraints import ConstraintCompiler, json_schema_grammar
from mellea.engine.sampler import build_sampling_batch, sample
from mellea.engine.sequence import Sequence
from mellea.engine.stops import StopChecker
from mellea.engine.types import SamplingParams
from tests.engine.conftest import generate


class Point(BaseModel):
    x: int
    y: float


class Item(BaseModel):
    name: str
    tags: list[str] = Field(min_length=1)
    at: Point


class Report(BaseModel):
    """Nested objects, arrays (one with a minimum), required members of each type."""

    title: str
    items: list[Item]
    where: Point
    done: bool


class Inner(BaseModel):
    words: list[str]


class Small(BaseModel):
    inner: Inner
    note: str


# (model, max_tokens): each budget holds the schema's shortest answer (15 tokens for
# Small, 29 for Report with this tokenizer), and none holds what the source writes.
CASES = [(Small, 15), (Small, 20), (Small, 40), (Report, 29), (Report, 40), (Report, 64)]
# What the scripted source favours: letters and words (a string never ends), commas
# and openers (arrays grow, objects open); never a quote or a closing bracket.
RAMBLING = ("a", " the", "hello", ",", "[", "{")


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture(scope="module")
def compiler(tokenizer):
    return ConstraintCompiler(tokenizer, len(tokenizer))


def rambling_ids(tokenizer) -> list[int]:
    ids = [tokenizer.encode(text) for text in RAMBLING]
    assert all(len(i) == 1 for i in ids), ids
    return [i[0] for i in ids]


def scripted_run(compiler, tokenizer, model: type[BaseModel], max_tokens: int, seed: int):
    """Sample until the sequence ends, from logits that favour never closing anything;
    its output tokens and finish reason."""
    grammar = json_schema_grammar(model.model_json_schema())
    params = SamplingParams(max_tokens=max_tokens, temperature=1.0, seed=seed, grammar=grammar)
    seq = Sequence("scripted", [1], params, max_tokens)
    seq.generator = torch.Generator().manual_seed(seed)
    seq.stop_checker = StopChecker(params, {tokenizer.eos_token_id}, max_tokens)
    seq.constraint = compiler.matcher(grammar)
    noise = torch.Generator().manual_seed(seed)
    favoured = rambling_ids(tokenizer)
    vocab = len(tokenizer)
    while True:
        logits = torch.randn(1, vocab, generator=noise)
        logits[0, favoured] += 12.0
        tokens, _ = sample(logits, build_sampling_batch([seq], vocab))
        reason = seq.append(int(tokens[0]))
        if reason is not None:
            assert seq.constraint.closed_by_budget  # the source alone never closes
            return seq.output_ids, reason


@pytest.mark.parametrize(("model", "max_tokens"), CASES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_source_that_never_closes_still_ends_valid(compiler, tokenizer, model, max_tokens, seed):
    output, reason = scripted_run(compiler, tokenizer, model, max_tokens, seed)
    text = tokenizer.decode(output, skip_special_tokens=True)  # an EOS shows no text
    assert len(output) <= max_tokens
    assert reason == "length", text  # the budget shaped the answer: said so
    model.model_validate(json.loads(text))  # parses, and has every required member


def test_far_from_the_limit_the_source_decides(compiler, tokenizer):
    """With room to spare the rambling source writes on (nothing is forced early):
    the string it opens runs long before the answer closes."""
    output, reason = scripted_run(compiler, tokenizer, Small, 120, seed=5)
    text = tokenizer.decode(output, skip_special_tokens=True)  # an EOS shows no text
    Small.model_validate(json.loads(text))
    assert reason == "length" and len(output) == 120
    value = json.loads(text)
    written = "".join(value["inner"]["words"]) + value["note"]
    assert len(written) > 60, text  # most of the 120 tokens are the source's own


def test_the_closing_path_completes_every_cut(compiler, tokenizer):
    """Cut a valid answer after each of its tokens: the path from there completes it."""
    answer = Report(
        title='say "hi"\\n',
        items=[Item(name="é", tags=["a", "b,c"], at=Point(x=-12, y=1.5e3))],
        where=Point(x=7, y=-0.25),
        done=True,
    )
    ids = tokenizer.encode(answer.model_dump_json())
    grammar = json_schema_grammar(Report.model_json_schema())
    for cut in range(len(ids) + 1):
        constraint = compiler.matcher(grammar)
        for token in ids[:cut]:
            assert constraint.accept(token)
        guard = constraint.guard
        lexical = Lexical().scan(guard.tokens.decode(ids[:cut]))
        path = closing_path(constraint.matcher.deep_copy(), lexical, guard.tokens)
        assert path is not None, cut
        Report.model_validate_json(tokenizer.decode(ids[:cut] + path))


async def test_the_tiny_random_model_answers_whole_json_at_any_budget(make_engine):
    engine = make_engine()
    prompt = engine.tokenizer.encode("Report, please.")
    cases = [(model, n, seed) for model, n in CASES for seed in (0, 1)]
    params = [
        SamplingParams(
            max_tokens=n,
            grammar=json_schema_grammar(model.model_json_schema()),
            temperature=1.0,
            seed=seed,
        )
        for model, n, seed in cases
    ]
    results = await generate(engine, [prompt] * len(cases), params)
    for (model, n, _), (tokens, text, last) in zip(cases, results, strict=True):
        assert len(tokens) <= n
        model.model_validate(json.loads(text))
        assert last.finish_reason in ("stop", "length")
    assert any(last.finish_reason == "length" for _, _, last in results)

"""Constrained decoding: every output follows its grammar, on the tiny and the real model."""

from __future__ import annotations

import json

import pytest
import torch

from mellea.engine.constraints import GrammarError, _unpack, json_schema_grammar, mask_logits
from mellea.engine.types import SamplingParams
from tests.engine.conftest import generate

CITY = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 20},
        "population": {"type": "integer"},
        "coastal": {"type": "boolean"},
    },
    "required": ["city", "population", "coastal"],
    "additionalProperties": False,
}


def check_city(text: str) -> None:
    value = json.loads(text)
    assert set(value) == {"city", "population", "coastal"}
    assert isinstance(value["city"], str) and len(value["city"]) <= 20
    assert isinstance(value["population"], int) and isinstance(value["coastal"], bool)


def test_unpack_bits():
    packed = torch.tensor([[0b101, 0]], dtype=torch.int32)
    allowed = _unpack(packed, 40)
    assert allowed.shape == (1, 40)
    assert allowed[0].nonzero().flatten().tolist() == [0, 2]


async def test_tiny_random_model_follows_the_schema(make_engine):
    engine = make_engine()
    grammar = json_schema_grammar(CITY)
    prompts = [engine.tokenizer.encode(p) for p in ("hello", "a longer prompt here", "x")]
    params = [
        SamplingParams(max_tokens=60, grammar=grammar),
        SamplingParams(max_tokens=60, grammar=grammar, temperature=1.0, seed=3),
        SamplingParams(max_tokens=60, grammar=grammar, temperature=1.5, top_p=0.9, seed=4),
    ]
    results = await generate(engine, prompts, params)
    for _, text, last in results:
        # the random model may ramble inside a string until max_tokens: the budget
        # then closes the answer, which is whole JSON all the same (issue 23)
        assert last.finish_reason in ("stop", "length")
        check_city(text)
    assert any(last.finish_reason == "stop" for _, _, last in results)


async def test_mixed_batch_leaves_unconstrained_rows_alone(make_engine):
    engine = make_engine()
    prompt = engine.tokenizer.encode("same prompt")
    free = SamplingParams(max_tokens=12, ignore_eos=True)
    (plain_tokens, _, _), _ = await generate(
        engine,
        [prompt, prompt],
        [free, SamplingParams(max_tokens=12, grammar=json_schema_grammar(CITY))],
    )
    ((alone, _, _),) = await generate(engine, [prompt], free)
    assert plain_tokens == alone


async def test_bad_grammar_is_a_value_error(make_engine):
    engine = make_engine()
    with pytest.raises(ValueError):
        engine.add_request([1, 2, 3], SamplingParams(grammar="%%% not a grammar"))
    bad_ref = {"type": "object", "properties": {"a": {"$ref": "#/nowhere"}}}
    with pytest.raises(GrammarError):
        engine.add_request([1, 2, 3], SamplingParams(grammar=json_schema_grammar(bad_ref)))


@pytest.mark.model
async def test_real_model_json_is_always_valid(real_engine):
    grammar = json_schema_grammar(CITY)
    prompts = [
        real_engine.apply_chat_template([{"role": "user", "content": q}])
        for q in ("Describe Paris as JSON.", "Tell me a joke.", "Give me data about Lisbon.")
    ]
    params = [
        SamplingParams(max_tokens=80, grammar=grammar),
        SamplingParams(max_tokens=80, grammar=grammar, temperature=0.9, seed=1),
        SamplingParams(max_tokens=80, grammar=grammar, temperature=0.9, seed=2),
    ]
    for _, text, last in await generate(real_engine, prompts, params):
        assert last.finish_reason == "stop", text
        check_city(text)


def test_mask_logits_only_touches_constrained_rows(tiny_model_dir):
    from transformers import AutoTokenizer

    from mellea.engine.constraints import ConstraintCompiler

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    vocab = len(tokenizer)
    compiler = ConstraintCompiler(tokenizer, vocab)
    constraint = compiler.matcher(json_schema_grammar({"type": "boolean"}))
    logits = torch.randn(3, vocab)
    before = logits.clone()
    mask_logits(logits, [None, constraint, None])
    assert torch.equal(logits[0], before[0]) and torch.equal(logits[2], before[2])
    allowed = logits[1].isfinite()
    assert 0 < int(allowed.sum()) < vocab // 100  # a boolean's first token: few choices
    assert torch.equal(logits[1][allowed], before[1][allowed])
    texts = {tokenizer.decode([int(i)]) for i in allowed.nonzero().flatten()}
    assert all("true".startswith(t.strip()) or "false".startswith(t.strip()) for t in texts), texts
    assert {"t", "f"} & {t.strip()[:1] for t in texts}
    unconstrained = torch.randn(2, vocab)
    copy = unconstrained.clone()
    mask_logits(unconstrained, [None, None])
    assert torch.equal(unconstrained, copy)


def test_unbounded_integers_get_the_safe_range():
    from mellea.engine.constraints import SAFE_INTEGER, bounded_integers

    schema = {
        "type": "object",
        "properties": {
            "a": {"type": "integer"},
            "b": {"type": "integer", "minimum": 0},
            "c": {"type": "array", "items": {"type": ["integer", "null"]}},
        },
    }
    out = bounded_integers(schema)
    assert out["properties"]["a"] == {
        "type": "integer",
        "minimum": -SAFE_INTEGER,
        "maximum": SAFE_INTEGER,
    }
    assert out["properties"]["b"] == {"type": "integer", "minimum": 0, "maximum": SAFE_INTEGER}
    assert out["properties"]["c"]["items"]["maximum"] == SAFE_INTEGER
    assert "minimum" not in schema["properties"]["a"], "the input is not modified"


def test_objects_with_properties_are_closed_unless_they_say_otherwise():
    from mellea.engine.constraints import closed_objects

    schema = {
        "type": "object",
        "properties": {
            "properties": {"type": "object", "properties": {"x": {"type": "string"}}},
            "open": {"type": "object", "properties": {}, "additionalProperties": True},
            "pattern": {"type": "object", "properties": {}, "patternProperties": {"^a": {}}},
            "free": {"type": "object"},
        },
        "$defs": {"d": {"type": "object", "properties": {"y": {"type": "integer"}}}},
        "default": {"properties": {}},
    }
    out = closed_objects(schema)
    assert out["additionalProperties"] is False
    # A property named "properties" is a schema, not a properties mapping.
    assert out["properties"]["properties"]["additionalProperties"] is False
    assert "additionalProperties" not in out["properties"]["properties"]["properties"]
    assert out["properties"]["open"]["additionalProperties"] is True
    assert "additionalProperties" not in out["properties"]["pattern"]
    assert "additionalProperties" not in out["properties"]["free"]
    assert out["$defs"]["d"]["additionalProperties"] is False
    assert out["default"] == {"properties": {}}, "literal values are left alone"
    assert "additionalProperties" not in schema, "the input is not modified"


async def test_grammar_refuses_properties_the_schema_does_not_list(make_engine):
    grammar = json_schema_grammar({"type": "object", "properties": {"a": {"type": "integer"}}})
    engine = make_engine()
    prompts = [engine.tokenizer.encode(p) for p in ("hello", "x")]
    params = [
        SamplingParams(max_tokens=40, grammar=grammar, temperature=1.0, seed=s) for s in (1, 2)
    ]
    for _, text, last in await generate(engine, prompts, params):
        assert last.finish_reason == "stop", text
        assert set(json.loads(text)) <= {"a"}


def json_depth(value) -> int:
    """Levels of arrays and objects in a parsed JSON value."""
    if isinstance(value, dict):
        return 1 + max(map(json_depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(json_depth, value), default=0)
    return 0


def nesting_bias(tokenizer) -> dict[int, float]:
    """A logit bias under which a JSON grammar's model opens an empty key and a new
    object as its value, again and again: most for the tokens that open an object
    (``{"``, ``:{``), less for those that close a key (``"``, ``":``)."""
    vocab = tokenizer.get_vocab()
    weights = {'{"': 100.0, ":{": 100.0, '"': 50.0, '":': 50.0}
    bias = {}
    for token, token_id in vocab.items():
        text = tokenizer.convert_tokens_to_string([token])
        if text in weights:
            bias[token_id] = weights[text]
    assert len(bias) == len(weights)
    return bias


@pytest.mark.model
@pytest.mark.parametrize("schema", [{"type": "object"}, {}, {"type": "array"}])
async def test_a_free_value_closes_even_when_the_model_would_nest(real_engine, schema):
    """A schema-free object (a `dict` return type) used to let the default model nest
    ``{"{":{"{":...`` until max_tokens (issue 21): free values nest at most FREE_DEPTH
    levels, so it closes. (The real model, not the tiny random one: that one fills the
    free strings and names with the biased tokens up to their bounds instead.)"""
    from mellea.engine.constraints import FREE_DEPTH

    engine = real_engine
    params = SamplingParams(
        max_tokens=200,
        grammar=json_schema_grammar(schema),
        logit_bias=nesting_bias(engine.tokenizer),
    )
    ((_, text, last),) = await generate(engine, [engine.tokenizer.encode("data:")], params)
    assert last.finish_reason == "stop", text[:200]
    value = json.loads(text)
    assert json_depth(value) <= FREE_DEPTH, text
    if "type" in schema:
        assert isinstance(value, dict if schema["type"] == "object" else list)


def test_free_values_are_bounded_but_given_shapes_are_kept():
    from mellea.engine.constraints import FREE_MEMBERS, any_value, bounded_free_values

    free = bounded_free_values({"type": "object", "description": "anything"})
    assert list(free["patternProperties"].values()) == [any_value(2)]
    assert free["additionalProperties"] is False
    assert free["maxProperties"] == FREE_MEMBERS and free["description"] == "anything"
    given = {"type": "object", "additionalProperties": {"type": "integer"}}
    assert bounded_free_values(given) == given
    nested = bounded_free_values({"type": "object", "properties": {"meta": {}}})
    assert nested["properties"]["meta"] == any_value()
    assert bounded_free_values({"enum": [{}]}) == {"enum": [{}]}  # literals stay

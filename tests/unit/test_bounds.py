"""The request bounds of ``mellea.serve.bounds`` and the schema converter's refusals."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic_core import PydanticCustomError

from mellea.serve import bounds
from mellea.serve.bounds import check_body, dotted, schema_problem, too_many_values
from mellea.serve.errors import OpenAIError
from mellea.serve.schema import UnsupportedSchemaError, model_from_schema


def refused(body: dict) -> str | None:
    """The field ``check_body`` names, or None if it accepts the body."""
    try:
        check_body(body)
    except PydanticCustomError as exc:
        return exc.context[bounds.WIRE_PARAM]
    return None


def test_check_body_names_the_field_of_a_lone_surrogate():
    assert (
        refused({"messages": [{"content": "ok"}, {"content": "a\udfffb"}]}) == "messages[1].content"
    )
    assert refused({"m": {"k\ud800": 1}}) == "m.k\\ud800"
    assert refused({"messages": [{"content": "🙂 \U0010ffff \x00"}]}) is None


def test_check_body_bounds_depth_and_values():
    deep: object = 1
    for _ in range(bounds.MAX_BODY_DEPTH):
        deep = [deep]
    assert refused({"x": deep}) == "x[0][0][0][0][0]"  # the start of the path only
    assert refused({"x": deep[0]}) is None
    assert refused({"x": [0] * bounds.MAX_BODY_VALUES}) == "x"
    assert refused({"x": [0] * (bounds.MAX_BODY_VALUES - 10)}) is None


def test_dotted_paths():
    assert dotted(("messages", 0, "content", 2)) == "messages[0].content[2]"
    assert dotted(()) is None


def _padded(value: object) -> bytes:
    """A body over the pre-scan size holding ``value`` and a long text full of commas."""
    text = 'a, "quoted", back\\slash \\\\, [x], {y}, ' * 40_000
    return json.dumps({"value": value, "text": text}).encode()


@pytest.mark.parametrize(
    "value",
    [0, [0] * 1000, [{"a": "b,c"}] * 1000, "\\" * 1000, '"' * 1000, ["x\\", "y\\\\"] * 500],
)
def test_prescan_accepts_large_bodies_of_few_values(value):
    body = _padded(value)
    assert len(body) > bounds.PRESCAN_BYTES
    assert not too_many_values(body)


@pytest.mark.parametrize(
    "value",
    [[0] * 300_000, [[]] * 300_000, ["s"] * 500_000, [{"a": 1}] * 200_000, [['\\"', 1]] * 150_000],
)
def test_prescan_refuses_bodies_of_far_too_many_values(value):
    assert too_many_values(_padded(value))


@settings(max_examples=60, deadline=None)
@given(
    st.recursive(
        st.none() | st.integers() | st.text(alphabet='a,"\\[]{} ', max_size=20),
        lambda x: (
            st.lists(x, max_size=50)
            | st.dictionaries(st.text(alphabet='ab,"\\', max_size=4), x, max_size=5)
        ),
        max_leaves=400,
    )
)
def test_prescan_never_refuses_what_check_body_accepts(value):
    body = _padded([value] * 50)
    if too_many_values(body):
        with pytest.raises(PydanticCustomError):
            check_body(json.loads(body))


def test_logit_bias_stop_and_generation_checks():
    bounds.check_logit_bias({"0": -100, "49151": 100.0})
    for bad in ({"٣": 1}, {"1": float("nan")}, {"1": 100.01}, {str(i): 0 for i in range(301)}):
        with pytest.raises(OpenAIError) as caught:
            bounds.check_logit_bias(bad)
        assert caught.value.param == "logit_bias"
    bounds.check_stop(["a"] * 16)
    for bad in (["a"] * 17, "a" * 257, ["a", ""]):
        with pytest.raises(OpenAIError):
            bounds.check_stop(bad)
    bounds.check_generations(64, 2)
    with pytest.raises(OpenAIError) as caught:
        bounds.check_generations(1, 129)
    assert caught.value.param == "n"


def test_schema_problem_bounds_depth_and_size():
    schema: dict = {"type": "string"}
    for _ in range(bounds.MAX_SCHEMA_DEPTH):
        schema = {"items": schema}
    assert "deeper" in schema_problem(schema)
    assert "more than" in schema_problem({"enum": list(range(bounds.MAX_SCHEMA_VALUES))})
    assert schema_problem({"type": "object", "properties": {"a": {"type": "string"}}}) is None


@pytest.mark.parametrize(
    ("schema", "words"),
    [
        ({"type": "object", "required": 5}, "'required'"),
        ({"type": "object", "properties": {"a": {"enum": [[1]]}}}, "'enum'"),
        (
            {
                "type": "object",
                "$defs": {"n": {"$ref": "#/$defs/n"}},
                "properties": {"a": {"$ref": "#/$defs/n"}},
            },
            "recursive",
        ),
        ({"type": "object", "properties": {"a": {"type": 5}}}, "unsupported schema type"),
    ],
)
def test_model_from_schema_refuses_in_our_words(schema, words):
    with pytest.raises(UnsupportedSchemaError) as caught:
        model_from_schema(schema)
    assert words in str(caught.value)
    assert "object is not" not in str(caught.value)


def test_model_from_schema_converts_ref_fan_out_once_per_definition():
    """2**30 expansions if each $ref were expanded where it stands; one model per
    definition as it is (see tests/unit/test_schema_refs.py for the work counted)."""
    defs = {
        f"d{i}": {
            "type": "object",
            "properties": {"a": {"$ref": f"#/$defs/d{i + 1}"}, "b": {"$ref": f"#/$defs/d{i + 1}"}},
        }
        for i in range(30)
    }
    defs["d30"] = {"type": "string"}
    schema = {"type": "object", "$defs": defs, "properties": {"x": {"$ref": "#/$defs/d0"}}}
    model = model_from_schema(schema)
    assert len(model.model_json_schema()["$defs"]) == 30

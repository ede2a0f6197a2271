"""Request -> serve() arguments, JSON schema -> pydantic, error param paths."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from mellea.backends.local import sampling_params
from mellea.backends.model_options import ModelOption
from mellea.serve.chat.arguments import serve_arguments
from mellea.serve.errors import OpenAIError, param_path
from mellea.serve.protocol import ChatCompletionRequest
from mellea.serve.schema import UnsupportedSchemaError, model_from_schema


def request(**fields) -> ChatCompletionRequest:
    return ChatCompletionRequest(messages=[{"role": "user", "content": "hi"}], **fields)


def test_nothing_sent_means_no_options():
    args = serve_arguments(request())
    assert args.model_options == {} and args.format is None and args.requirements is None


def test_stream_and_max_tokens_mapping():
    args = serve_arguments(request(stream=True, max_tokens=5, stop=["a", "b"], tool_choice="none"))
    assert args.model_options == {
        ModelOption.STREAM: True,
        ModelOption.MAX_NEW_TOKENS: 5,
        ModelOption.STOP_SEQUENCES: ["a", "b"],
        ModelOption.TOOL_CHOICE: "none",
    }


def test_named_tool_choice_must_exist():
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]
    choice = {"type": "function", "function": {"name": "other"}}
    with pytest.raises(OpenAIError) as info:
        serve_arguments(request(tools=tools, tool_choice=choice))
    assert info.value.param == "tool_choice"
    args = serve_arguments(
        request(tools=tools, tool_choice={**choice, "function": {"name": "get_weather"}})
    )
    assert args.model_options[ModelOption.TOOLS][0]["function"]["name"] == "get_weather"


def test_schema_to_model():
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "age": {"type": "integer"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "kind": {"enum": ["a", "b"]},
            "home": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
        "required": ["name", "age"],
        "additionalProperties": False,
    }
    model = model_from_schema(schema, "person")
    ok = model.model_validate(
        {"name": "A", "age": 3, "tags": ["x"], "kind": "a", "home": {"city": "P"}}
    )
    assert ok.age == 3
    for bad in (
        {"name": "A"},
        {"name": "A", "age": "old"},
        {"name": "A", "age": 1, "kind": "c"},
        {"name": "A", "age": 1, "extra": 1},
    ):
        with pytest.raises(ValidationError):
            model.model_validate(bad)
    with pytest.raises(UnsupportedSchemaError):
        model_from_schema({"type": "string"})
    with pytest.raises(UnsupportedSchemaError):
        model_from_schema({"type": "object", "properties": {"x": {"$ref": "http://elsewhere"}}})


def test_param_path():
    assert param_path(("body", "messages", 0, "role")) == "messages[0].role"
    assert param_path(("body", "temperature")) == "temperature"
    assert param_path(("body",)) is None


def test_sampling_params_from_options():
    params = sampling_params(
        {
            ModelOption.TEMPERATURE: 0.3,
            ModelOption.MAX_NEW_TOKENS: 9,
            "max_tokens": 100,
            ModelOption.SEED: 4,
            ModelOption.STOP_SEQUENCES: ["x"],
            "logit_bias": {"17": -100},
            "top_k": 3,
        }
    )
    assert (params.temperature, params.max_tokens, params.seed, params.top_k) == (0.3, 9, 4, 3)
    assert params.stop == ["x"] and params.logit_bias == {17: -100.0}
    assert sampling_params({}).temperature == 0.0


def test_memory_sizes():
    from mellea.backends.runtime import parse_size

    assert parse_size("2GiB", fraction=True) == 2 * 2**30
    assert parse_size("512MiB", fraction=True) == 512 * 2**20
    assert parse_size("1000", fraction=True) == 1000
    assert parse_size("0.25", fraction=True) == 0.25
    with pytest.raises(ValueError):
        parse_size("lots", fraction=True)


def test_one_size_parser_reads_byte_limits_and_memory_budgets():
    """--responses-max-bytes and --kv-cache-memory read sizes through one parser: the
    same units, a plain number of bytes, and a fraction only where memory is meant."""
    from mellea.backends.runtime import parse_size

    assert parse_size("256MiB") == 256 * 2**20
    assert parse_size("1G") == parse_size("1GB") == 10**9
    assert parse_size("1.5KiB") == 1536
    assert parse_size("4096") == 4096
    assert parse_size("0.25") == 0  # bytes, not a fraction
    for bad in ("lots", "-1MiB", "inf"):
        with pytest.raises(ValueError):
            parse_size(bad)

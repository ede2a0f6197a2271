"""Hostile and careless requests: each gets a 4xx in our words, and hurts no other request.

Most cases run in-process (``httpx.ASGITransport`` over ``create_app``) against the
echo test program, so hundreds of them take seconds; a few run over a real loopback
socket, and the cross-request cases run a tiny random model on the real engine.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cli.serve.app import create_app
from cli.serve.program import Program
from cli.serve.settings import ServeSettings
from mellea.serve import bounds
from tests.server import PROGRAMS, serve

ECHO = PROGRAMS / "echo.py"
CHAT, COMPLETIONS, RESPONSES = "/v1/chat/completions", "/v1/completions", "/v1/responses"
ROUTES = (CHAT, COMPLETIONS, RESPONSES)
# Text that would mean an exception's own words reached the client.
PYTHON_TEXT = (
    "Traceback",
    "object is not",
    "recursion",
    "Error(",
    "Exception",
    "<class",
    "NoneType",
    "not iterable",
    "unhashable",
    "codec can't",
)
MSG = [{"role": "user", "content": "hi there"}]
BASE = {CHAT: {"messages": MSG}, COMPLETIONS: {"prompt": "hi there"}, RESPONSES: {"input": "hi"}}


def nested(depth: int, leaf: Any = 1) -> Any:
    """``{"a": {"a": ... leaf}}``, ``depth`` objects deep."""
    value = leaf
    for _ in range(depth):
        value = {"a": value}
    return value


def deep_schema(levels: int) -> dict[str, Any]:
    """An object schema with ``levels`` nested object properties."""
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"x": schema}}
    return schema


def chat_tool(parameters: Any, name: str = "f") -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "parameters": parameters}}


def response_tool(parameters: Any, name: str = "f") -> dict[str, Any]:
    return {"type": "function", "name": name, "parameters": parameters}


def json_schema_format(schema: Any) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "out", "schema": schema}}


@pytest.fixture(scope="module")
def echo_app():
    return create_app(Program.load(ECHO), ServeSettings(program=str(ECHO)))


@pytest.fixture
async def client(echo_app, monkeypatch):
    monkeypatch.setenv("ECHO_DELAY", "0")
    transport = httpx.ASGITransport(app=echo_app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost", timeout=30) as c:
        yield c


async def post(client: httpx.AsyncClient, route: str, body: Any) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return await client.post(route, content=content, headers={"content-type": "application/json"})


def assert_our_error(response: httpx.Response, param: str | None = "any") -> dict[str, Any]:
    """A 4xx in the OpenAI shape, naming ``param`` (when given), with no Python text."""
    assert 400 <= response.status_code < 500, response.text[:500]
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    for text in PYTHON_TEXT:
        assert text not in error["message"], error["message"]
    if param != "any":
        assert error["param"] == param, error
    return error


# -- 1. logit_bias: the values that once failed every co-batched request ---------------

BAD_BIAS = [
    b'{"1": NaN}',
    b'{"1": Infinity}',
    b'{"1": -Infinity}',
    b'{"1": 1e39}',
    b'{"1": 100.5}',
    b'{"1": -101}',
    b'{"--1": 1}',
    b'{"-1": 1}',
    '{"²": 1}'.encode(),
    '{"١": 1}'.encode(),  # an Arabic-Indic digit: int() takes it
    b'{" 1": 1}',
    b'{"1 ": 1}',
    b'{"1_0": 1}',
    b'{"+1": 1}',
    b'{"": 1}',
    b'{"0x10": 1}',
    b'{"99999999999": 1}',
    json.dumps({str(i): 1 for i in range(bounds.MAX_LOGIT_BIAS + 1)}).encode(),
]


@pytest.mark.parametrize("bias", BAD_BIAS, ids=range(len(BAD_BIAS)))
@pytest.mark.parametrize("route", [CHAT, COMPLETIONS])
async def test_bad_logit_bias_is_a_400_naming_it(client, route, bias):
    prefix = (
        b'{"messages": [{"role": "user", "content": "x"}]' if route == CHAT else b'{"prompt": "x"'
    )
    response = await post(client, route, prefix + b', "logit_bias": ' + bias + b"}")
    assert response.status_code == 400
    assert_our_error(response, "logit_bias")


async def test_logit_bias_within_bounds_is_served(client):
    bias = {str(i): (-100 if i % 2 else 100) for i in range(bounds.MAX_LOGIT_BIAS)}
    response = await post(client, CHAT, {"messages": MSG, "logit_bias": bias})
    assert response.status_code == 200, response.text


# -- 2. valid JSON that once gave a 500 -------------------------------------------------

SURROGATE_BODIES = [
    (CHAT, {"messages": [{"role": "user", "content": "a\ud800b"}]}, "messages[0].content"),
    (CHAT, {"messages": [{"role": "user", "content": [{"type": "text", "text": "\udfff"}]}]}, None),
    (CHAT, {"messages": MSG, "metadata": {"k\ud800": "v"}}, "metadata.k\\ud800"),
    (CHAT, {"messages": MSG, "stop": ["\ud83d"]}, "stop[0]"),
    (
        CHAT,
        {"messages": MSG, "tools": [chat_tool({"type": "object"}, "f\udc00")]},
        "tools[0].function.name",
    ),
    (CHAT, {"messages": MSG, "unknown": {"x": ["\ud800"]}}, "unknown.x[0]"),
    (COMPLETIONS, {"prompt": "\ud800"}, "prompt"),
    (COMPLETIONS, {"prompt": ["ok", "\udbff"]}, "prompt[1]"),
    (RESPONSES, {"input": "\ud800"}, "input"),
    (RESPONSES, {"input": "\ud800", "stream": True}, "input"),
    (RESPONSES, {"input": [{"role": "user", "content": "\ud800"}]}, "input[0].content"),
    (RESPONSES, {"input": "x", "instructions": "\ud800"}, "instructions"),
]


@pytest.mark.parametrize(("route", "body", "param"), SURROGATE_BODIES)
async def test_a_lone_surrogate_is_a_400_naming_the_field(client, route, body, param):
    response = await post(client, route, body)
    assert response.status_code == 400
    error = assert_our_error(response)
    assert "surrogate" in error["message"]
    if param is not None:
        assert error["param"] == param


async def test_a_surrogate_pair_is_text_not_an_error(client):
    response = await post(client, CHAT, {"messages": [{"role": "user", "content": "🙂 ok"}]})
    assert response.status_code == 200
    assert response.json()["choices"][0]["message"]["content"] == "🙂 ok"


SCHEMA_CASES = [
    (CHAT, {"messages": MSG, "tools": [chat_tool(nested(400))]}, "tools"),
    (RESPONSES, {"input": "x", "tools": [response_tool(nested(400))]}, "tools"),
    (CHAT, {"messages": MSG, "tools": [chat_tool(deep_schema(30))]}, "tools"),
    (RESPONSES, {"input": "x", "tools": [response_tool(deep_schema(30))]}, "tools"),
    (CHAT, {"messages": MSG, "response_format": json_schema_format(deep_schema(30))}, "response"),
    (
        RESPONSES,
        {
            "input": "x",
            "text": {"format": {"type": "json_schema", "name": "o", "schema": deep_schema(30)}},
        },
        "text",
    ),
    (CHAT, {"messages": MSG, "tools": [chat_tool({"enum": list(range(20_000))})]}, "tools"),
    (
        CHAT,
        {"messages": MSG, "tools": [chat_tool({"type": "object"}, f"f{i}") for i in range(129)]},
        "tools",
    ),
    (
        RESPONSES,
        {"input": "x", "tools": [response_tool({"type": "object"}, f"f{i}") for i in range(129)]},
        "tools",
    ),
    (CHAT, {"messages": MSG, "tools": [chat_tool({"type": "object"}, "f" * 100_000)]}, "tools"),
]


@pytest.mark.parametrize(("route", "body", "param"), SCHEMA_CASES, ids=range(len(SCHEMA_CASES)))
async def test_deep_or_large_schemas_and_tools_are_a_400(client, route, body, param):
    response = await post(client, route, body)
    assert response.status_code == 400
    error = assert_our_error(response)
    assert (error["param"] or "").startswith(param), error


MALFORMED_SCHEMAS = [
    {"type": "object", "required": 5},
    {"type": "object", "required": [1, 2]},
    {"type": "object", "properties": 5},
    {"type": "object", "properties": {"a": 5}},
    {"type": "object", "properties": {"a": {"enum": []}}},
    {"type": "object", "properties": {"a": {"enum": [{"x": 1}]}}},
    {"type": "object", "properties": {"a": {"enum": 5}}},
    {"type": "object", "properties": {"a": {"const": [1]}}},
    {"type": "object", "properties": {"a": {"anyOf": []}}},
    {"type": "object", "properties": {"a": {"anyOf": 3}}},
    {"type": "object", "properties": {"a": {"type": [1, 2]}}},
    {"type": "object", "properties": {"a": {"type": {"x": 1}}}},
    {"type": "object", "properties": {"a": {"type": "array", "items": 5}}},
    {"type": "object", "properties": {"a": {"$ref": 5}}},
    {"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}},
    {"type": "object", "$defs": 5, "properties": {}},
    {
        "type": "object",
        "$defs": {"n": {"$ref": "#/$defs/n"}},
        "properties": {"a": {"$ref": "#/$defs/n"}},
    },
    {
        "type": "object",
        "$defs": {"n": {"type": "object", "properties": {"next": {"$ref": "#/$defs/n"}}}},
        "properties": {"a": {"$ref": "#/$defs/n"}},
    },
    {"type": "string"},
    [],
]


@pytest.mark.parametrize("schema", MALFORMED_SCHEMAS, ids=range(len(MALFORMED_SCHEMAS)))
async def test_malformed_output_schemas_get_our_words(client, schema):
    response = await post(
        client, CHAT, {"messages": MSG, "response_format": json_schema_format(schema)}
    )
    assert assert_our_error(response)["param"].startswith("response_format")
    response = await post(
        client,
        RESPONSES,
        {"input": "x", "text": {"format": {"type": "json_schema", "name": "o", "schema": schema}}},
    )
    assert_our_error(response)


ODD_PROPERTY_NAMES = ["_private", "model_config", "model_dump", "__class__", "", "a b", "1x", "ü"]


@pytest.mark.parametrize("name", ODD_PROPERTY_NAMES)
async def test_odd_property_names_are_served_or_refused_in_our_words(client, name):
    schema = {"type": "object", "properties": {name: {"type": "string"}}, "required": [name]}
    response = await post(
        client, CHAT, {"messages": MSG, "response_format": json_schema_format(schema)}
    )
    if response.status_code != 200:
        assert_our_error(response, "response_format")


# -- 3. bounds on what a request can multiply ---------------------------------------------

MULTIPLIED = [
    (COMPLETIONS, {"prompt": ["x"] * 129}, "prompt"),
    (COMPLETIONS, {"prompt": ["x"] * 50, "n": 3}, "n"),
    (COMPLETIONS, {"prompt": "x", "n": 129}, "n"),
    (CHAT, {"messages": MSG, "n": 129}, "n"),
    (CHAT, {"messages": MSG, "n": 10**20}, "n"),
    (CHAT, {"messages": MSG, "stop": ["s"] * 17}, "stop"),
    (COMPLETIONS, {"prompt": "x", "stop": ["s"] * 5000}, "stop"),
    (CHAT, {"messages": MSG, "stop": "s" * 257}, "stop"),
    (CHAT, {"messages": MSG, "stop": ["ok", "s" * 10_000]}, "stop"),
    (CHAT, {"messages": MSG, "stop": ["ok", ""]}, "stop"),
    (CHAT, {"messages": MSG, "logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    (CHAT, {"messages": MSG, "logprobs": True, "top_logprobs": -1}, "top_logprobs"),
    (RESPONSES, {"input": "x", "top_logprobs": 21}, "top_logprobs"),
    (COMPLETIONS, {"prompt": "x", "logprobs": 6}, "logprobs"),
    (CHAT, {"messages": MSG, "requirements": ["be short"] * 65}, "requirements"),
    (RESPONSES, {"input": "x", "requirements": ["be short"] * 65}, "requirements"),
    (CHAT, {"messages": MSG, "metadata": {f"k{i}": "v" for i in range(17)}}, "metadata"),
    (CHAT, {"messages": MSG, "metadata": {"k" * 65: "v"}}, "metadata"),
    (RESPONSES, {"input": "x", "metadata": {"k": "v" * 513}}, "metadata"),
    (CHAT, {"messages": MSG, "unknown": nested(100)}, "unknown"),
    (
        CHAT,
        b'{"messages": [{"role": "user", "content": "x"}], "metadata": '
        + b'{"a": ' * 900
        + b"1"
        + b"}" * 900
        + b"}",
        None,
    ),
    (COMPLETIONS, b'{"prompt": "x", "x": ' + b"[" * 5000 + b"]" * 5000 + b"}", None),
    (CHAT, {"messages": [{"role": "bad"}] * 300_000}, "messages"),
    (COMPLETIONS, {"prompt": [None] * 300_000}, "prompt"),
    (RESPONSES, {"input": [1] * 300_000}, "input"),
]


@pytest.mark.parametrize(("route", "body", "param"), MULTIPLIED, ids=range(len(MULTIPLIED)))
async def test_bounds_on_what_a_request_multiplies(client, route, body, param):
    response = await post(client, route, body)
    assert response.status_code == 400, response.text[:300]
    error = assert_our_error(response)
    named = (error["param"] or "").split("[")[0].split(".")[0]
    # A body of far too many values is refused by a scan of its bytes, naming no field.
    assert param is None or named == param or "more than" in error["message"], error


async def test_the_largest_allowed_completion_request_is_served(client):
    body = {"prompt": ["x"] * 64, "n": 2, "stop": ["s"] * 16, "max_tokens": 1}
    response = await post(client, COMPLETIONS, body)
    assert response.status_code == 200, response.text
    assert len(response.json()["choices"]) == bounds.MAX_GENERATIONS


# -- more: odd numbers, odd types, odd text, empty things ----------------------------------

ODD_BODIES = [
    (CHAT, {"messages": MSG, "max_tokens": -5}),
    (CHAT, {"messages": MSG, "max_tokens": 0}),
    (CHAT, {"messages": MSG, "max_tokens": 10**40}),
    (CHAT, {"messages": MSG, "max_tokens": "5x"}),
    (CHAT, {"messages": MSG, "temperature": 1e308}),
    (CHAT, {"messages": MSG, "seed": 2**64}),
    (CHAT, {"messages": MSG, "top_k": -1}),
    (COMPLETIONS, {"prompt": "x", "max_tokens": -1}),
    (COMPLETIONS, {"prompt": "x", "best_of": 10**30}),
    (RESPONSES, {"input": "x", "max_output_tokens": -1}),
    (RESPONSES, {"input": "x", "temperature": -0.1}),
    (CHAT, {"messages": []}),
    (COMPLETIONS, {"prompt": []}),
    (COMPLETIONS, {"prompt": [[]]}),
    (COMPLETIONS, {"prompt": [1, 2, 3]}),
    (RESPONSES, {"input": []}),
    (RESPONSES, {"input": [{}]}),
    (RESPONSES, {"input": [{"type": "function_call_output"}]}),
    (RESPONSES, {"input": [{"role": "user", "content": [{"type": "input_image"}]}]}),
    (CHAT, {"messages": [{"role": "user", "content": [{}]}]}),
    (CHAT, {"messages": MSG, "tools": [{}]}),
    (
        CHAT,
        {"messages": MSG, "tool_choice": {"type": "function", "function": {"name": "x" * 10**5}}},
    ),
    (RESPONSES, {"input": "x", "tool_choice": "y" * 10**5}),
    (RESPONSES, {"input": "x", "tools": [{"type": "web_search" * 1000}]}),
    (RESPONSES, {"input": "x", "previous_response_id": "resp_" + "x" * 10_000}),
    (CHAT, {"messages": MSG, "response_format": {"type": "json_schema"}}),
    (CHAT, {"messages": MSG, "stream_options": {"include_usage": True}}),
]


@pytest.mark.parametrize(("route", "body"), ODD_BODIES, ids=range(len(ODD_BODIES)))
async def test_odd_values_are_a_4xx_in_our_words(client, route, body):
    assert_our_error(await post(client, route, body))


ODD_TEXT = ["\x00", "\ufeffBOM", "\u202eRTL", "\uffff", "e\u0301" * 50, "\U0010ffff", "a\r\nb"]


@pytest.mark.parametrize("text", ODD_TEXT, ids=range(len(ODD_TEXT)))
@pytest.mark.parametrize("route", ROUTES)
async def test_odd_but_valid_unicode_is_served(client, route, text):
    body = {CHAT: {"messages": [{"role": "user", "content": text}]}, COMPLETIONS: {"prompt": text}}
    response = await post(client, route, body.get(route, {"input": text}))
    assert response.status_code == 200, response.text[:300]


WRONG_VALUES: list[Any] = [None, True, -1, 2**70, 1.5, -1e308, "", "x", [], [1], {}, {"a": [None]}]


def _fields(route: str) -> list[str]:
    from mellea.serve.completions.request import CompletionRequest
    from mellea.serve.protocol import ChatCompletionRequest
    from mellea.serve.responses import ResponsesRequest

    model = {CHAT: ChatCompletionRequest, COMPLETIONS: CompletionRequest}.get(
        route, ResponsesRequest
    )
    return sorted(model.model_fields)


@pytest.mark.parametrize("route", ROUTES)
async def test_wrong_types_in_every_field_never_get_a_5xx(client, route):
    sent = 0
    for field in _fields(route):
        for value in WRONG_VALUES:
            response = await post(client, route, {**BASE[route], field: value})
            sent += 1
            assert response.status_code < 500, (field, value, response.text[:300])
            if response.status_code >= 400:
                assert_our_error(response)
    assert sent >= 200


# -- a sweep: arbitrary JSON in arbitrary fields, never a 5xx -------------------------------

_odd_strings = st.sampled_from(["", "\ud800", "\x00", "🙂", "1", "-1", "²", "NaN", "a" * 300])
_scalars = (
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8) | _odd_strings
)
_json = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(max_size=6) | _odd_strings, inner, max_size=4)
    ),
    max_leaves=20,
)


@pytest.mark.parametrize("route", ROUTES)
@settings(
    max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True
)
@given(data=st.data())
async def test_sweep_no_json_gets_a_5xx(echo_app, route, data):
    fields = _fields(route)
    body = dict(BASE[route]) if data.draw(st.booleans()) else {}
    for field in data.draw(st.lists(st.sampled_from(fields), max_size=4)):
        body[field] = data.draw(_json)
    raw = json.dumps(body, allow_nan=True).encode("utf-8", "surrogatepass")
    transport = httpx.ASGITransport(app=echo_app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost", timeout=30) as c:
        response = await post(c, route, raw)
    assert response.status_code < 500, (body, response.text[:300])
    if response.status_code >= 400:
        assert_our_error(response)


def _shaped(keys: dict[str, Any]) -> Any:
    """Objects with some of ``keys`` (each a strategy), plus arbitrary JSON in others."""
    return st.fixed_dictionaries({}, optional=keys | {"extra": _json})


_PART_TYPES = st.sampled_from(
    ["text", "input_text", "output_text", "image_url", "input_image", "input_file", "refusal", "x"]
)
_part = _shaped({"type": _PART_TYPES, "text": _json | st.text(max_size=5), "image_url": _json})
_content = _json | st.text(max_size=5) | st.lists(_part, max_size=3)
_ITEM_TYPES = st.sampled_from(
    ["message", "function_call", "function_call_output", "reasoning", "x"]
)
_item = _shaped(
    {
        "type": _ITEM_TYPES,
        "role": st.sampled_from(["user", "assistant", "system", "developer", "tool", "x"]),
        "content": _content,
        "call_id": _json | st.just("c1"),
        "name": _json | st.just("f"),
        "arguments": _json | st.just("{}"),
        "output": _content,
        "summary": st.lists(_part, max_size=2) | _json,
    }
)
_tool_call = _shaped(
    {
        "id": _json | st.just("c1"),
        "type": st.just("function") | _json,
        "function": _shaped({"name": _json | st.just("f"), "arguments": _json | st.just("{}")}),
    }
)
_message = _shaped(
    {
        "role": st.sampled_from(["user", "assistant", "system", "developer", "tool", "function"]),
        "content": _content,
        "tool_calls": st.lists(_tool_call, max_size=2) | _json,
        "tool_call_id": _json | st.just("c1"),
        "name": _json,
    }
)


@settings(
    max_examples=200, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True
)
@given(items=st.lists(_item, max_size=4), messages=st.lists(_message, max_size=4))
async def test_sweep_structured_messages_and_items_never_get_a_5xx(echo_app, items, messages):
    """Shaped like real chat messages and Responses input items, with odd values inside."""
    transport = httpx.ASGITransport(app=echo_app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost", timeout=30) as c:
        for route, body in ((RESPONSES, {"input": items}), (CHAT, {"messages": messages})):
            raw = json.dumps(body, allow_nan=True).encode("utf-8", "surrogatepass")
            response = await post(c, route, raw)
            assert response.status_code < 500, (body, response.text[:300])
            if response.status_code >= 400:
                assert_our_error(response)


# -- 4. the event loop keeps answering ------------------------------------------------------


async def _worst_gap(work: Any) -> tuple[float, Any]:
    """Run ``work`` while a 5 ms ticker runs on the loop; the longest time the loop went
    without running the ticker (work that never yields counts whole)."""
    gaps: list[float] = []
    last = time.perf_counter()
    done = asyncio.Event()

    async def ticker() -> None:
        nonlocal last
        while not done.is_set():
            await asyncio.sleep(0.005)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    tick = asyncio.ensure_future(ticker())
    await asyncio.sleep(0)  # the ticker is waiting on its first sleep
    last = time.perf_counter()
    try:
        result = await work
    finally:
        gaps.append(time.perf_counter() - last)
        done.set()
        await tick
    return max(gaps), result


# Loop stalls are judged against a baseline taken in the same test (the same work the
# server must not do on the loop, timed here), never against absolute seconds: a busy
# machine slows the baseline and the stall alike. Each is the shortest of two runs, so
# one preemption of this process does not decide the test.


def _baseline(work: Any) -> float:
    """The shortest of two timings of ``work()``, run right here on the test's thread."""
    timings = []
    for _ in range(2):
        started = time.perf_counter()
        work()
        timings.append(time.perf_counter() - started)
    return min(timings)


async def _least_gap(make_work: Any) -> tuple[float, Any]:
    """The smaller worst gap of two runs of ``make_work()`` (each a fresh awaitable)."""
    first_gap, result = await _worst_gap(make_work())
    second_gap, result = await _worst_gap(make_work())
    return min(first_gap, second_gap), result


async def test_a_body_of_many_invalid_items_does_not_freeze_the_loop(client):
    body = json.dumps({"messages": [{"role": "nobody"}] * 300_000}).encode()
    parse = _baseline(lambda: json.loads(body))
    gap, response = await _least_gap(lambda: post(client, CHAT, body))
    assert response.status_code == 400
    # Building 300,000 validation errors froze the loop for 15 to 30 times the parse
    # (2 to 5 s); the bound keeps the work to one JSON parse and a short walk.
    assert gap < 5 * parse, f"the loop froze for {gap:.2f} s; parsing the body takes {parse:.2f} s"


async def test_a_large_body_of_tiny_values_is_refused_before_it_is_parsed(client):
    body = b'{"messages": [' + b"0," * (8 * 1024 * 1024 - 20) + b"0]}"  # 16 MiB
    parse = _baseline(lambda: json.loads(body))
    gap, response = await _least_gap(lambda: post(client, CHAT, body))
    error = assert_our_error(response, None)  # the pre-scan's error: no parse, no field
    assert "more than" in error["message"]
    # Parsing it on the loop stalled it for the whole parse; the pre-scan costs a few
    # percent of that.
    assert gap < parse / 2, f"the loop froze for {gap:.2f} s; parsing the body takes {parse:.2f} s"


# -- the real engine: one request's bad values fail that request alone ------------------------


@pytest.fixture(scope="module")
def tiny_engine(tmp_path_factory):
    from mellea.engine.engine import Engine
    from tests.engine.conftest import make_tiny_llama

    engine = Engine(str(make_tiny_llama(tmp_path_factory.mktemp("tiny"), max_positions=4096)))
    yield engine
    engine.shutdown()


async def _collect(stream: Any) -> tuple[list[int], str | None]:
    ids, reason = [], None
    async for out in stream:
        ids += out.token_ids
        reason = out.finish_reason
    return ids, reason


async def test_engine_refuses_non_finite_or_absurd_sampling_values(tiny_engine):
    from mellea.engine.types import SamplingParams, SamplingParamsError

    bad = {
        "temperature": SamplingParams(temperature=math.nan),
        "repetition_penalty": SamplingParams(repetition_penalty=math.inf),
        "presence_penalty": SamplingParams(presence_penalty=math.nan),
        "frequency_penalty": SamplingParams(frequency_penalty=1e30),
        "logit_bias": SamplingParams(logit_bias={5: math.nan}),
        "max_tokens": SamplingParams(max_tokens=-3),
    }
    for field, params in bad.items():
        with pytest.raises(SamplingParamsError) as caught:
            tiny_engine.add_request([1, 2, 3], params)
        assert caught.value.field == field
    with pytest.raises(SamplingParamsError, match="vocabulary"):
        tiny_engine.add_request([1, 2, 3], SamplingParams(logit_bias={10**7: 1.0}))
    with pytest.raises(SamplingParamsError):
        tiny_engine.add_request([1, 2, 3], SamplingParams(logit_bias={5: 1e39}))


BREAKAGES = {
    "sampling raises": lambda bias: bias.update({5: math.nan}),
    "preparing the step raises": lambda bias: bias.update({"not a token": 1.0}),
}


@pytest.mark.parametrize("breakage", list(BREAKAGES))
async def test_a_victim_batched_with_a_failing_sequence_completes(tiny_engine, breakage):
    """A sequence whose settings break its step (changed after validation, as a bug
    could) fails alone; the requests batched with it get the tokens they would have
    got alone, and the engine keeps serving."""
    from mellea.engine.types import SamplingParams

    prompt = list(range(100, 140))
    victim = SamplingParams(max_tokens=24, ignore_eos=True)
    alone, _ = await _collect(tiny_engine.add_request(prompt, victim))
    attacker = SamplingParams(max_tokens=24, ignore_eos=True, temperature=1.0, logit_bias={5: 1.0})
    streams = [
        tiny_engine.add_request(prompt, victim),
        tiny_engine.add_request(list(range(200, 230)), attacker),
        tiny_engine.add_request(prompt, SamplingParams(max_tokens=24, ignore_eos=True)),
    ]
    BREAKAGES[breakage](attacker.logit_bias)
    results = await asyncio.gather(*(_collect(s) for s in streams), return_exceptions=True)
    assert isinstance(results[1], RuntimeError)
    for result in (results[0], results[2]):
        assert not isinstance(result, BaseException), result
        assert result == (alone, "length")
    assert (await _collect(tiny_engine.add_request(prompt, victim)))[0] == alone


def test_sampler_retries_rows_alone_and_names_the_failed_ones():
    import torch

    from mellea.engine.sampler import SamplingFailed, build_sampling_batch, sample
    from mellea.engine.sequence import Sequence
    from mellea.engine.types import SamplingParams

    torch.manual_seed(0)
    logits = torch.randn(3, 50)
    params = [
        SamplingParams(logit_bias={7: 50.0}),
        SamplingParams(temperature=1.0, logit_bias={3: math.nan}),
        SamplingParams(temperature=0.5, top_k=1),
    ]
    seqs = [Sequence(f"r{i}", [1, 2], p, 4) for i, p in enumerate(params)]
    with pytest.raises(SamplingFailed) as caught:
        sample(logits.clone(), build_sampling_batch(seqs, 50))
    assert set(caught.value.failed) == {1}
    tokens = caught.value.tokens.tolist()
    assert tokens[0] == 7  # its bias applied once
    assert tokens[2] == int(logits[2].argmax())


PROGRAM = """
from mellea.backends.local import LocalBackend

ENGINE = None  # set by the test


async def serve(input, requirements=None, model_options=None):
    backend = LocalBackend(engine=ENGINE)
    return await backend.generate([m.to_openai() for m in input], model_options=model_options)
"""


@pytest.fixture(scope="module")
def engine_app(tiny_engine, tmp_path_factory):
    path = Path(tmp_path_factory.mktemp("program")) / "tiny_program.py"
    path.write_text(PROGRAM)
    program = Program.load(path)
    program.module.ENGINE = tiny_engine
    return create_app(program, ServeSettings(program=str(path)))


async def test_an_attacker_on_the_wire_fails_alone(engine_app):
    """Out-of-vocabulary and non-finite biases are a 400 naming ``logit_bias``, while a
    stream running beside them completes."""
    transport = httpx.ASGITransport(app=engine_app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost", timeout=60) as c:
        victim_body = {"messages": MSG, "max_tokens": 40, "stream": True, "ignore_eos": True}

        async def victim() -> list[str]:
            async with c.stream("POST", CHAT, json=victim_body) as response:
                assert response.status_code == 200
                return [line async for line in response.aiter_lines() if line.startswith("data:")]

        running = asyncio.ensure_future(victim())
        attacks = [
            b'{"messages": [{"role": "user", "content": "x"}], "logit_bias": {"1": NaN}, "temperature": 1}',
            b'{"messages": [{"role": "user", "content": "x"}], "logit_bias": {"99999999": 5}}',
            b'{"prompt": "x", "logit_bias": {"49152": 5}}',
        ]
        for body in attacks:
            route = COMPLETIONS if body.startswith(b'{"prompt"') else CHAT
            response = await post(c, route, body)
            assert response.status_code == 400, response.text
            assert_our_error(response, "logit_bias")
        events = await running
        assert events[-1] == "data: [DONE]"
        finals = [json.loads(e[5:]) for e in events[:-1]]
        assert finals[-1]["choices"][0]["finish_reason"] == "length"


_edge = st.sampled_from


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(
    options=st.fixed_dictionaries(
        {},
        optional={
            "temperature": _edge([0, 1e-9, 0.5, 2]),
            "top_p": _edge([0, 1e-9, 0.5, 1]),
            "top_k": _edge([0, 1, 49152, 10**6, 2**31 - 1]),
            "min_p": _edge([0, 0.5, 1]),
            "presence_penalty": _edge([-2, 0, 2]),
            "frequency_penalty": _edge([-2, 2]),
            "repetition_penalty": _edge([1e-9, 0.5, 10]),
            "logit_bias": _edge([{"0": 100}, {"49151": -100, "2": 100}, {"5": -100}]),
            "seed": _edge([0, -(2**63), 2**63 - 1]),
            "stop": _edge(["\n", [" ", "a"], ["x" * 256] * 16]),
            "logprobs": st.booleans(),
            "n": _edge([1, 3]),
            "ignore_eos": st.booleans(),
            "response_format": _edge([{"type": "json_object"}, {"type": "text"}]),
        },
    )
)
async def test_sweep_sampling_values_on_the_engine_never_get_a_5xx(engine_app, options):
    """Sampling values the wire accepts reach the engine: a reply, or a 400 naming one."""
    body = {"messages": MSG, "max_tokens": 3, **options}
    if body.get("logprobs"):
        body["top_logprobs"] = 20
    transport = httpx.ASGITransport(app=engine_app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost", timeout=60) as c:
        response = await post(c, CHAT, body)
    if response.status_code != 200:  # e.g. top_p 0, which the engine refuses: named
        assert assert_our_error(response)["param"] in options, (options, response.text[:300])


async def test_a_long_prompt_is_tokenized_off_the_event_loop(engine_app, tiny_engine):
    """Rendering and tokenizing a ~1 MB prompt happens in a worker thread: the loop keeps
    ticking, and the prompt is refused for its length with a 400."""
    text = "hello world, this is a long prompt. " * 60_000
    messages = [{"role": "user", "content": text}]
    # What the loop would lose if the server tokenized on it (~1 s here, 3 s with a
    # larger model), timed in this test so a busy machine slows both alike.
    tokenize = _baseline(lambda: tiny_engine.apply_chat_template(messages))
    transport = httpx.ASGITransport(app=engine_app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost", timeout=60) as c:
        body = {"messages": messages, "max_tokens": 1}
        gap, response = await _least_gap(lambda: post(c, CHAT, body))
    error = assert_our_error(response, "messages")
    assert error["code"] == "context_length_exceeded"
    assert gap < tokenize / 2, f"the loop froze for {gap:.2f} s; tokenizing takes {tokenize:.2f} s"


async def test_schema_and_prompt_work_runs_off_the_event_loop(engine_app, tiny_engine, monkeypatch):
    """Building the pydantic model of an output schema, rendering the chat template and
    compiling the grammar (about a second for a few hundred properties) run in worker
    threads, never on the event loop's thread."""
    import threading

    import mellea.serve.chat.arguments

    seen: dict[str, threading.Thread] = {}

    def spy(name: str, function: Any) -> Any:
        def spied(*args: Any, **kwargs: Any) -> Any:
            seen[name] = threading.current_thread()
            return function(*args, **kwargs)

        return spied

    for name in ("apply_chat_template", "compile_grammar"):
        monkeypatch.setattr(tiny_engine, name, spy(name, getattr(tiny_engine, name)))
    model_from_schema = mellea.serve.chat.arguments.model_from_schema
    monkeypatch.setattr(
        mellea.serve.chat.arguments, "model_from_schema", spy("model", model_from_schema)
    )
    properties = {
        f"p{i}": {"type": "object", "properties": {"b": {"type": "integer"}}} for i in range(50)
    }
    schema = {"type": "object", "properties": properties, "required": list(properties)}
    body = {"messages": MSG, "max_tokens": 2, "response_format": json_schema_format(schema)}
    transport = httpx.ASGITransport(app=engine_app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost", timeout=60) as c:
        response = await post(c, CHAT, body)
    assert response.status_code == 200, response.text
    assert set(seen) == {"apply_chat_template", "compile_grammar", "model"}
    assert all(thread is not threading.current_thread() for thread in seen.values()), seen


# -- over a real socket -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def server():
    with serve(ECHO, env={"ECHO_DELAY": "0"}) as running:
        yield running


@pytest.mark.e2e
@pytest.mark.parametrize(("route", "body", "param"), SURROGATE_BODIES[6:10])
def test_surrogates_over_a_socket(server, route, body, param):
    content = json.dumps(body).encode()  # json.dumps escapes it: the wire stays ASCII
    response = httpx.post(
        server.base_url + route, content=content, headers={"content-type": "application/json"}
    )
    assert response.status_code == 400
    assert assert_our_error(response)["param"] == param


@pytest.mark.e2e
def test_bounds_over_a_socket(server):
    body = {"prompt": ["x"] * 100, "n": 100}
    response = httpx.post(server.base_url + COMPLETIONS, json=body)
    assert assert_our_error(response, "n")
    response = httpx.post(
        server.base_url + CHAT,
        content=b'{"messages": [{"role": "user", "content": "x"}], "logit_bias": {"1": Infinity}}',
        headers={"content-type": "application/json"},
    )
    assert assert_our_error(response, "logit_bias")
    assert "Traceback" not in server.log


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    ("route", "param"), [(CHAT, "messages"), (COMPLETIONS, "prompt"), (RESPONSES, "input")]
)
async def test_a_prompt_past_the_context_is_a_400_naming_the_limit_and_count(
    engine_app, route, param, stream
):
    """Chat, completions and Responses (streamed or not) refuse a prompt longer than the
    engine's context (4096 positions) with the context-length 400, naming the field,
    the limit and the prompt's token count: never a 500, an error frame or a stall."""
    text = "many words " * 3000  # some 6000 tokens
    body: dict[str, Any] = {"stream": stream}
    if route == CHAT:
        body |= {"messages": [{"role": "user", "content": text}], "max_tokens": 2}
    elif route == COMPLETIONS:
        body |= {"prompt": text, "max_tokens": 2}
    else:
        body |= {"input": text, "max_output_tokens": 2}
    transport = httpx.ASGITransport(app=engine_app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost", timeout=60) as c:
        response = await asyncio.wait_for(post(c, route, body), 60)
    error = assert_our_error(response, param)
    assert response.status_code == 400
    assert error["code"] == "context_length_exceeded"
    count = re.search(r"has (\d+) tokens", error["message"])
    assert count and int(count.group(1)) > 4096, error["message"]
    assert "4096" in error["message"], error["message"]


async def test_truncation_auto_fits_a_long_conversation_to_the_engine_context(engine_app):
    """A conversation longer than the engine's context (4096 positions): ``disabled``
    gets the context-length 400 naming ``input``, ``auto`` an answer from its newest turns."""
    turns = []
    for i in range(40):  # some 200 tokens a turn, 8000 in all
        turns.append({"role": "user", "content": f"turn {i}: " + "words and more words " * 40})
        turns.append({"role": "assistant", "content": "noted"})
    turns.append({"role": "user", "content": "the newest question"})
    transport = httpx.ASGITransport(app=engine_app, raise_app_exceptions=False)
    async with httpx.AsyncClient(
        transport=transport, base_url="http://localhost", timeout=120
    ) as c:
        body = {"input": turns, "max_output_tokens": 2}
        refused = await post(c, RESPONSES, {**body, "truncation": "disabled"})
        error = assert_our_error(refused, "input")
        assert error["code"] == "context_length_exceeded"
        answered = await post(c, RESPONSES, {**body, "truncation": "auto"})
    assert answered.status_code == 200, answered.text
    response = answered.json()
    assert response["truncation"] == "auto" and response["status"] == "incomplete"
    assert 0 < response["usage"]["input_tokens"] <= 4096

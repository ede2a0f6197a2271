"""Forced tool calls over the wire, on the default model through ``m serve``.

A function without ``parameters`` takes no arguments; a forced call cut short by
``max_tokens`` still comes back as a call (never as the server's own wrapper JSON as
text), in chat, chat streaming and Responses.
"""

from __future__ import annotations

import json

import openai
import pytest

from tests.server import EXAMPLES, serve

pytestmark = [pytest.mark.e2e, pytest.mark.model]

NOW_TOOL = {"type": "function", "function": {"name": "now", "description": "current time"}}
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"enum": ["C", "F"]}},
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
WEATHER = [{"role": "user", "content": "Is it raining in Oslo?"}]
FORCED = ["required", {"type": "function", "function": {"name": "get_weather"}}]


@pytest.fixture(scope="module")
def hello():
    with serve(EXAMPLES / "hello.py") as server:
        yield server


def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="x", max_retries=0, timeout=300)


def _streamed_call(chunks: list) -> tuple[str, str, str | None]:
    """(name, joined arguments, finish_reason) of a streamed reply's one tool call."""
    deltas = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert deltas, "the stream carries no tool call"
    assert {tc.index for tc in deltas} == {0}
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert content == ""
    finish = [
        c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
    ]
    arguments = "".join(tc.function.arguments or "" for tc in deltas)
    return deltas[0].function.name, arguments, finish[-1] if finish else None


def test_a_function_without_parameters_is_called_with_no_arguments(hello):
    """The issue's own body: no ``parameters`` means ``{}``, and the call comes back."""
    body = {
        "messages": [{"role": "user", "content": "What time is it?"}],
        "max_tokens": 32,
        "tool_choice": "required",
        "tools": [NOW_TOOL],
    }
    reply = client(hello).chat.completions.create(model="hello", **body)
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls
    assert (call.function.name, call.function.arguments) == ("now", "{}")
    assert not choice.message.content
    chunks = list(client(hello).chat.completions.create(model="hello", stream=True, **body))
    assert _streamed_call(chunks) == ("now", "{}", "tool_calls")


@pytest.mark.parametrize("tool_choice", FORCED, ids=["required", "named"])
def test_a_forced_call_cut_by_max_tokens_is_a_call_with_finish_length(hello, tool_choice):
    kwargs = {
        "model": "hello",
        "messages": WEATHER,
        "tools": [WEATHER_TOOL],
        "tool_choice": tool_choice,
        "max_tokens": 14,
    }
    reply = client(hello).chat.completions.create(**kwargs)
    choice = reply.choices[0]
    assert choice.finish_reason == "length"
    assert choice.message.content is None, "the wrapper JSON leaked as text"
    (call,) = choice.message.tool_calls
    assert call.function.name == "get_weather"
    arguments = call.function.arguments
    assert '"name"' not in arguments and arguments.startswith("{")
    chunks = list(client(hello).chat.completions.create(stream=True, **kwargs))
    assert _streamed_call(chunks) == ("get_weather", arguments, "length")


def test_a_forced_call_cut_by_max_output_tokens_is_a_function_call_item(hello):
    tool = {"type": "function", **WEATHER_TOOL["function"]}
    kwargs = {
        "model": "hello",
        "input": WEATHER[0]["content"],
        "tools": [tool],
        "tool_choice": "required",
        "max_output_tokens": 14,
    }
    response = client(hello).responses.create(**kwargs)
    assert response.status == "incomplete"
    assert response.incomplete_details.reason == "max_output_tokens"
    assert [item.type for item in response.output] == ["function_call"]
    (item,) = response.output
    assert item.name == "get_weather" and item.status == "incomplete"
    assert item.arguments.startswith("{") and '"name"' not in item.arguments
    events = list(client(hello).responses.create(stream=True, **kwargs))
    assert not [e for e in events if e.type == "response.output_text.delta"]
    done = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert [(e.name, e.arguments) for e in done] == [("get_weather", item.arguments)]
    assert events[-1].type == "response.incomplete"


def test_a_responses_function_without_parameters_is_called_with_no_arguments(hello):
    response = client(hello).responses.create(
        model="hello",
        input="What time is it?",
        tools=[{"type": "function", "name": "now", "description": "current time"}],
        tool_choice="required",
        max_output_tokens=32,
    )
    assert response.status == "completed"
    assert [(i.type, i.name, i.arguments) for i in response.output] == [
        ("function_call", "now", "{}")
    ]
    json.loads(response.output[0].arguments)


def test_legacy_functions_are_called_as_function_call(hello):
    """``functions`` / ``function_call`` (deprecated, still sent by older clients) work as
    tools and tool_choice, and the reply has their shape: ``message.function_call``."""
    kwargs = {
        "model": "hello",
        "messages": WEATHER,
        "functions": [WEATHER_TOOL["function"]],
        "function_call": {"name": "get_weather"},
        "max_tokens": 60,
    }
    reply = client(hello).chat.completions.create(**kwargs)
    choice = reply.choices[0]
    assert choice.finish_reason == "function_call"
    assert choice.message.tool_calls is None and not choice.message.content
    call = choice.message.function_call
    assert call.name == "get_weather"
    assert set(json.loads(call.arguments)) == {"city", "unit"}
    chunks = list(client(hello).chat.completions.create(stream=True, **kwargs))
    pieces = [c.choices[0].delta.function_call for c in chunks if c.choices]
    pieces = [p for p in pieces if p is not None]
    assert pieces[0].name == "get_weather"
    assert "".join(p.arguments or "" for p in pieces) == call.arguments
    assert chunks[-1].choices[0].finish_reason == "function_call"
    with pytest.raises(openai.BadRequestError) as caught:
        client(hello).chat.completions.create(tools=[WEATHER_TOOL], **kwargs)
    assert caught.value.body["param"] == "functions"

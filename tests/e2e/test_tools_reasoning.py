"""Tool calls and reasoning in the OpenAI wire format, streamed and not."""

from __future__ import annotations

import json

import openai
import pytest

from tests.e2e.test_cli import m
from tests.server import PROGRAMS, serve

pytestmark = pytest.mark.e2e

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    },
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}},
]
ASK = [{"role": "user", "content": "Weather in Paris?"}]


@pytest.fixture(scope="module")
def server():
    with serve(PROGRAMS / "tool_caller.py", "--reasoning-parser", "qwen3") as running:
        yield running


def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="x", max_retries=0)


def test_non_streamed_tool_calls_and_reasoning(server):
    reply = client(server).chat.completions.create(model="m", messages=ASK, tools=TOOLS)
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls"
    message = choice.message
    assert message.content == "Let me check."
    assert message.model_extra["reasoning_content"] == "The user wants the weather."
    calls = message.tool_calls
    assert [c.function.name for c in calls] == ["get_weather", "get_time"]
    assert json.loads(calls[0].function.arguments) == {"city": "Paris", "n": 0}
    assert all(c.id.startswith("call_") and c.type == "function" for c in calls)


def test_streamed_tool_calls_join_to_the_non_streamed_ones(server):
    whole = client(server).chat.completions.create(model="m", messages=ASK, tools=TOOLS)
    chunks = list(
        client(server).chat.completions.create(model="m", messages=ASK, tools=TOOLS, stream=True)
    )
    reasoning = "".join(
        (c.choices[0].delta.model_extra or {}).get("reasoning_content") or ""
        for c in chunks
        if c.choices
    )
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert reasoning == "The user wants the weather."
    assert content == "Let me check."
    calls: dict[int, dict] = {}
    for c in chunks:
        for call in (c.choices[0].delta.tool_calls or []) if c.choices else []:
            entry = calls.setdefault(call.index, {"id": None, "name": "", "arguments": ""})
            if call.id:
                assert entry["id"] is None, "the id comes once, in the first delta"
                entry["id"] = call.id
                entry["name"] = call.function.name
            entry["arguments"] += call.function.arguments or ""
    assert [calls[i]["name"] for i in sorted(calls)] == ["get_weather", "get_time"]
    expected = [c.function.arguments for c in whole.choices[0].message.tool_calls]
    assert [calls[i]["arguments"] for i in sorted(calls)] == expected
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_parallel_tool_calls_false_keeps_only_the_first_call(server):
    kwargs = {"model": "m", "messages": ASK, "tools": TOOLS, "parallel_tool_calls": False}
    reply = client(server).chat.completions.create(**kwargs)
    assert [c.function.name for c in reply.choices[0].message.tool_calls] == ["get_weather"]
    opened = [
        call.function.name
        for chunk in client(server).chat.completions.create(stream=True, **kwargs)
        for call in chunk.choices[0].delta.tool_calls or []
        if call.id
    ]
    assert opened == ["get_weather"]


def test_tool_choice_none_leaves_the_text_alone(server):
    reply = client(server).chat.completions.create(
        model="m", messages=ASK, tools=TOOLS, tool_choice="none"
    )
    assert "<tool_call>" in reply.choices[0].message.content
    assert reply.choices[0].message.tool_calls is None


def test_reasoning_without_tools(server):
    reply = client(server).chat.completions.create(model="m", messages=ASK)
    assert reply.choices[0].message.content == "No tools, so: sunny."
    assert reply.choices[0].finish_reason == "stop"


def test_program_returned_tool_calls(server):
    messages = [{"role": "user", "content": "program-call"}]
    reply = client(server).chat.completions.create(model="m", messages=messages)
    assert reply.choices[0].message.content is None
    (call,) = reply.choices[0].message.tool_calls
    assert call.function.name == "lookup"
    assert json.loads(call.function.arguments) == {"q": "from the program"}
    chunks = list(client(server).chat.completions.create(model="m", messages=messages, stream=True))
    streamed = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert streamed[0].id.startswith("call_") and streamed[0].function.name == "lookup"
    assert "".join(tc.function.arguments or "" for tc in streamed) == call.function.arguments


def test_history_with_tool_messages_reaches_the_program():
    history = [
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "22C"},
        {"role": "user", "content": "!args"},
    ]
    with serve(PROGRAMS / "echo.py") as echo:
        reply = client(echo).chat.completions.create(model="m", messages=history)
    assert json.loads(reply.choices[0].message.content)["roles"] == [
        "user",
        "assistant",
        "tool",
        "user",
    ]


def test_unknown_parser_fails_at_startup_listing_the_valid_ones():
    result = m("serve", str(PROGRAMS / "echo.py"), "--tool-call-parser", "nope", "--port", "1")
    assert result.returncode == 1
    assert "hermes" in result.stderr and "pythonic" in result.stderr
    result = m("serve", str(PROGRAMS / "echo.py"), "--reasoning-parser", "nope", "--port", "1")
    assert result.returncode == 1 and "qwen3" in result.stderr


def test_usage_counts_reasoning_tokens(server):
    reply = client(server).chat.completions.create(model="m", messages=ASK)
    details = reply.usage.completion_tokens_details
    assert details is not None and details.reasoning_tokens == 5  # "The user wants the weather."
    chunks = list(
        client(server).chat.completions.create(
            model="m", messages=ASK, stream=True, stream_options={"include_usage": True}
        )
    )
    assert chunks[-1].usage.completion_tokens_details.reasoning_tokens == 5


def test_calls_the_local_backend_lifted_are_served_once():
    with serve(PROGRAMS / "local_tool_calls.py") as running:
        reply = client(running).chat.completions.create(model="m", messages=ASK, tools=TOOLS)
        message = reply.choices[0].message
        assert message.content == "Let me look."
        assert [json.loads(c.function.arguments)["city"] for c in message.tool_calls] == [
            "Paris",
            "Oslo",
        ]
        assert reply.choices[0].finish_reason == "tool_calls"
        stream = client(running).chat.completions.create(
            model="m", messages=ASK, tools=TOOLS, stream=True
        )
        content, opened = "", []
        for chunk in stream:
            delta = chunk.choices[0].delta
            content += delta.content or ""
            opened += [c.function.name for c in delta.tool_calls or [] if c.id]
        assert content == "Let me look." and opened == ["get_weather", "get_weather"]
        single = client(running).chat.completions.create(
            model="m", messages=ASK, tools=TOOLS, parallel_tool_calls=False
        )
        assert len(single.choices[0].message.tool_calls) == 1

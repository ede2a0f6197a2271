"""End to end on the real default model (SmolLM2-135M-Instruct), through `m serve`."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import httpx
import openai
import pytest

from tests.server import EXAMPLES, ROOT, serve, sse_events

pytestmark = [pytest.mark.e2e, pytest.mark.model]

QUESTION = [{"role": "user", "content": "What is the capital of France? Answer briefly."}]


@pytest.fixture(scope="module")
def hello():
    with serve(EXAMPLES / "hello.py") as server:
        yield server


def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="x", max_retries=0, timeout=300)


def test_answers_a_question(hello):
    reply = client(hello).chat.completions.create(
        model="hello", messages=QUESTION, temperature=0, max_tokens=40
    )
    text = reply.choices[0].message.content
    assert "Paris" in text
    usage = reply.usage
    assert usage.prompt_tokens > 10
    assert 0 < usage.completion_tokens <= 40
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


def test_streaming_equals_non_streaming_under_greedy(hello):
    kwargs = {"model": "hello", "messages": QUESTION, "temperature": 0, "max_tokens": 24}
    whole = client(hello).chat.completions.create(**kwargs).choices[0].message.content
    chunks = list(client(hello).chat.completions.create(stream=True, **kwargs))
    deltas = [
        c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content
    ]
    assert len(deltas) > 3, "the reply should arrive in several pieces"
    assert "".join(deltas) == whole


def test_max_tokens_gives_length(hello):
    messages = [{"role": "user", "content": "Write a long story about a dragon."}]
    reply = client(hello).chat.completions.create(model="hello", messages=messages, max_tokens=5)
    assert reply.choices[0].finish_reason == "length"
    assert reply.usage.completion_tokens == 5


def test_raw_stream_is_incremental_and_ends_with_done(hello):
    body = {
        "messages": QUESTION,
        "stream": True,
        "max_tokens": 16,
        "temperature": 0,
        "stream_options": {"include_usage": True},
    }
    with httpx.stream(
        "POST", f"{hello.base_url}/v1/chat/completions", json=body, timeout=300
    ) as response:
        payloads = list(sse_events(response.iter_lines()))
    assert payloads[-1] == "[DONE]"
    frames = [json.loads(p) for p in payloads[:-1]]
    content_frames = [f for f in frames if f["choices"] and f["choices"][0]["delta"].get("content")]
    assert len(content_frames) >= 4
    usage = frames[-1]["usage"]
    assert usage["completion_tokens"] <= 16 and usage["prompt_tokens"] > 10


def test_prompt_too_long_is_a_400(hello):
    messages = [{"role": "user", "content": "word " * 9000}]
    response = httpx.post(
        f"{hello.base_url}/v1/chat/completions", json={"messages": messages}, timeout=300
    )
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "context_length_exceeded"


def run_example(name: str, server) -> str:
    """Run a client example from docs/examples against ``server``; its stdout."""
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / name)],
        cwd=ROOT,
        env={**os.environ, "OPENAI_BASE_URL": f"{server.base_url}/v1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_client_example_runs_against_the_server(hello):
    stdout = run_example("client.py", hello)
    assert "non-streamed:" in stdout and "streamed:" in stdout


def test_features_example_runs_against_the_server(hello):
    stdout = run_example("features.py", hello)
    for line in ("tool call: get_weather", "json: {", "choice 0:", "choice 1:", "completions:"):
        assert line in stdout
    assert "response: completed" in stdout or "response: incomplete" in stdout


def test_requirements_example():
    with serve(EXAMPLES / "requirements.py") as server:
        reply = client(server).chat.completions.create(
            model="requirements",
            messages=[{"role": "user", "content": "Describe the sea."}],
            max_tokens=60,
        )
    assert reply.choices[0].message.content.strip()


# The name is bounded: at temperature 1 the small model sometimes spells a "city" on
# and on, and a string cut by max_tokens is not JSON whatever the grammar enforces.
CITY_SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 48},
        "population": {"type": "integer"},
    },
    "required": ["city", "population"],
    "additionalProperties": False,
}
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 48},
                "unit": {"enum": ["C", "F"]},
            },
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}


def test_json_schema_output_always_validates(hello):
    response_format = {
        "type": "json_schema",
        "json_schema": {"name": "city", "schema": CITY_SCHEMA, "strict": True},
    }
    messages = [{"role": "user", "content": "Tell me about Rome."}]
    reply = client(hello).chat.completions.create(
        model="hello", messages=messages, response_format=response_format, max_tokens=80
    )
    value = json.loads(reply.choices[0].message.content)
    assert set(value) == {"city", "population"} and isinstance(value["population"], int)
    chunks = list(
        client(hello).chat.completions.create(
            model="hello",
            messages=messages,
            response_format={"type": "json_object"},
            max_tokens=80,
            stream=True,
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert isinstance(json.loads(text), dict)


def test_json_schema_validates_in_20_of_20_sampled_runs(hello):
    """The issue's bar: 20 runs at temperature 1, every one valid (20 choices of one request)."""
    response_format = {
        "type": "json_schema",
        "json_schema": {"name": "city", "schema": CITY_SCHEMA, "strict": True},
    }
    reply = client(hello).chat.completions.create(
        model="hello",
        messages=[{"role": "user", "content": "Give me facts about a city of your choice."}],
        response_format=response_format,
        temperature=1.0,
        seed=2026,
        n=20,
        max_tokens=150,
    )
    assert len(reply.choices) == 20
    for choice in reply.choices:
        value = json.loads(choice.message.content)
        assert set(value) == {"city", "population"}, value
        assert isinstance(value["city"], str) and isinstance(value["population"], int)
        assert not isinstance(value["population"], bool)
        assert len(value["city"]) <= 48 and choice.finish_reason == "stop"


def test_required_tool_choice_is_valid_in_20_of_20_sampled_runs(hello):
    reply = client(hello).chat.completions.create(
        model="hello",
        messages=[{"role": "user", "content": "Should I take an umbrella in Bergen?"}],
        tools=[WEATHER_TOOL],
        tool_choice="required",
        temperature=1.0,
        seed=2026,
        n=20,
        max_tokens=150,
    )
    assert len(reply.choices) == 20
    for choice in reply.choices:
        assert choice.finish_reason == "tool_calls"
        (call,) = choice.message.tool_calls
        arguments = json.loads(call.function.arguments)
        assert call.function.name == "get_weather"
        assert set(arguments) == {"city", "unit"} and isinstance(arguments["city"], str)
        assert arguments["unit"] in ("C", "F")


@pytest.mark.parametrize(
    "tool_choice", ["required", {"type": "function", "function": {"name": "get_weather"}}]
)
def test_forced_tool_call_is_always_valid(hello, tool_choice):
    messages = [{"role": "user", "content": "Is it raining in Oslo?"}]
    reply = client(hello).chat.completions.create(
        model="hello",
        messages=messages,
        tools=[WEATHER_TOOL],
        tool_choice=tool_choice,
        max_tokens=60,
    )
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls
    assert call.function.name == "get_weather"
    arguments = json.loads(call.function.arguments)
    assert set(arguments) == {"city", "unit"} and arguments["unit"] in ("C", "F")
    chunks = list(
        client(hello).chat.completions.create(
            model="hello",
            messages=messages,
            tools=[WEATHER_TOOL],
            tool_choice=tool_choice,
            max_tokens=60,
            stream=True,
        )
    )
    deltas = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert deltas[0].function.name == "get_weather"
    json.loads("".join(tc.function.arguments or "" for tc in deltas))
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_chat_logprobs_from_the_engine(hello):
    kwargs = {"model": "hello", "messages": QUESTION, "temperature": 0, "max_tokens": 12}
    reply = client(hello).chat.completions.create(logprobs=True, top_logprobs=3, **kwargs)
    choice = reply.choices[0]
    entries = choice.logprobs.content
    # Every generated token has an entry, except the end-of-sequence token.
    assert len(entries) == reply.usage.completion_tokens - (choice.finish_reason == "stop")
    assert "".join(e.token for e in entries) == choice.message.content
    for entry in entries:
        assert entry.logprob <= 0 and len(entry.top_logprobs) == 3
        assert bytes(entry.bytes).decode("utf-8", "backslashreplace") == entry.token
        best = entry.top_logprobs[0]  # greedy: the token taken is the most likely one
        assert (best.token, best.logprob) == (entry.token, entry.logprob)
        assert [t.logprob for t in entry.top_logprobs] == sorted(
            (t.logprob for t in entry.top_logprobs), reverse=True
        )
    streamed = []
    for chunk in client(hello).chat.completions.create(
        logprobs=True, top_logprobs=3, stream=True, **kwargs
    ):
        if chunk.choices and chunk.choices[0].logprobs and chunk.choices[0].logprobs.content:
            streamed += chunk.choices[0].logprobs.content
    assert [e.token for e in streamed] == [e.token for e in entries]
    assert [e.logprob for e in streamed] == pytest.approx([e.logprob for e in entries], abs=1e-4)


def test_completions_logprobs_from_the_engine(hello):
    reply = client(hello).completions.create(
        model="hello", prompt="The capital of France is", max_tokens=6, temperature=0, logprobs=2
    )
    choice = reply.choices[0]
    assert "".join(choice.logprobs.tokens) == choice.text
    assert len(choice.logprobs.token_logprobs) == 6
    assert all(len(top) <= 2 for top in choice.logprobs.top_logprobs)
    assert choice.logprobs.text_offset[0] == 0


def test_n_choices_sample_differently(hello):
    reply = client(hello).chat.completions.create(
        model="hello",
        messages=[{"role": "user", "content": "Write a short poem about the sea."}],
        n=3,
        seed=11,
        max_tokens=16,
    )
    assert [c.index for c in reply.choices] == [0, 1, 2]
    texts = [c.message.content for c in reply.choices]
    assert all(texts) and len(set(texts)) > 1, texts
    assert 3 < reply.usage.completion_tokens <= 3 * 16


def _kv_blocks(*flags: str) -> float:
    """The KV cache's blocks (used and free) of a server started with ``flags``, after
    a request."""
    with serve(EXAMPLES / "hello.py", *flags, "--no-playground") as server:
        reply = client(server).chat.completions.create(
            model="hello", messages=QUESTION, max_tokens=4
        )
        assert reply.choices[0].message.content
        metrics = httpx.get(f"{server.base_url}/metrics").text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith(("m_serve_kv_cache_blocks_used{", "m_serve_kv_cache_blocks_free{"))
    )


def test_kv_cache_budget_flag_sets_the_block_count():
    blocks = _kv_blocks("--kv-cache-memory", "64MiB", "--kv-cache-dtype", "float32")
    # SmolLM2-135M: 30 layers x (K and V) x 3 KV heads x 64 dims x 4 bytes = 46080 B/token.
    block_bytes = 46080 * 16
    assert blocks == (64 * 2**20) // block_bytes


def test_the_default_kv_cache_is_float16_and_holds_twice_the_blocks():
    blocks = _kv_blocks("--kv-cache-memory", "64MiB")
    # float16: 2 bytes a value, 23040 B/token.
    assert blocks == (64 * 2**20) // (23040 * 16)

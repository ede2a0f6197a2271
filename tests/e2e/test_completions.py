"""The legacy /v1/completions endpoint over a real socket (the rest of its cases run
in-process in ``tests/unit/test_wire_inprocess.py``)."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from tests.server import PROGRAMS, serve, sse_events

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def echo():
    with serve(PROGRAMS / "echo.py") as server:
        yield server


def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="x", max_retries=0)


def test_prompt_goes_to_serve_as_a_user_message(echo):
    reply = client(echo).completions.create(model="m", prompt="red green blue")
    assert reply.object == "text_completion" and reply.id.startswith("cmpl-")
    assert reply.choices[0].text == "red green blue"
    assert reply.choices[0].index == 0 and reply.choices[0].finish_reason == "stop"
    assert reply.usage.completion_tokens == 3


def test_streaming_several_prompts(echo):
    body = {
        "prompt": ["one two three", "four five"],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    with httpx.stream("POST", f"{echo.base_url}/v1/completions", json=body, timeout=30) as r:
        assert r.status_code == 200
        payloads = list(sse_events(r.iter_lines()))
    assert payloads[-1] == "[DONE]"
    frames = [json.loads(p) for p in payloads[:-1]]
    texts: dict[int, str] = {0: "", 1: ""}
    finishes = {}
    for frame in frames[:-1]:
        assert frame["object"] == "text_completion"
        (choice,) = frame["choices"]
        texts[choice["index"]] += choice["text"]
        if choice["finish_reason"]:
            finishes[choice["index"]] = choice["finish_reason"]
    assert texts == {0: "one two three", 1: "four five"}
    assert finishes == {0: "stop", 1: "stop"}
    assert frames[-1]["choices"] == [] and frames[-1]["usage"]["completion_tokens"] == 5
    streamed = list(client(echo).completions.create(model="m", prompt="x y", stream=True))
    assert "".join(c.choices[0].text for c in streamed if c.choices) == "x y"

"""``n`` choices and ``logprobs`` over a real socket, with the deterministic echo program
(the rest of their cases run in-process in ``tests/unit/test_wire_inprocess.py``)."""

from __future__ import annotations

import itertools
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


def user(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def raw_stream(server, path: str, body: dict) -> list[dict]:
    with httpx.stream("POST", f"{server.base_url}{path}", json=body, timeout=30) as response:
        assert response.status_code == 200
        payloads = list(sse_events(response.iter_lines()))
    assert payloads[-1] == "[DONE]"
    return [json.loads(p) for p in payloads[:-1]]


# -- n --------------------------------------------------------------------------


def test_n_choices_streamed_interleave_by_index(echo):
    text = "one two three four five six"
    frames = raw_stream(
        echo,
        "/v1/chat/completions",
        {
            "messages": user(text),
            "n": 3,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
    )
    *chunks, last = frames
    assert last["choices"] == [] and last["usage"]["completion_tokens"] == 18
    order = [c["choices"][0]["index"] for c in chunks]
    switches = sum(a != b for a, b in itertools.pairwise(order))
    assert switches > 2, f"choices should interleave, got {order}"
    for index in range(3):
        mine = [c["choices"][0] for c in chunks if c["choices"][0]["index"] == index]
        assert mine[0]["delta"]["role"] == "assistant"
        assert "".join(c["delta"].get("content") or "" for c in mine) == text
        assert [c["finish_reason"] for c in mine].count("stop") == 1
        assert mine[-1]["finish_reason"] == "stop"


def test_n_choices_with_the_openai_client_stream(echo):
    stream = client(echo).chat.completions.create(model="m", messages=user("x y"), n=2, stream=True)
    texts = {0: "", 1: ""}
    for chunk in stream:
        for choice in chunk.choices:
            texts[choice.index] += choice.delta.content or ""
    assert texts == {0: "x y", 1: "x y"}


# -- logprobs -------------------------------------------------------------------


def test_chat_logprobs_streamed_join_to_the_whole(echo):
    stream = client(echo).chat.completions.create(
        model="m", messages=user("hi there you"), logprobs=True, stream=True
    )
    entries, content = [], ""
    for chunk in stream:
        choice = chunk.choices[0]
        content += choice.delta.content or ""
        if choice.logprobs is not None and choice.logprobs.content:
            entries += choice.logprobs.content
    assert "".join(e.token for e in entries) == content == "hi there you"
    assert [e.logprob for e in entries] == [0.0, -0.25, -0.5]

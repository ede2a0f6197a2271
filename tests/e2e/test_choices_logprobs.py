"""``n`` choices and ``logprobs`` over a real socket, with the deterministic echo program."""

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


def test_n_choices_non_streamed(echo):
    reply = client(echo).chat.completions.create(model="m", messages=user("a b c"), n=3)
    assert [c.index for c in reply.choices] == [0, 1, 2]
    assert all(c.message.content == "a b c" for c in reply.choices)
    assert all(c.finish_reason == "stop" for c in reply.choices)
    # The prompt counts once, every choice's completion counts.
    assert reply.usage.prompt_tokens == 7
    assert reply.usage.completion_tokens == 9
    assert reply.usage.total_tokens == 16


def test_each_choice_runs_the_program_with_its_own_seed(echo):
    reply = client(echo).chat.completions.create(model="m", messages=user("!args"), n=3, seed=40)
    options = [json.loads(c.message.content)["model_options"] for c in reply.choices]
    assert [o["@@@seed@@@"] for o in options] == [40, 41, 42]
    assert all(o["temperature"] == 1.0 for o in options), "n > 1 samples by default"
    single = client(echo).chat.completions.create(model="m", messages=user("!args"), seed=40)
    assert "temperature" not in json.loads(single.choices[0].message.content)["model_options"]


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


def test_completions_n_per_prompt(echo):
    reply = client(echo).completions.create(model="m", prompt=["a b", "c"], n=2, seed=7)
    assert [c.index for c in reply.choices] == [0, 1, 2, 3]
    assert [c.text for c in reply.choices] == ["a b", "a b", "c", "c"]
    assert reply.usage.prompt_tokens == 14  # two prompts, each counted once
    assert reply.usage.completion_tokens == 6


def test_completions_n_streamed(echo):
    frames = raw_stream(echo, "/v1/completions", {"prompt": ["p q", "r"], "n": 2, "stream": True})
    texts: dict[int, str] = {}
    for frame in frames:
        (choice,) = frame["choices"]
        texts[choice["index"]] = texts.get(choice["index"], "") + choice["text"]
    assert texts == {0: "p q", 1: "p q", 2: "r", 3: "r"}


# -- logprobs -------------------------------------------------------------------


def test_chat_logprobs_non_streamed(echo):
    reply = client(echo).chat.completions.create(
        model="m", messages=user("hi there you"), logprobs=True, top_logprobs=1
    )
    content = reply.choices[0].logprobs.content
    assert [e.token for e in content] == ["hi", " there", " you"]
    assert [e.logprob for e in content] == [0.0, -0.25, -0.5]
    assert content[1].bytes == list(b" there")
    assert content[0].top_logprobs[0].token == "x" and content[0].top_logprobs[0].logprob == -9.0


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


def test_logprobs_are_null_when_not_asked_for(echo):
    body = {"messages": user("hi there")}
    reply = httpx.post(f"{echo.base_url}/v1/chat/completions", json=body, timeout=30).json()
    assert reply["choices"][0]["logprobs"] is None


def test_completions_logprobs(echo):
    reply = client(echo).completions.create(model="m", prompt="to be or", logprobs=1)
    logprobs = reply.choices[0].logprobs
    assert logprobs.tokens == ["to", " be", " or"]
    assert logprobs.token_logprobs == [0.0, -0.25, -0.5]
    assert logprobs.text_offset == [0, 2, 5]
    assert logprobs.top_logprobs == [{"x": -9.0}] * 3


def test_completions_logprobs_streamed(echo):
    frames = raw_stream(
        echo, "/v1/completions", {"prompt": "to be or", "logprobs": 0, "stream": True}
    )
    tokens, offsets = [], []
    for frame in frames:
        logprobs = frame["choices"][0]["logprobs"]
        if logprobs:
            tokens += logprobs["tokens"]
            offsets += logprobs["text_offset"]
    assert tokens == ["to", " be", " or"] and offsets == [0, 2, 5]


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/v1/chat/completions", {"messages": user("x"), "top_logprobs": 2}, "top_logprobs"),
        (
            "/v1/chat/completions",
            {"messages": user("x"), "logprobs": True, "top_logprobs": 21},
            "top_logprobs",
        ),
        ("/v1/chat/completions", {"messages": user("x"), "n": 0}, "n"),
        ("/v1/completions", {"prompt": "x", "logprobs": 1, "echo": True}, "logprobs"),
        ("/v1/completions", {"prompt": "x", "logprobs": 6}, "logprobs"),
    ],
)
def test_bad_logprobs_and_n_are_400(echo, path, body, param):
    response = httpx.post(f"{echo.base_url}{path}", json=body, timeout=30)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == param

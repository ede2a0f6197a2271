"""Whatever a program did with its thunk before returning it, the client gets all of its text.

Upstream's simplest ``m serve`` example returns ``session.instruct(...)`` after rejection
sampling: a computed thunk whose stream the program has already read. Streamed, that
once gave a role chunk, a finish chunk and no content; ``/v1/responses`` lost it too.
"""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from tests.server import PROGRAMS, serve, sse_events

pytestmark = pytest.mark.e2e

REPLY = "attempt {n} says hello in several small words"
EXPECTED = {
    "sampled": "Hi Bob! " + REPLY.format(n=1),
    "awaited": REPLY.format(n=0),
    "streamed": REPLY.format(n=0),
    "partial": REPLY.format(n=0),
}
MODES = sorted(EXPECTED)


@pytest.fixture(scope="module")
def server():
    with serve(PROGRAMS / "consumed_thunk.py") as running:
        yield running


def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="unused", max_retries=0)


@pytest.mark.parametrize("mode", MODES)
def test_chat_serves_whole_text(server, mode):
    messages = [{"role": "user", "content": f"{mode} please"}]
    whole = client(server).chat.completions.create(model="m", messages=messages)
    assert whole.choices[0].message.content == EXPECTED[mode]
    stream = client(server).chat.completions.create(model="m", messages=messages, stream=True)
    pieces = [c.choices[0].delta.content or "" for c in stream if c.choices]
    assert "".join(pieces) == EXPECTED[mode]
    assert len([p for p in pieces if p]) >= 1


@pytest.mark.parametrize("mode", MODES)
def test_raw_sse_carries_content(server, mode):
    body = {"messages": [{"role": "user", "content": f"{mode} x"}], "stream": True}
    with httpx.stream(
        "POST", f"{server.base_url}/v1/chat/completions", json=body, timeout=30
    ) as response:
        assert response.status_code == 200
        payloads = list(sse_events(response.iter_lines()))
    assert payloads[-1] == "[DONE]"
    chunks = [json.loads(p) for p in payloads[:-1]]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == EXPECTED[mode]


@pytest.mark.parametrize("mode", MODES)
def test_completions_serve_whole_text(server, mode):
    whole = client(server).completions.create(model="m", prompt=f"{mode} now")
    assert whole.choices[0].text == EXPECTED[mode]
    stream = client(server).completions.create(model="m", prompt=f"{mode} now", stream=True)
    assert "".join(c.choices[0].text for c in stream if c.choices) == EXPECTED[mode]


@pytest.mark.parametrize("mode", MODES)
def test_responses_serve_whole_text(server, mode):
    whole = client(server).responses.create(model="m", input=f"{mode} then")
    assert whole.status == "completed"
    assert whole.output_text == EXPECTED[mode]
    deltas, final = [], None
    for event in client(server).responses.create(model="m", input=f"{mode} then", stream=True):
        if event.type == "response.output_text.delta":
            deltas.append(event.delta)
        elif event.type == "response.completed":
            final = event.response
    assert "".join(deltas) == EXPECTED[mode]
    assert final is not None and final.output_text == EXPECTED[mode]


@pytest.mark.model
def test_rejection_sampling_program_streams_on_real_model():
    """Upstream's simple example, on the real model: the stream carries the answer."""
    with serve(PROGRAMS / "greeting_sampler.py") as real:
        messages = [{"role": "user", "content": "Say hello to Bob."}]
        options = {"max_tokens": 12, "temperature": 0}
        whole = client(real).chat.completions.create(model="m", messages=messages, **options)
        assert whole.choices[0].message.content
        stream = client(real).chat.completions.create(
            model="m", messages=messages, stream=True, **options
        )
        text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        assert text.strip()

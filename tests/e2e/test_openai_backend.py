"""The openai backend, pointed at another m serve: client -> proxy m serve -> echo m serve."""

from __future__ import annotations

import openai
import pytest

from tests.server import PROGRAMS, serve

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def proxy():
    with serve(PROGRAMS / "echo.py") as upstream:  # noqa: SIM117
        with serve(
            PROGRAMS / "proxy.py", env={"UPSTREAM_BASE_URL": f"{upstream.base_url}/v1"}
        ) as server:
            yield server


def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="x", max_retries=0)


def test_non_streaming_through_the_openai_backend(proxy):
    reply = client(proxy).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "alpha beta"}]
    )
    assert reply.choices[0].message.content == "alpha beta"
    assert reply.usage.completion_tokens == 2


def test_streaming_and_options_pass_through(proxy):
    chunks = list(
        client(proxy).chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "one two three four five"}],
            stream=True,
            max_tokens=3,
            stream_options={"include_usage": True},
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "one two three"
    finishes = [
        c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
    ]
    assert finishes == ["length"]
    assert chunks[-1].usage.completion_tokens == 3
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) >= 3


def test_logprobs_pass_through(proxy):
    reply = client(proxy).chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "alpha beta"}],
        logprobs=True,
        top_logprobs=1,
    )
    entries = reply.choices[0].logprobs.content
    assert [(e.token, e.logprob) for e in entries] == [("alpha", 0.0), (" beta", -0.25)]
    assert entries[1].bytes == list(b" beta")
    assert entries[0].top_logprobs[0].token == "x"


def test_reasoning_tokens_the_upstream_reports_pass_through(proxy):
    reply = client(proxy).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "<think> a b </think> c"}]
    )
    assert reply.usage.completion_tokens == 5
    assert reply.usage.completion_tokens_details.reasoning_tokens == 4


def test_an_unreachable_model_server_is_a_503_in_our_words():
    from tests.server import free_port

    dead = f"http://127.0.0.1:{free_port()}/v1"  # nobody listens there
    messages = [{"role": "user", "content": "hi"}]
    with serve(PROGRAMS / "proxy.py", env={"UPSTREAM_BASE_URL": dead}) as server:
        with pytest.raises(openai.InternalServerError) as caught:
            client(server).chat.completions.create(model="m", messages=messages)
        assert caught.value.status_code == 503
        error = caught.value.body
        assert error["code"] == "model_server_unavailable"
        assert "127.0.0.1" not in error["message"]  # the operator's hosts stay in the log
        # Streamed, the backend's own retries outlast the first-result wait: the 200 is
        # sent, and the failure comes as an error frame in the same words.
        with pytest.raises(openai.APIError) as streamed:
            for _ in client(server).chat.completions.create(
                model="m", messages=messages, stream=True
            ):
                pass
        assert streamed.value.body["code"] == "model_server_unavailable"
        assert "failed" in server.log

"""The OpenAI wire format over a real socket, with deterministic test programs.

What needs no socket (shapes, client errors, failures, frames) runs in-process in
``tests/unit/test_wire_inprocess.py``; here stay the ``openai`` client against a live
server, chunked uploads, keep-alives, disconnects and the server's own log.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import openai
import pytest

from tests.server import PROGRAMS, serve, sse_events

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def echo():
    with serve(PROGRAMS / "echo.py", "--max-request-bytes", "65536") as server:
        yield server


@pytest.fixture(scope="module")
def faulty():
    with serve(PROGRAMS / "faulty.py", "--keepalive", "0.5") as server:
        yield server


def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="unused", max_retries=0)


def post(server, body, **kwargs) -> httpx.Response:
    return httpx.post(f"{server.base_url}/v1/chat/completions", json=body, timeout=30, **kwargs)


def user(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


# -- happy paths ------------------------------------------------------------------


def test_openai_client_non_streaming(echo):
    reply = client(echo).chat.completions.create(model="any", messages=user("hello there world"))
    assert reply.object == "chat.completion"
    assert reply.id.startswith("chatcmpl-")
    assert reply.model == "echo"
    assert reply.choices[0].message.role == "assistant"
    assert reply.choices[0].message.content == "hello there world"
    assert reply.choices[0].finish_reason == "stop"
    assert reply.usage.prompt_tokens == 7
    assert reply.usage.completion_tokens == 3
    assert reply.usage.total_tokens == 10


def test_openai_client_streaming_matches_non_streaming(echo):
    stream = client(echo).chat.completions.create(
        model="any", messages=user("one two three four"), stream=True
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "one two three four"
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) == 4
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert all(c.usage is None for c in chunks)
    assert len({c.id for c in chunks}) == 1 and len({c.created for c in chunks}) == 1


def test_raw_sse_frames_and_usage(echo):
    body = {
        "messages": user("a b c"),
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": 2,
    }
    with httpx.stream(
        "POST", f"{echo.base_url}/v1/chat/completions", json=body, timeout=30
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        payloads = list(sse_events(response.iter_lines()))
    assert payloads[-1] == "[DONE]"
    frames = [json.loads(p) for p in payloads[:-1]]
    assert frames[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert all(f["object"] == "chat.completion.chunk" for f in frames)
    finish = [f for f in frames if f["choices"] and f["choices"][0]["finish_reason"]]
    assert len(finish) == 1 and finish[0]["choices"][0]["finish_reason"] == "length"
    assert frames[-1]["choices"] == []
    assert frames[-1]["usage"] == {"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9}
    assert all(f["usage"] is None for f in frames[:-1])  # null until the last, as OpenAI


def test_models_and_health(echo):
    models = client(echo).models.list()
    assert [m.id for m in models.data] == ["echo"]
    assert httpx.get(f"{echo.base_url}/health").json() == {"status": "ok"}


# -- client errors -----------------------------------------------------------------


def assert_openai_error(response: httpx.Response, status: int, param: str | None = None):
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["message"]
    if param is not None:
        assert error["param"] == param
    return error


def test_malformed_json_and_wrong_content_type(echo):
    url = f"{echo.base_url}/v1/chat/completions"
    assert_openai_error(httpx.post(url, content=b'{"messages": [', timeout=10), 400)
    response = httpx.post(url, content=b"hello", headers={"content-type": "text/plain"}, timeout=10)
    assert_openai_error(response, 400)
    assert_openai_error(httpx.post(url, content=b"\xff\xfe{", timeout=10), 400)


def test_body_over_limit_is_413(echo):
    big = {"messages": user("x" * 70_000)}
    assert_openai_error(post(echo, big), 413)

    def chunked():
        yield b'{"messages": [{"role": "user", "content": "'
        for _ in range(100):
            yield b"y" * 1024
        yield b'"}]}'

    response = httpx.post(
        f"{echo.base_url}/v1/chat/completions",
        content=chunked(),
        headers={"content-type": "application/json"},
        timeout=10,
    )
    assert_openai_error(response, 413)
    assert post(echo, {"messages": user("still alive")}).status_code == 200


# -- program failures --------------------------------------------------------------


def test_program_exception_is_a_generic_500(faulty):
    for message in ("raise", "wrong-type"):
        error = assert_openai_error(post(faulty, {"messages": user(message)}), 500)
        assert "SECRET" not in json.dumps(error)
        assert error["type"] == "server_error"
    assert "SECRET-program-detail" in faulty.log  # kept in the server log
    assert (
        post(faulty, {"messages": user("fine")}).json()["choices"][0]["message"]["content"] == "ok"
    )


def test_mid_stream_error_is_an_error_frame_then_done(faulty):
    body = {"messages": user("midstream"), "stream": True}
    with httpx.stream(
        "POST", f"{faulty.base_url}/v1/chat/completions", json=body, timeout=30
    ) as response:
        assert response.status_code == 200
        payloads = list(sse_events(response.iter_lines()))
    assert payloads[-1] == "[DONE]"
    error = json.loads(payloads[-2])["error"]
    assert error["type"] == "server_error" and "SECRET" not in json.dumps(error)
    contents = [json.loads(p)["choices"][0]["delta"].get("content") for p in payloads[1:-2]]
    assert "".join(c or "" for c in contents) == "partial output"
    with pytest.raises(openai.APIError):
        list(
            client(faulty).chat.completions.create(
                model="m", messages=user("midstream"), stream=True
            )
        )


def test_slow_program_gets_keepalives_then_its_reply(faulty):
    body = {"messages": user("slow"), "stream": True}
    with httpx.stream(
        "POST", f"{faulty.base_url}/v1/chat/completions", json=body, timeout=30
    ) as response:
        assert response.status_code == 200
        lines = list(response.iter_lines())
    comments = [line for line in lines if line.startswith(":")]
    assert comments, "expected keep-alive comments while the program was slow"
    payloads = list(sse_events(iter(lines)))
    assert payloads[-1] == "[DONE]"
    assert json.loads(payloads[1])["choices"][0]["delta"]["content"] == "finally"


def test_client_disconnect_closes_the_programs_stream(faulty, tmp_path: Path):
    marker = tmp_path / "closed"
    body = {"messages": user(f"endless:{marker}"), "stream": True}
    with httpx.stream(
        "POST", f"{faulty.base_url}/v1/chat/completions", json=body, timeout=30
    ) as response:
        seen = 0
        for line in response.iter_lines():
            if line.startswith("data:"):
                seen += 1
            if seen >= 5:
                break
    deadline = time.monotonic() + 10
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert marker.exists(), "the program's stream was not closed after the client left"
    assert post(faulty, {"messages": user("fine")}).status_code == 200


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
def test_client_leaving_a_non_streamed_request_cancels_it(faulty, tmp_path: Path, path):
    marker = tmp_path / "closed"
    prompt = f"endless:{marker}"
    body = {"messages": user(prompt)} if "chat" in path else {"prompt": prompt}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{faulty.base_url}{path}", json=body, timeout=1.5)
    deadline = time.monotonic() + 10
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert marker.exists(), "the generation went on after the client left"
    assert post(faulty, {"messages": user("fine")}).status_code == 200

"""What real clients tripped on (issue 21), over a real socket with deterministic programs:
``usage: null`` in streamed chunks, a declared oversize body, Responses ``item_reference``,
``truncation``, ``reasoning`` and ``allowed_tools``, and chat's legacy ``functions``.
"""

from __future__ import annotations

import json
import socket

import httpx
import openai
import pytest

from tests.server import PROGRAMS, serve, sse_events
from tests.unit.test_schema_refs import fanned_out_schema

pytestmark = pytest.mark.e2e

LIMIT = 65536


@pytest.fixture(scope="module")
def echo():
    args = ("--max-request-bytes", str(LIMIT), "--body-timeout", "3")
    with serve(PROGRAMS / "echo.py", *args, env={"ECHO_DELAY": "0"}) as server:
        yield server


@pytest.fixture(scope="module")
def inspect():
    with serve(PROGRAMS / "responses_inspect.py") as server:
        yield server


def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="unused", max_retries=0)


def raw_stream(server, path: str, body: dict) -> list[dict]:
    with httpx.stream("POST", f"{server.base_url}{path}", json=body, timeout=30) as response:
        assert response.status_code == 200
        payloads = list(sse_events(response.iter_lines()))
    assert payloads[-1] == "[DONE]"
    return [json.loads(p) for p in payloads[:-1]]


# -- usage in streams ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "one two three"}]}),
        ("/v1/completions", {"prompt": "one two three"}),
    ],
    ids=["chat", "completions"],
)
def test_with_include_usage_every_chunk_but_the_last_has_usage_null(echo, path, body):
    options = {"stream": True, "stream_options": {"include_usage": True}}
    frames = raw_stream(echo, path, {**body, **options})
    assert len(frames) >= 4
    for frame in frames[:-1]:
        assert "usage" in frame and frame["usage"] is None, frame
    assert frames[-1]["choices"] == [] and frames[-1]["usage"]["total_tokens"] > 0
    plain = raw_stream(echo, path, {**body, "stream": True})
    assert all("usage" not in frame for frame in plain)  # not asked: no usage key at all


# -- a declared oversize body ------------------------------------------------------


def _headers_only(server, length: int) -> bytes:
    """Send a request's headers declaring ``length`` body bytes, none of the body; the
    reply's first bytes (the server answers, or times the body out after 3 s)."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=20) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\n" + f"Content-Length: {length}\r\n\r\n".encode()
        )
        return sock.recv(4096)


def test_a_declared_length_over_the_limit_is_refused_before_the_body_is_read(echo):
    # Before the fix the server waited for the body, then answered 408 (body timeout).
    answer = _headers_only(echo, LIMIT + 1)
    status_line = answer.split(b"\r\n", 1)[0]
    assert status_line.startswith(b"HTTP/1.1 413"), answer[:200]
    assert b"request_too_large" in answer
    # A client that sends its whole oversize body first still reads the 413.
    response = httpx.post(
        f"{echo.base_url}/v1/chat/completions",
        content=b'{"messages": "' + b"x" * (LIMIT + 1) + b'"}',
        headers={"content-type": "application/json"},
        timeout=30,
    )
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "request_too_large"
    reply = httpx.post(
        f"{echo.base_url}/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "still here"}]},
        timeout=30,
    )
    assert reply.json()["choices"][0]["message"]["content"] == "still here"


# -- $ref fan-out in schemas ----------------------------------------------------------


def test_a_schema_whose_refs_fan_out_is_converted_once_per_definition(inspect):
    # Before the fix each $ref was expanded again where it appeared: 2**30 types, cut
    # off by the converter's budget after about a second of CPU, and refused with a 400.
    schema = fanned_out_schema(30)
    chat = httpx.post(
        f"{inspect.base_url}/v1/chat/completions",
        json={
            "messages": [{"role": "user", "content": "hi"}],
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "t", "schema": schema},
            },
            "tools": [{"type": "function", "function": {"name": "f", "parameters": schema}}],
        },
        timeout=60,
    )
    assert chat.status_code == 200, chat.text
    seen = json.loads(chat.json()["choices"][0]["message"]["content"])
    assert len(seen["format"]["$defs"]) == 30  # one model per object definition, reused
    response = client(inspect).responses.create(
        model="m",
        input="hi",
        text={"format": {"type": "json_schema", "name": "t", "schema": schema}},
        tools=[{"type": "function", "name": "f", "parameters": schema}],
    )
    assert len(json.loads(response.output_text)["format"]["$defs"]) == 30

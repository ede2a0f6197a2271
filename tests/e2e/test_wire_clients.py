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
TOOLS = "@@@tools@@@"  # ModelOption.TOOLS, the key tools reach a program under


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
        answer = b""
        while b"\r\n\r\n" not in answer or len(answer.split(b"\r\n\r\n", 1)[1]) < _length(answer):
            piece = sock.recv(4096)
            if not piece:
                break
            answer += piece
        return answer


def _length(answer: bytes) -> int:
    for line in answer.split(b"\r\n\r\n", 1)[0].split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return int(line.split(b":", 1)[1])
    return 0


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


# -- Responses: item_reference, truncation, reasoning, allowed_tools ------------------


@pytest.fixture(scope="module")
def small():
    with serve(PROGRAMS / "small_context.py", "--api-key", "key-a", "--api-key", "key-b") as server:
        yield server


def keyed(server, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.base_url}/v1", api_key=key, max_retries=0)


def test_item_references_are_resolved_from_the_store(small):
    """As the Vercel AI SDK sends a second turn: earlier items by reference."""
    first = keyed(small, "key-a").responses.create(model="m", input="Hi there")
    (message,) = first.output
    assert message.type == "message"
    body = {
        "model": "m",
        "input": [
            {"role": "user", "content": "Hi there"},
            {"type": "item_reference", "id": message.id},
            {"role": "user", "content": "And?"},
        ],
    }
    second = keyed(small, "key-a").responses.create(**body)
    seen = json.loads(second.output_text)["messages"]
    assert [role for role, _ in seen] == ["user", "assistant", "user"]
    assert seen[1][1] == message.content[0].text
    listed = keyed(small, "key-a").responses.input_items.list(second.id, order="asc")
    assert [item.id for item in listed.data][1] == message.id
    # Another tenant's items, and unknown ids, do not exist.
    for key, ref in (("key-b", message.id), ("key-a", "msg_nope")):
        with pytest.raises(openai.BadRequestError) as caught:
            keyed(small, key).responses.create(
                model="m", input=[{"type": "item_reference", "id": ref}]
            )
        error = caught.value.body
        assert error["param"] == "input[0].id" and ref in error["message"]


def _long_conversation() -> list[dict]:
    turns = []
    for i in range(12):
        turns.append({"role": "user", "content": f"question number {i}"})  # 17-18 characters
        turns.append({"role": "assistant", "content": f"answer {i}"})
    return [*turns, {"role": "user", "content": "last one"}]


def test_truncation_auto_drops_the_oldest_items_and_disabled_refuses(small):
    api = keyed(small, "key-a")
    with pytest.raises(openai.BadRequestError) as caught:
        api.responses.create(model="m", input=_long_conversation(), truncation="disabled")
    assert caught.value.body["code"] == "context_length_exceeded"
    assert caught.value.body["param"] == "input"
    response = api.responses.create(
        model="m", instructions="Be brief.", input=_long_conversation(), truncation="auto"
    )
    assert response.truncation == "auto"
    seen = json.loads(response.output_text)["messages"]
    assert seen[0] == ["system", "Be brief."] and seen[-1] == ["user", "last one"]
    assert sum(len(text) for _, text in seen) <= 200  # the program's context
    texts = [text for _, text in seen]
    assert "question number 0" not in texts  # the oldest went first
    assert len(seen) >= 3  # not more than needed: a few recent turns stay
    plain = api.responses.create(model="m", input="short")
    assert plain.truncation == "disabled"


def test_reasoning_is_echoed_and_its_effort_reaches_the_program(small):
    response = keyed(small, "key-a").responses.create(
        model="m", input="hi", reasoning={"effort": "low", "summary": "auto"}
    )
    assert response.reasoning.effort == "low" and response.reasoning.summary == "auto"
    options = json.loads(response.output_text)["model_options"]
    assert options["reasoning_effort"] == "low"
    with pytest.raises(openai.BadRequestError) as caught:
        keyed(small, "key-a").responses.create(model="m", input="hi", reasoning={"effort": "max"})
    assert caught.value.body["param"].startswith("reasoning")


def test_allowed_tools_offers_only_the_listed_tools(small):
    tools = [
        {"type": "function", "name": "a", "parameters": {"type": "object", "properties": {}}},
        {"type": "function", "name": "b", "parameters": {"type": "object", "properties": {}}},
    ]
    choice = {
        "type": "allowed_tools",
        "mode": "required",
        "tools": [{"type": "function", "name": "b"}],
    }
    response = keyed(small, "key-a").responses.create(
        model="m", input="hi", tools=tools, tool_choice=choice
    )
    options = json.loads(response.output_text)["model_options"]
    assert [t["function"]["name"] for t in options[TOOLS]] == ["b"]
    assert options["tool_choice"] == "required"
    assert response.tool_choice.type == "allowed_tools"  # echoed as sent
    assert [t.name for t in response.tools] == ["a", "b"]
    bad = {**choice, "tools": [{"type": "function", "name": "zz"}]}
    with pytest.raises(openai.BadRequestError) as caught:
        keyed(small, "key-a").responses.create(model="m", input="hi", tools=tools, tool_choice=bad)
    assert caught.value.body["param"] == "tool_choice.tools[0].name"


def test_chat_allowed_tools_and_reasoning_effort_reach_the_program(small):
    tools = [
        {"type": "function", "function": {"name": "a"}},
        {"type": "function", "function": {"name": "b"}},
    ]
    allowed = {"mode": "required", "tools": [{"type": "function", "function": {"name": "a"}}]}
    reply = keyed(small, "key-a").chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "hi"}],
        tools=tools,
        tool_choice={"type": "allowed_tools", "allowed_tools": allowed},
        reasoning_effort="high",
    )
    options = json.loads(reply.choices[0].message.content)["model_options"]
    assert [t["function"]["name"] for t in options[TOOLS]] == ["a"]
    assert options["tool_choice"] == "required"
    assert options["reasoning_effort"] == "high"
    wrong = {"mode": "auto", "tools": [{"type": "function", "function": {"name": "zz"}}]}
    with pytest.raises(openai.BadRequestError) as caught:
        keyed(small, "key-a").chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "hi"}],
            tools=tools,
            tool_choice={"type": "allowed_tools", "allowed_tools": wrong},
        )
    assert caught.value.body["param"] == "tool_choice.allowed_tools.tools[0].function.name"

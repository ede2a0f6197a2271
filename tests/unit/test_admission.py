"""Admission counts generations, reads whole bodies first, and queues first come first served."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

from cli.serve.admission import Admission
from cli.serve.limits import BodyReader
from cli.serve.observability import ServerMetrics
from cli.serve.request_body import generations, parsed_body, typed_body
from tests.waiting import until


def http_scope(path: str, body: bytes) -> dict:
    return {
        "type": "http",
        "method": "POST",
        "path": path,
        "headers": [(b"content-length", str(len(body)).encode())],
        "state": {"body": body},
    }


def test_generations_are_counted_from_the_typed_request():
    def counted(path: str, body: dict) -> int:
        return generations(http_scope(path, json.dumps(body).encode()))

    chat = {"messages": [{"role": "user", "content": "hi"}]}
    assert counted("/v1/chat/completions", {**chat, "n": 3}) == 3
    assert counted("/v1/completions", {"prompt": ["a", "b"], "n": 2}) == 4
    assert counted("/v1/completions", {"prompt": [1, 2, 3]}) == 1  # one token list
    assert counted("/v1/completions", {"prompt": [[1], [2]]}) == 2
    assert counted("/v1/responses", {"input": "hi", "n": 5}) == 1
    scope = http_scope("/v1/chat/completions", json.dumps({**chat, "cache_salt": "s"}).encode())
    assert typed_body(scope).cache_salt == "s" and typed_body(scope) is parsed_body(scope)
    # A body that does not validate counts once and has no salt: the route answers its 400.
    assert generations(http_scope("/v1/completions", b"[not json")) == 1
    invalid = http_scope("/v1/chat/completions", json.dumps({"n": "x", "cache_salt": "s"}).encode())
    assert generations(invalid) == 1 and typed_body(invalid) is None
    assert parsed_body(invalid) == {"n": "x", "cache_salt": "s"}  # the route's JSON


async def test_a_request_with_n_choices_takes_n_slots():
    release = asyncio.Event()
    started: list[str] = []

    async def app(scope, receive, send):
        started.append((await receive())["body"])
        await release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    admission = Admission(app, ServerMetrics(), limit=2, queue=1, state=SimpleNamespace())
    sent: list[list[dict]] = [[], [], [], []]

    def sender(i: int):
        async def send(message: dict) -> None:
            sent[i].append(message)

        return send

    def receiver(i: int):
        given = False

        async def receive() -> dict:
            nonlocal given
            if not given:
                given = True
                return {"type": "http.request", "body": b"", "more_body": False}
            await left[i].wait()
            return {"type": "http.disconnect"}

        return receive

    left = [asyncio.Event() for _ in range(4)]

    def call(i: int, body: dict) -> asyncio.Future:
        scope = http_scope("/v1/chat/completions", json.dumps(body).encode())
        return asyncio.ensure_future(admission(scope, receiver(i), sender(i)))

    def chat(n: int) -> dict:
        return {"messages": [{"role": "user", "content": "hi"}], "n": n}

    def queued() -> float | None:
        return admission.metrics.registry.get_sample_value("m_serve_queue_depth")

    calls = [call(0, chat(2)), call(1, chat(1)), call(2, chat(1))]
    await until(lambda: sent[2], "the third request's answer")
    assert len(started) == 1  # n=2 holds both slots, the second waits in the queue
    assert sent[2][0]["status"] == 429  # and the queue is full
    left[1].set()  # the queued client leaves: its place is free again
    await asyncio.wait_for(calls[1], timeout=10)
    assert calls[1].done() and not sent[1]
    calls.append(call(3, chat(1)))
    await until(lambda: queued() == 1, "the fourth request in the queue")
    assert not sent[3]  # queued, not refused
    release.set()
    await asyncio.gather(*calls)
    assert started == [b"", json.dumps(chat(1)).encode()]  # a request that waited gets its body
    assert admission.running == 0 and sent[3][0]["status"] == 200


async def test_body_reader_gives_the_whole_body_then_disconnect():
    messages = [
        {"type": "http.request", "body": b'{"a"', "more_body": True},
        {"type": "http.request", "body": b": 1}", "more_body": False},
        {"type": "http.disconnect"},
    ]

    async def receive() -> dict:
        return messages.pop(0)

    seen: list[dict] = []

    async def app(scope, receive, send):
        seen.append(await receive())
        seen.append(await receive())

    reader = BodyReader(app, max_bytes=100, timeout=1.0)
    await reader({"type": "http", "path": "/", "headers": []}, receive, None)
    assert seen[0] == {"type": "http.request", "body": b'{"a": 1}', "more_body": False}
    assert seen[1]["type"] == "http.disconnect"

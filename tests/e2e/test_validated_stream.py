"""Validated streaming through ``m serve`` (issue 23): a ``serve()`` that returns the
stream of ``mellea.stdlib.streaming.stream`` is served as the chunks that pass.

Over a real socket, with a scripted backend: streamed text, the whole reply and the
passing chunks are the same text; a failing sentence, and everything after it, never
reaches the client, while its verdict does (live as a ``chunk.checked`` program event,
and in the ``mellea`` report's ``chunk_checks``).
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest

from tests.programs.validated_stream import CALM, PASSED_IN_STORM, RULE
from tests.server import PROGRAMS, serve, sse_events

pytestmark = pytest.mark.e2e

EVENTS = {"include_program_events": True}


@pytest.fixture(scope="module")
def server():
    with serve(PROGRAMS / "validated_stream.py") as running:
        yield running


def _client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="unused", max_retries=0)


def _chat_chunks(server, content: str, events: bool) -> list[dict[str, Any]]:
    body: dict[str, Any] = {"messages": [{"role": "user", "content": content}], "stream": True}
    if events:
        body["stream_options"] = EVENTS
    route = f"{server.base_url}/v1/chat/completions"
    with httpx.stream("POST", route, json=body, timeout=60) as response:
        assert response.status_code == 200
        payloads = list(sse_events(response.iter_lines()))
    assert payloads[-1] == "[DONE]"
    return [json.loads(p) for p in payloads[:-1]]


def _text(chunks: list[dict[str, Any]]) -> str:
    return "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])


def _passed(checks: list[dict[str, Any]]) -> str:
    return " ".join(c["text"] for c in checks if c["passed"])


def test_whole_reply_is_the_passing_chunks_and_reports_each_verdict(server):
    reply = _client(server).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "storm please"}]
    )
    choice = reply.choices[0]
    assert choice.message.content == PASSED_IN_STORM
    assert choice.finish_reason == "content_filter"
    checks = choice.model_extra["mellea"]["chunk_checks"]
    assert [(c["chunk"], c["passed"]) for c in checks] == [(0, True), (1, True), (2, False)]
    assert _passed(checks) == PASSED_IN_STORM
    failed = checks[2]
    assert "storm" in failed["text"]
    assert failed["requirements"] == [
        {
            "description": RULE,
            "success": "fail",
            "reason": f"mentions a storm: {failed['text']!r}",
            "score": None,
        }
    ]


@pytest.mark.parametrize("word", ["calm", "storm"])
def test_streamed_equals_whole_equals_passing_chunks(server, word):
    expected = CALM if word == "calm" else PASSED_IN_STORM
    whole = _client(server).chat.completions.create(
        model="m", messages=[{"role": "user", "content": f"{word} sea"}]
    )
    chunks = _chat_chunks(server, f"{word} sea", events=False)
    assert not any("mellea" in c for c in chunks)  # without the option: no program events
    streamed = _text(chunks)
    assert streamed == whole.choices[0].message.content == expected
    assert _passed(whole.choices[0].model_extra["mellea"]["chunk_checks"]) == expected
    assert len([c for c in chunks if c["choices"] and c["choices"][0]["delta"].get("content")]) > 1


def test_live_verdicts_come_before_their_chunks_and_the_failing_one_is_not_sent(server):
    chunks = _chat_chunks(server, "storm sea", events=True)
    order: list[tuple[str, str]] = []  # ("check", chunk text) or ("text", delta)
    for c in chunks:
        if "mellea" in c and c["mellea"]["type"] == "chunk.checked":
            event = c["mellea"]
            order.append(("check" if event["passed"] else "failed", event["text"]))
        elif c["choices"] and c["choices"][0]["delta"].get("content"):
            order.append(("text", c["choices"][0]["delta"]["content"]))
    assert [kind for kind, _ in order] == ["check", "text", "check", "text", "failed"]
    assert "".join(t for kind, t in order if kind == "text") == PASSED_IN_STORM
    assert "storm" in order[-1][1]
    assert "storm" not in _text(chunks)
    done = [c["mellea"] for c in chunks if "mellea" in c][-1]
    assert done["type"] == "program.done"
    assert [c["passed"] for c in done["chunk_checks"]] == [True, True, False]


def test_responses_stream_sends_the_verdicts_and_only_passing_text(server):
    body = {"input": "storm r", "stream": True, "stream_options": EVENTS}
    with httpx.stream("POST", f"{server.base_url}/v1/responses", json=body, timeout=60) as r:
        assert r.status_code == 200
        events = [json.loads(p) for p in sse_events(r.iter_lines())]
    text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert text == PASSED_IN_STORM
    checks = [e for e in events if e["type"] == "mellea.chunk.checked"]
    assert [c["passed"] for c in checks] == [True, True, False]
    done = events[-1]  # cut short by the failed check, as by a content filter
    assert done["type"] == "response.incomplete"
    assert done["response"]["incomplete_details"] == {"reason": "content_filter"}
    assert done["response"]["output"][0]["content"][0]["text"] == PASSED_IN_STORM
    assert [c["passed"] for c in done["response"]["mellea"]["chunk_checks"]] == [True, True, False]


def test_completions_stream_and_whole_send_the_same_passing_text(server):
    client = _client(server)
    whole = client.completions.create(model="m", prompt="storm c")
    streamed = "".join(
        c.choices[0].text
        for c in client.completions.create(model="m", prompt="storm c", stream=True)
        if c.choices
    )
    assert streamed == whole.choices[0].text == PASSED_IN_STORM
    assert whole.choices[0].finish_reason == "content_filter"

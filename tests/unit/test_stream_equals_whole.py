"""A streamed reply and a whole one are the same reply, on every endpoint (in-process).

Both are rendered from one choice reader's events (``mellea/serve/choice_reader.py``):
here the stream's chunks are joined back together and compared with the whole reply,
with reasoning, tool calls, log-probabilities, several choices and usage in play. The
echo program is deterministic, so any difference is the server's.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.inprocess import app_for, client_for, sse_named, sse_payloads
from tests.server import PROGRAMS

CALL = '<tool_call> {"name": "get_weather", "arguments": {"city": "Paris"}} </tool_call>'
TEXT = f"<think> weigh the options </think> It is sunny today {CALL}"
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]


@pytest.fixture(scope="module")
def app():
    return app_for(PROGRAMS / "echo.py", reasoning_parser="qwen3", tool_call_parser="hermes")


@pytest.fixture
async def client(app, monkeypatch):
    monkeypatch.setenv("ECHO_DELAY", "0.001")
    async with client_for(app) as client:
        yield client


async def both(client, path: str, body: dict[str, Any]) -> tuple[dict, list[dict]]:
    """The whole reply to ``body`` and the chunks of the same request streamed."""
    whole = await client.post(path, json=body)
    assert whole.status_code == 200, whole.text
    streamed = await client.post(
        path, json={**body, "stream": True, "stream_options": {"include_usage": True}}
    )
    assert streamed.status_code == 200, streamed.text
    payloads = sse_payloads(streamed.text)
    assert payloads[-1] == "[DONE]"
    return whole.json(), [json.loads(p) for p in payloads[:-1]]


def joined_chat(chunks: list[dict]) -> dict[int, dict[str, Any]]:
    """Each choice's deltas joined, as a whole choice's message would read."""
    choices: dict[int, dict[str, Any]] = {}
    for chunk in chunks:
        for choice in chunk["choices"]:
            into = choices.setdefault(
                choice["index"],
                {"content": "", "reasoning": "", "calls": {}, "logprobs": [], "finish": None},
            )
            delta = choice["delta"]
            into["content"] += delta.get("content") or ""
            into["reasoning"] += delta.get("reasoning_content") or ""
            for call in delta.get("tool_calls") or []:
                entry = into["calls"].setdefault(call["index"], {"name": "", "arguments": ""})
                function = call.get("function") or {}
                entry["name"] += function.get("name") or ""
                entry["arguments"] += function.get("arguments") or ""
            into["logprobs"] += (choice.get("logprobs") or {}).get("content") or []
            into["finish"] = choice["finish_reason"] or into["finish"]
    return choices


async def test_chat_streamed_joins_to_the_whole_reply(client):
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": TEXT}],
        "tools": TOOLS,
        "n": 2,
        "logprobs": True,
    }
    whole, chunks = await both(client, "/v1/chat/completions", body)
    streamed = joined_chat(chunks)
    assert sorted(streamed) == [0, 1]
    for choice in whole["choices"]:
        mine, message = streamed[choice["index"]], choice["message"]
        assert mine["content"] == (message["content"] or "") == "It is sunny today"
        assert mine["reasoning"] == message["reasoning_content"] == "weigh the options"
        calls = [
            {"name": c["function"]["name"], "arguments": c["function"]["arguments"]}
            for c in message["tool_calls"]
        ]
        assert list(mine["calls"].values()) == calls
        assert calls == [{"name": "get_weather", "arguments": '{"city": "Paris"}'}]
        assert mine["logprobs"] == choice["logprobs"]["content"] and mine["logprobs"]
        assert mine["finish"] == choice["finish_reason"] == "tool_calls"
    assert chunks[-1]["usage"] == whole["usage"]


def joined_text(chunks: list[dict]) -> dict[int, dict[str, Any]]:
    """Each text completion choice's chunks joined."""
    choices: dict[int, dict[str, Any]] = {}
    for chunk in chunks:
        for choice in chunk["choices"]:
            into = choices.setdefault(
                choice["index"], {"text": "", "tokens": [], "offsets": [], "finish": None}
            )
            into["text"] += choice["text"]
            logprobs = choice.get("logprobs") or {}
            into["tokens"] += logprobs.get("tokens") or []
            into["offsets"] += logprobs.get("text_offset") or []
            into["finish"] = choice["finish_reason"] or into["finish"]
    return choices


@pytest.mark.parametrize("echo", [False, True])
async def test_completions_streamed_join_to_the_whole_reply(client, echo):
    body: dict[str, Any] = {"model": "m", "prompt": ["one two three", "four five"], "n": 2}
    body |= {"echo": True} if echo else {"logprobs": 1, "max_tokens": 2}
    whole, chunks = await both(client, "/v1/completions", body)
    streamed = joined_text(chunks)
    assert sorted(streamed) == [0, 1, 2, 3]
    for choice in whole["choices"]:
        mine = streamed[choice["index"]]
        assert mine["text"] == choice["text"]
        assert mine["finish"] == choice["finish_reason"]
        logprobs = choice["logprobs"] or {}
        assert mine["tokens"] == logprobs.get("tokens", [])
        assert mine["offsets"] == logprobs.get("text_offset", [])
    assert [c["text"] for c in whole["choices"]][::2] == (
        ["one two three" * 2, "four five" * 2] if echo else ["one two", "four five"]
    )
    assert chunks[-1]["usage"] == whole["usage"]


def without_ids(response: dict[str, Any]) -> dict[str, Any]:
    """A response object without what is fresh on every request (ids, times)."""
    fresh = {"id", "created_at", "completed_at", "call_id"}

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in fresh}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    return strip(response)


async def test_responses_streamed_ends_with_the_whole_reply(client):
    body = {
        "model": "m",
        "input": TEXT,
        "tools": [{"type": "function", "name": "get_weather", "parameters": {}}],
        "include": ["message.output_text.logprobs"],
    }
    whole = await client.post("/v1/responses", json=body)
    assert whole.status_code == 200, whole.text
    streamed = await client.post("/v1/responses", json={**body, "stream": True})
    events = [data for _, data in sse_named(streamed.text)]
    assert events[-1]["type"] == "response.completed"
    final = events[-1]["response"]
    assert without_ids(final) == without_ids(whole.json())
    kinds = [item["type"] for item in final["output"]]
    assert kinds == ["reasoning", "message", "function_call"]
    # The deltas the stream sent add up to the output it ends with.
    text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert text == final["output"][1]["content"][0]["text"] == "It is sunny today"

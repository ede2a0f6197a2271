"""Wire gaps real clients showed, in-process: ``usage`` on a reply that made no model call,
and the Responses reasoning ``summary`` when the request asks for one.

The ``openai`` client and raw HTTP over ``httpx.ASGITransport`` (``tests/inprocess.py``).
Images and audio a program does not take: ``tests/unit/test_wire_media_refusal.py``.
"""

from __future__ import annotations

import json

import pytest

from tests.inprocess import app_for, client_for, openai_client, sse_named, stream_frames
from tests.server import PROGRAMS

CHAT, COMPLETIONS, RESPONSES = "/v1/chat/completions", "/v1/completions", "/v1/responses"
USER = [{"role": "user", "content": "fixed text please"}]
ZERO = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
REASONING = "The user wants the weather."  # what tool_caller.py thinks


@pytest.fixture(scope="module")
def apps():
    return {
        "fixed": app_for(PROGRAMS / "plain_sync.py"),  # a string, no model call
        "reasoning": app_for(PROGRAMS / "tool_caller.py", reasoning_parser="qwen3"),
    }


@pytest.fixture
async def fixed(apps):
    async with client_for(apps["fixed"]) as client:
        yield client


@pytest.fixture
async def reasoning(apps):
    async with client_for(apps["reasoning"]) as client:
        yield client


# -- usage of a reply without a model call ---------------------------------------------------


async def test_a_fixed_text_chat_reply_carries_zero_usage(fixed):
    reply = await openai_client(fixed).chat.completions.create(model="m", messages=USER)
    assert reply.choices[0].message.content == "FIXED TEXT PLEASE"
    assert reply.usage is not None
    assert reply.usage.model_dump(exclude_none=True) == ZERO
    raw = (await fixed.post(CHAT, json={"messages": USER})).json()
    assert raw["usage"] == ZERO


async def test_a_fixed_text_chat_stream_ends_with_zero_usage(fixed):
    body = {"messages": USER, "stream": True, "stream_options": {"include_usage": True}}
    frames = await stream_frames(fixed, CHAT, body)
    assert frames[-1]["choices"] == [] and frames[-1]["usage"] == ZERO
    chunks = await openai_client(fixed).chat.completions.create(
        model="m", messages=USER, stream=True, stream_options={"include_usage": True}
    )
    usages = [chunk.usage async for chunk in chunks]
    assert usages[-1] is not None and usages[-1].total_tokens == 0


@pytest.mark.parametrize("stream", [False, True])
async def test_a_fixed_text_completion_carries_zero_usage(fixed, stream):
    body: dict = {"prompt": "abc"}
    if stream:
        body |= {"stream": True, "stream_options": {"include_usage": True}}
        frames = await stream_frames(fixed, COMPLETIONS, body)
        assert frames[-1]["usage"] == ZERO
    else:
        reply = await openai_client(fixed).completions.create(model="m", prompt="abc")
        assert reply.usage is not None and reply.usage.total_tokens == 0
        assert (await fixed.post(COMPLETIONS, json=body)).json()["usage"] == ZERO


async def test_a_fixed_text_response_carries_zero_usage(fixed):
    reply = await openai_client(fixed).responses.create(model="m", input="fixed")
    assert reply.output_text == "FIXED"
    assert reply.usage is not None
    assert (reply.usage.input_tokens, reply.usage.output_tokens, reply.usage.total_tokens) == (
        0,
        0,
        0,
    )
    response = await fixed.post(RESPONSES, json={"input": "fixed", "stream": True})
    events = [data for _, data in sse_named(response.text)]
    assert events[-1]["type"] == "response.completed"
    usage = events[-1]["response"]["usage"]
    assert (usage["input_tokens"], usage["output_tokens"], usage["total_tokens"]) == (0, 0, 0)
    stored = (await fixed.get(f"{RESPONSES}/{reply.id}")).json()
    assert stored["usage"]["total_tokens"] == 0


# -- reasoning summaries ----------------------------------------------------------------------


@pytest.mark.parametrize("level", ["auto", "concise", "detailed"])
async def test_a_requested_summary_holds_the_reasoning(reasoning, level):
    reply = await openai_client(reasoning).responses.create(
        model="m", input="Weather?", reasoning={"summary": level}
    )
    item = reply.output[0]
    assert item.type == "reasoning"
    assert [(s.type, s.text) for s in item.summary] == [("summary_text", REASONING)]
    assert item.content[0].text == REASONING  # the reasoning text stays where it was
    assert reply.reasoning.summary == level


async def test_without_a_summary_request_the_summary_stays_empty(reasoning):
    reply = await openai_client(reasoning).responses.create(model="m", input="Weather?")
    assert reply.output[0].type == "reasoning" and reply.output[0].summary == []
    raw = (await reasoning.post(RESPONSES, json={"input": "Weather?"})).json()
    assert raw["output"][0]["summary"] == []


async def test_the_older_generate_summary_name_asks_too(reasoning):
    body = {"input": "Weather?", "reasoning": {"generate_summary": "auto"}}
    raw = (await reasoning.post(RESPONSES, json=body)).json()
    assert raw["output"][0]["summary"] == [{"type": "summary_text", "text": REASONING}]


def summary_events(events: list[dict]) -> list[dict]:
    return [e for e in events if e["type"].startswith("response.reasoning_summary")]


async def test_a_streamed_summary_has_openais_events(reasoning):
    body = {"input": "Weather?", "stream": True, "reasoning": {"summary": "detailed"}}
    response = await reasoning.post(RESPONSES, json=body)
    assert response.status_code == 200, response.text
    frames = sse_named(response.text)
    assert all(name == data["type"] for name, data in frames)
    events = [data for _, data in frames]
    item = next(e["item"] for e in events if e["type"] == "response.output_item.added")
    mine = summary_events(events)
    kinds = [e["type"] for e in mine]
    assert kinds[0] == "response.reasoning_summary_part.added"
    assert kinds[-2:] == [
        "response.reasoning_summary_text.done",
        "response.reasoning_summary_part.done",
    ]
    deltas = [e for e in mine if e["type"] == "response.reasoning_summary_text.delta"]
    assert deltas and "".join(d["delta"] for d in deltas) == REASONING
    for event in mine:
        assert (event["item_id"], event["output_index"], event["summary_index"]) == (
            item["id"],
            0,
            0,
        )
    assert mine[0]["part"] == {"type": "summary_text", "text": ""}
    assert mine[-2]["text"] == REASONING
    assert mine[-1]["part"] == {"type": "summary_text", "text": REASONING}
    # the summary closes before its item does, and the item's final form holds it
    done = next(e for e in events if e["type"] == "response.output_item.done")
    assert done["sequence_number"] > mine[-1]["sequence_number"]
    assert done["item"]["summary"] == [{"type": "summary_text", "text": REASONING}]
    final = events[-1]["response"]
    assert final["output"][0]["summary"] == done["item"]["summary"]
    # the reasoning_text events are still sent, as before
    text_deltas = [e for e in events if e["type"] == "response.reasoning_text.delta"]
    assert "".join(d["delta"] for d in text_deltas) == REASONING


async def test_the_openai_client_reads_the_streamed_summary(reasoning):
    stream = await openai_client(reasoning).responses.create(
        model="m", input="Weather?", stream=True, reasoning={"summary": "auto"}
    )
    events = [event async for event in stream]
    deltas = [e.delta for e in events if e.type == "response.reasoning_summary_text.delta"]
    assert "".join(deltas) == REASONING
    parts = [e.part.text for e in events if e.type == "response.reasoning_summary_part.done"]
    assert parts == [REASONING]


async def test_no_summary_events_without_a_summary_request(reasoning):
    response = await reasoning.post(RESPONSES, json={"input": "Weather?", "stream": True})
    assert summary_events([data for _, data in sse_named(response.text)]) == []


async def test_a_replayed_stream_repeats_the_summary_events(reasoning):
    body = {"input": "Weather?", "reasoning": {"summary": "auto"}}
    created = (await reasoning.post(RESPONSES, json=body)).json()
    replay = await reasoning.get(f"{RESPONSES}/{created['id']}", params={"stream": "true"})
    events = [data for _, data in sse_named(replay.text)]
    deltas = [e for e in summary_events(events) if e["type"].endswith("text.delta")]
    assert "".join(d["delta"] for d in deltas) == REASONING
    assert events[-1]["response"]["output"][0]["summary"] == created["output"][0]["summary"]


@pytest.mark.parametrize("bad", ["short", 3, ["auto"]])
async def test_a_bad_summary_value_is_a_400_naming_it(reasoning, bad):
    body = {"input": "Weather?", "reasoning": {"summary": bad}}
    response = await reasoning.post(RESPONSES, json=body)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == "reasoning.summary"
    assert json.loads(response.text)["error"]["type"] == "invalid_request_error"

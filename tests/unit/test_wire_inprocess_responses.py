"""The Responses API on the wire, in-process: the response object, streamed events, tool
calls and reasoning, logprobs, the store's routes, cancel, failures and timeouts.

The app runs over ``httpx.ASGITransport`` (``tests/inprocess.py``); what needs a real
socket or processes (a client leaving, workers sharing a store, restarts) stays in
``tests/e2e/test_responses.py``.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3

import httpx
import openai
import pytest

from cli.serve import responses_routes
from mellea.serve.responses import StoredResponse, StoreUnavailable, new_response
from mellea.serve.responses.store import ResponseStore
from tests.inprocess import app_for, client_for, openai_client, sse_named
from tests.server import PROGRAMS

RESPONSES = "/v1/responses"
TOOLS = [
    {
        "type": "function",
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "n": {"type": "integer"}},
            "required": ["city", "n"],
            "additionalProperties": False,
        },
        "strict": True,
    },
    {"type": "function", "name": "get_time", "parameters": {"type": "object"}, "strict": False},
]
LOGPROBS = ["message.output_text.logprobs"]


@pytest.fixture(scope="module")
def apps():
    return {
        "echo": app_for(PROGRAMS / "echo.py"),
        "inspect": app_for(PROGRAMS / "responses_inspect.py"),
        "tools": app_for(PROGRAMS / "tool_caller.py", reasoning_parser="qwen3"),
        "faulty": app_for(PROGRAMS / "faulty.py", request_timeout=0.5, first_result_wait=0.1),
    }


@pytest.fixture
async def echo(apps, monkeypatch):
    monkeypatch.setenv("ECHO_DELAY", "0.001")
    async with client_for(apps["echo"]) as client:
        yield client


@pytest.fixture
async def inspect(apps):
    async with client_for(apps["inspect"]) as client:
        yield client


@pytest.fixture
async def tools(apps):
    async with client_for(apps["tools"]) as client:
        yield client


@pytest.fixture
async def faulty(apps, monkeypatch):
    monkeypatch.setenv("SLOW_SECONDS", "3")  # past the request timeout
    async with client_for(apps["faulty"]) as client:
        yield client


async def stream(client: httpx.AsyncClient, body: dict) -> list[dict]:
    """A streamed response's events; each ``event:`` line names its data's type."""
    response = await client.post(RESPONSES, json={**body, "stream": True})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    frames = sse_named(response.text)
    assert all(name == data["type"] for name, data in frames)
    return [data for _, data in frames]


async def received(client: httpx.AsyncClient, **body) -> dict:
    """What the inspect program's serve() got for this request."""
    reply = await openai_client(client).responses.create(model="m", **body)
    return json.loads(reply.output_text)


def assert_error(response: httpx.Response, status: int, param: str | None = None) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    if param is not None:
        assert error["param"] == param, error
    return error


# -- creating responses --------------------------------------------------------------------


async def test_string_input_gives_a_complete_response_object(echo):
    reply = await openai_client(echo).responses.create(model="m", input="hello there world")
    assert reply.output_text == "hello there world"
    assert reply.id.startswith("resp_") and reply.object == "response"
    assert reply.status == "completed" and reply.model == "echo"
    (message,) = reply.output
    assert message.type == "message" and message.id.startswith("msg_")
    assert message.role == "assistant" and message.status == "completed"
    assert message.content[0].type == "output_text" and message.content[0].annotations == []
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (7, 3)
    assert reply.usage.total_tokens == 10
    raw = (await echo.get(f"{RESPONSES}/{reply.id}")).json()
    for key in ("error", "incomplete_details", "instructions", "previous_response_id"):
        assert key in raw and raw[key] is None, key
    assert raw["tools"] == [] and raw["tool_choice"] == "auto" and raw["metadata"] == {}
    assert raw["text"] == {"format": {"type": "text"}} and raw["store"] is True


async def test_instructions_and_items_become_chat_messages(inspect):
    items = [
        {"role": "developer", "content": "be brief"},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi"}]},
        {"type": "function_call", "call_id": "c1", "name": "get_time", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "noon"},
    ]
    messages = (await received(inspect, input=items, instructions="terse"))["messages"]
    assert [m["role"] for m in messages] == ["system", "developer", "user", "assistant", "tool"]
    assert messages[3]["tool_calls"][0]["function"] == {"name": "get_time", "arguments": "{}"}
    assert messages[4] == {"role": "tool", "content": "noon", "tool_call_id": "c1"}


async def test_only_sent_values_become_model_options(inspect):
    assert (await received(inspect, input="x"))["model_options"] == {}
    got = await received(
        inspect, input="x", temperature=0.5, max_output_tokens=50, parallel_tool_calls=False
    )
    options = got["model_options"]
    assert options["temperature"] == 0.5 and options["@@@max_new_tokens@@@"] == 50
    assert options["parallel_tool_calls"] is False


async def test_previous_response_id_chains_the_conversation(inspect):
    client = openai_client(inspect)
    first = await client.responses.create(model="m", input="one", instructions="first")
    messages = (await received(inspect, input="two", previous_response_id=first.id))["messages"]
    assert [(m["role"], m["content"]) for m in messages] == [
        ("user", "one"),
        ("assistant", first.output_text),
        ("user", "two"),
    ]


async def test_max_output_tokens_cuts_the_reply_short(echo):
    reply = await openai_client(echo).responses.create(
        model="m", input="a b c d e", max_output_tokens=2
    )
    assert reply.status == "incomplete"
    assert reply.incomplete_details.reason == "max_output_tokens"
    assert reply.output_text == "a b" and reply.output[0].status == "incomplete"
    events = await stream(echo, {"input": "a b c d e", "max_output_tokens": 2})
    assert events[-1]["type"] == "response.incomplete"
    assert events[-1]["response"]["incomplete_details"] == {"reason": "max_output_tokens"}


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": "hi", "background": True}, "background"),
        ({"input": "hi", "tools": [{"type": "web_search"}]}, "tools[0].type"),
        ({"input": "hi", "n": 2}, "n"),
        ({"input": "hi", "tool_choice": {"type": "function", "name": "nope"}}, "tool_choice"),
        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0].id"),
        ({"input": "hi", "temperature": 3}, "temperature"),
        ({"input": "hi", "top_logprobs": 21}, "top_logprobs"),
        ({"instructions": "no input"}, "input"),
        ({"input": "hi", "previous_response_id": "resp_nope"}, "previous_response_id"),
        ({"input": "hi", "stream_options": {"include_usage": True}}, "stream_options"),
    ],
)
async def test_values_we_cannot_honour_are_a_400_naming_the_field(echo, body, param):
    assert_error(await echo.post(RESPONSES, json=body), 400, param)


# -- streaming -------------------------------------------------------------------------------


async def test_stream_events_in_order_and_final_response_equals_get(echo):
    events = await stream(echo, {"input": "one two three", "metadata": {"k": "v"}})
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert [e["type"] for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        *["response.output_text.delta"] * 3,
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert events[0]["response"]["status"] == "in_progress"
    deltas = [e["delta"] for e in events if e["type"] == "response.output_text.delta"]
    assert "".join(deltas) == "one two three" == events[7]["text"]
    final = events[-1]["response"]
    assert final["status"] == "completed" and final["metadata"] == {"k": "v"}
    assert (await echo.get(f"{RESPONSES}/{final['id']}")).json() == final


async def test_openai_client_stream_helper_and_replay(echo):
    client = openai_client(echo)
    async with client.responses.stream(model="m", input="x y z") as events:
        texts = [e.delta async for e in events if e.type == "response.output_text.delta"]
        final = await events.get_final_response()
    assert "".join(texts) == "x y z" == final.output_text
    replayed = [e async for e in await client.responses.retrieve(final.id, stream=True)]
    assert replayed[-1].type == "response.completed"
    assert replayed[-1].response.output_text == "x y z"


# -- tool calls, reasoning, logprobs ----------------------------------------------------------


async def test_tool_calls_and_reasoning_become_output_items(tools):
    reply = await openai_client(tools).responses.create(model="m", input="Weather?", tools=TOOLS)
    assert [item.type for item in reply.output] == [
        "reasoning",
        "message",
        "function_call",
        "function_call",
    ]
    reasoning, _, weather, clock = reply.output
    assert reasoning.content[0].text == "The user wants the weather."
    assert reply.output_text == "Let me check."
    assert (weather.name, clock.name) == ("get_weather", "get_time")
    assert json.loads(weather.arguments) == {"city": "Paris", "n": 0}
    events = await stream(tools, {"input": "Weather?", "tools": TOOLS})
    done = [e for e in events if e["type"] == "response.function_call_arguments.done"]
    assert [e["arguments"] for e in done] == [weather.arguments, clock.arguments]


async def test_logprobs_on_the_output_text_part(echo):
    reply = await openai_client(echo).responses.create(
        model="m", input="hi there you", include=LOGPROBS, top_logprobs=1
    )
    entries = reply.output[0].content[0].logprobs
    assert [(e.token, e.logprob) for e in entries] == [
        ("hi", 0.0),
        (" there", -0.25),
        (" you", -0.5),
    ]
    events = await stream(echo, {"input": "hi there you", "include": LOGPROBS})
    deltas = [e for e in events if e["type"] == "response.output_text.delta"]
    assert [[x["token"] for x in d["logprobs"]] for d in deltas] == [[d["delta"]] for d in deltas]


# -- the store's routes ---------------------------------------------------------------------


async def test_get_delete_input_items_and_404s(echo):
    items = [{"role": "user", "content": w} for w in ("first", "second")]
    reply = await openai_client(echo).responses.create(model="m", input=items)
    page = (await echo.get(f"{RESPONSES}/{reply.id}/input_items", params={"order": "asc"})).json()
    assert [i["content"][0]["text"] for i in page["data"]] == ["first", "second"]
    deleted = await echo.delete(f"{RESPONSES}/{reply.id}")
    assert deleted.json() == {"id": reply.id, "object": "response", "deleted": True}
    assert_error(await echo.get(f"{RESPONSES}/{reply.id}"), 404)
    assert_error(await echo.delete(f"{RESPONSES}/{reply.id}"), 404)
    assert_error(await echo.post(f"{RESPONSES}/resp_unknown/cancel", json={}), 404)
    with pytest.raises(openai.NotFoundError):
        await openai_client(echo).responses.retrieve("resp_unknown")


async def test_store_false_is_not_retrievable(echo):
    reply = await openai_client(echo).responses.create(model="m", input="secret", store=False)
    assert reply.store is False and reply.output_text == "secret"
    assert_error(await echo.get(f"{RESPONSES}/{reply.id}"), 404)


async def test_cancel_stops_a_streaming_response(echo, monkeypatch):
    created = []  # the ids of the responses the route creates

    def noting(*args, **kwargs):
        response = new_response(*args, **kwargs)
        created.append(response.id)
        return response

    monkeypatch.setattr(responses_routes, "new_response", noting)
    long_input = " ".join(["word"] * 3000)  # seconds of echo unless cancelled
    body = {"input": long_input, "stream": True}
    streaming = asyncio.ensure_future(echo.post(RESPONSES, json=body))
    for _ in range(500):  # until the response is stored, in progress
        if created and (await echo.get(f"{RESPONSES}/{created[0]}")).status_code == 200:
            break
        await asyncio.sleep(0.01)
    (response_id,) = created
    cancelled = (await echo.post(f"{RESPONSES}/{response_id}/cancel", json={})).json()
    assert cancelled["status"] == "cancelled"
    events = [data for _, data in sse_named((await streaming).text)]
    assert events[-1]["type"] == "error" and events[-1]["code"] == "response_cancelled"
    stored = (await echo.get(f"{RESPONSES}/{response_id}")).json()
    assert stored["status"] == "cancelled" and stored["output"][0]["status"] == "incomplete"
    assert len(stored["output"][0]["content"][0]["text"]) < len(long_input)
    assert_error(await echo.post(f"{RESPONSES}/{response_id}/cancel", json={}), 400)


async def test_the_store_is_closed_when_the_server_stops(tmp_path):
    app = app_for(PROGRAMS / "echo.py", responses_db=str(tmp_path / "responses.db"))
    async with app.router.lifespan_context(app), client_for(app) as client:
        reply = await openai_client(client).responses.create(model="m", input="kept")
    assert reply.output_text == "kept"
    with pytest.raises(sqlite3.ProgrammingError, match="closed"):
        app.state.responses_store.get(reply.id)


class _DatabaseGoneWhileWaiting(ResponseStore):
    """A store whose database stops answering once a replay starts waiting."""

    def status(self, response_id: str, owner: str | None = None) -> str | None:
        raise StoreUnavailable


async def test_a_store_failure_during_a_replay_is_its_error_event():
    app = app_for(PROGRAMS / "echo.py")
    app.state.responses_store = store = _DatabaseGoneWhileWaiting()
    store.create(StoredResponse({"id": "resp_running", "status": "in_progress"}))
    async with client_for(app) as client:
        replay = await client.get(f"{RESPONSES}/resp_running", params={"stream": "true"})
    assert replay.status_code == 200, replay.text
    events = [data for _, data in sse_named(replay.text)]
    assert [event["type"] for event in events] == ["error"]
    assert events[0]["code"] == "store_unavailable"
    assert events[0]["message"].startswith("response 'resp_running' cannot be replayed now")
    assert "Traceback" not in replay.text


# -- failures and timeouts ------------------------------------------------------------------


async def test_failure_mid_stream_is_response_failed_without_internals(faulty):
    events = await stream(faulty, {"input": "midstream"})
    failed = events[-1]["response"]
    assert events[-1]["type"] == "response.failed"
    assert failed["status"] == "failed" and failed["error"]["code"] == "server_error"
    assert "SECRET" not in json.dumps(events)
    assert (await faulty.get(f"{RESPONSES}/{failed['id']}")).json() == failed


async def test_program_failures_before_the_reply_get_a_real_status(faulty):
    for streamed in (False, True):
        body = {"input": "raise", "stream": streamed}
        error = assert_error(await faulty.post(RESPONSES, json=body), 500)
        assert "SECRET" not in error["message"]
        body = {"input": "bad-request", "stream": streamed}
        error = assert_error(await faulty.post(RESPONSES, json=body), 400, "input")
        assert error["message"] == "the prompt is too long for this model"


async def test_request_timeout_applies(faulty):
    error = assert_error(await faulty.post(RESPONSES, json={"input": "slow"}), 504)
    assert error["code"] == "timeout"
    events = await stream(faulty, {"input": "slow"})
    assert events[-1]["type"] == "response.failed"
    assert "timeout" in events[-1]["response"]["error"]["message"]

"""The Responses API (``/v1/responses``) over a real socket, with deterministic test programs.

Cases that need no socket also run in-process in ``tests/unit/test_wire_inprocess_responses.py``.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from mellea.core import TokenLogprob
from mellea.serve.responses import ResponseStore, StoredResponse
from mellea.serve.responses.output import OutputBuilder
from mellea.serve.responses.store import ORPHAN_ERROR
from tests.e2e.test_cli import m
from tests.server import PROGRAMS, serve

pytestmark = pytest.mark.e2e

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
PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def echo():
    with serve(PROGRAMS / "echo.py") as server:
        yield server


@pytest.fixture(scope="module")
def inspect():
    with serve(PROGRAMS / "responses_inspect.py") as server:
        yield server


@pytest.fixture(scope="module")
def tools():
    with serve(PROGRAMS / "tool_caller.py", "--reasoning-parser", "qwen3") as server:
        yield server


@pytest.fixture(scope="module")
def faulty():
    with serve(PROGRAMS / "faulty.py", "--request-timeout", "1.5") as server:
        yield server


def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="x", max_retries=0)


def post(server, body: dict, path: str = "") -> httpx.Response:
    return httpx.post(f"{server.base_url}/v1/responses{path}", json=body, timeout=30)


def get(server, path: str, **params) -> httpx.Response:
    return httpx.get(f"{server.base_url}/v1/responses/{path}", params=params, timeout=30)


def received(server, **body) -> dict:
    """What the inspect program's serve() got for this request."""
    return json.loads(client(server).responses.create(model="m", **body).output_text)


def events_of(lines: Iterator[str]) -> Iterator[dict]:
    """Parse raw SSE lines; every event's ``event:`` line must name its data's type."""
    name = None
    for line in lines:
        if line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data = json.loads(line[5:])
            assert name == data["type"], (name, data)
            name = None
            yield data


def stream(server, body: dict) -> list[dict]:
    with httpx.stream(
        "POST", f"{server.base_url}/v1/responses", json={**body, "stream": True}, timeout=30
    ) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        return list(events_of(response.iter_lines()))


def assert_error(response: httpx.Response, status: int, param: str | None = None) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    if param is not None:
        assert error["param"] == param, error
    return error


# -- creating responses ----------------------------------------------------------------


def test_string_input_gives_a_complete_response_object(echo):
    reply = client(echo).responses.create(model="m", input="hello there world")
    assert reply.output_text == "hello there world"
    assert reply.id.startswith("resp_") and reply.object == "response"
    assert reply.status == "completed" and reply.model == "echo"
    (message,) = reply.output
    assert message.type == "message" and message.id.startswith("msg_")
    assert message.role == "assistant" and message.status == "completed"
    assert message.content[0].type == "output_text" and message.content[0].annotations == []
    assert reply.usage.input_tokens == 7 and reply.usage.output_tokens == 3
    assert reply.usage.total_tokens == 10
    assert reply.usage.input_tokens_details.cached_tokens == 0
    assert reply.usage.output_tokens_details.reasoning_tokens == 0
    raw = get(echo, reply.id).json()
    for key in (
        "error",
        "incomplete_details",
        "instructions",
        "max_output_tokens",
        "previous_response_id",
        "temperature",
        "top_p",
    ):
        assert key in raw and raw[key] is None, key
    assert raw["tools"] == [] and raw["tool_choice"] == "auto" and raw["metadata"] == {}
    assert raw["parallel_tool_calls"] is True and raw["store"] is True
    assert raw["text"] == {"format": {"type": "text"}}
    assert isinstance(raw["created_at"], int)


def test_item_list_with_instructions_becomes_chat_messages(inspect):
    items = [
        {"role": "developer", "content": "be brief"},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi"}]},
        {"role": "assistant", "content": [{"type": "output_text", "text": "Weather?"}]},
        {
            "type": "function_call",
            "call_id": "call_1",
            "name": "get_weather",
            "arguments": '{"city": "Paris"}',
        },
        {"type": "function_call", "call_id": "call_2", "name": "get_time", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "22C"},
        {"type": "function_call_output", "call_id": "call_2", "output": "noon"},
        {"role": "user", "content": "thanks"},
    ]
    messages = received(inspect, input=items, instructions="You are terse.")["messages"]
    assert messages == [
        {"role": "system", "content": "You are terse."},
        {"role": "developer", "content": "be brief"},
        {"role": "user", "content": "Hi"},
        {
            "role": "assistant",
            "content": "Weather?",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                },
                {
                    "id": "call_2",
                    "type": "function",
                    "function": {"name": "get_time", "arguments": "{}"},
                },
            ],
        },
        {"role": "tool", "content": "22C", "tool_call_id": "call_1"},
        {"role": "tool", "content": "noon", "tool_call_id": "call_2"},
        {"role": "user", "content": "thanks"},
    ]


def test_echo_sees_the_system_message_first(echo):
    reply = client(echo).responses.create(
        model="m", instructions="sys", input=[{"role": "user", "content": "!args"}]
    )
    assert json.loads(reply.output_text)["roles"] == ["system", "user"]


def test_only_sent_values_become_model_options(inspect):
    assert received(inspect, input="x")["model_options"] == {}
    got = received(
        inspect,
        input="x",
        temperature=0.5,
        top_p=0.9,
        max_output_tokens=50,
        tools=TOOLS,
        tool_choice={"type": "function", "name": "get_time"},
        parallel_tool_calls=False,
        extra_body={"requirements": ["be short"]},
    )
    options = got["model_options"]
    assert options["temperature"] == 0.5 and options["top_p"] == 0.9
    assert options["@@@max_new_tokens@@@"] == 50
    assert options["tool_choice"] == {"type": "function", "function": {"name": "get_time"}}
    assert options["parallel_tool_calls"] is False
    assert options["@@@tools@@@"][0] == {
        "type": "function",
        "function": {k: v for k, v in TOOLS[0].items() if k != "type"},
    }
    assert got["requirements"] == ["be short"]


def test_json_schema_format_reaches_the_program(inspect):
    text = {"format": {"type": "json_schema", "name": "Person", "schema": PERSON, "strict": True}}
    reply = client(inspect).responses.create(model="m", input="x", text=text)
    got = json.loads(reply.output_text)
    assert got["format"]["title"] == "Person"
    assert set(got["format"]["properties"]) == {"name", "age"}
    assert got["model_options"]["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "Person", "schema": PERSON, "strict": True},
    }
    assert reply.text.format.type == "json_schema" and reply.text.format.name == "Person"
    got = received(inspect, input="x", text={"format": {"type": "json_object"}})
    assert got["model_options"]["response_format"] == {"type": "json_object"} and not got["format"]


def test_previous_response_id_chains_the_conversation(inspect):
    first = client(inspect).responses.create(model="m", input="one", instructions="first")
    second = client(inspect).responses.create(model="m", input="two", previous_response_id=first.id)
    assert second.previous_response_id == first.id
    messages = received(
        inspect, input="three", previous_response_id=second.id, instructions="third"
    )["messages"]
    assert [m["role"] for m in messages] == [
        "system",
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
    ]
    assert messages[0]["content"] == "third"  # the earlier instructions are not carried over
    assert [messages[i]["content"] for i in (1, 3, 5)] == ["one", "two", "three"]
    assert messages[2]["content"] == first.output_text


def test_unknown_fields_are_ignored(echo):
    body = {"input": "hi", "reasoning": {"effort": "low"}, "truncation": "auto", "x-y": [1]}
    assert post(echo, body).json()["output"][0]["content"][0]["text"] == "hi"


# -- streaming ------------------------------------------------------------------------------


def test_stream_events_in_order_and_final_response_equals_get(echo):
    events = stream(echo, {"input": "one two three", "metadata": {"k": "v"}})
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    types = [e["type"] for e in events]
    assert types == [
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
    assert (
        events[0]["response"]["status"] == "in_progress" and events[0]["response"]["output"] == []
    )
    deltas = [e for e in events if e["type"] == "response.output_text.delta"]
    item_id = events[2]["item"]["id"]
    assert all(
        (d["item_id"], d["output_index"], d["content_index"]) == (item_id, 0, 0) for d in deltas
    )
    assert "".join(d["delta"] for d in deltas) == "one two three" == events[7]["text"]
    final = events[-1]["response"]
    assert final["status"] == "completed" and final["metadata"] == {"k": "v"}
    assert get(echo, final["id"]).json() == final


def test_openai_client_stream_true_parses_every_event(echo):
    events = list(client(echo).responses.create(model="m", input="a b c", stream=True))
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == "a b c"
    final = events[-1]
    assert final.type == "response.completed" and final.response.output_text == "a b c"
    retrieved = client(echo).responses.retrieve(final.response.id)
    assert retrieved.model_dump() == final.response.model_dump()


def test_openai_client_stream_helper(echo, tools):
    with client(echo).responses.stream(model="m", input="x y z") as events:
        texts = [e.delta for e in events if e.type == "response.output_text.delta"]
        final = events.get_final_response()
    assert "".join(texts) == "x y z" == final.output_text
    with client(tools).responses.stream(model="m", input="Weather?", tools=TOOLS) as events:
        kinds = [e.type for e in events]
        final = events.get_final_response()
    assert "response.function_call_arguments.done" in kinds
    calls = [item for item in final.output if item.type == "function_call"]
    assert calls[0].parsed_arguments == {"city": "Paris", "n": 0}


# -- tool calls and reasoning ---------------------------------------------------------------


def test_streamed_arguments_join_to_the_non_streamed_ones(tools):
    whole = client(tools).responses.create(model="m", input="Weather?", tools=TOOLS)
    expected = [item.arguments for item in whole.output if item.type == "function_call"]
    events = stream(tools, {"input": "Weather?", "tools": TOOLS})
    calls = {
        e["output_index"]: e["item"]
        for e in events
        if e["type"] == "response.output_item.added" and e["item"]["type"] == "function_call"
    }
    joined = {
        index: "".join(
            e["delta"]
            for e in events
            if e["type"] == "response.function_call_arguments.delta" and e["output_index"] == index
        )
        for index in calls
    }
    assert [joined[i] for i in sorted(calls)] == expected
    done = [e for e in events if e["type"] == "response.function_call_arguments.done"]
    assert [e["arguments"] for e in done] == expected
    assert all(calls[e["output_index"]]["id"] == e["item_id"] for e in done)
    final = events[-1]["response"]
    assert [item["type"] for item in final["output"]] == [item.type for item in whole.output]
    reasoning = "".join(e["delta"] for e in events if e["type"] == "response.reasoning_text.delta")
    assert reasoning == "The user wants the weather."


def test_tool_choice_none_and_program_returned_calls(tools):
    reply = client(tools).responses.create(
        model="m", input="Weather?", tools=TOOLS, tool_choice="none"
    )
    assert "<tool_call>" in reply.output_text
    assert not [item for item in reply.output if item.type == "function_call"]
    reply = client(tools).responses.create(model="m", input="program-call")
    (call,) = [item for item in reply.output if item.type == "function_call"]
    assert call.name == "lookup" and json.loads(call.arguments) == {"q": "from the program"}


# -- logprobs ---------------------------------------------------------------------------------

LOGPROBS = ["message.output_text.logprobs"]


def test_streamed_logprobs_come_with_their_deltas(echo):
    events = stream(echo, {"input": "hi there you", "include": LOGPROBS, "top_logprobs": 1})
    deltas = [e for e in events if e["type"] == "response.output_text.delta"]
    assert [[entry["token"] for entry in d["logprobs"]] for d in deltas] == [
        [d["delta"]] for d in deltas
    ]
    joined = [entry for d in deltas for entry in d["logprobs"]]
    assert [(e["token"], e["logprob"]) for e in joined] == [
        ("hi", 0.0),
        (" there", -0.25),
        (" you", -0.5),
    ]
    assert joined[0]["top_logprobs"] == [{"token": "x", "logprob": -9.0, "bytes": None}]
    (done,) = [e for e in events if e["type"] == "response.output_text.done"]
    assert done["logprobs"] == joined
    (part_done,) = [e for e in events if e["type"] == "response.content_part.done"]
    assert part_done["part"]["logprobs"] == joined
    final = events[-1]["response"]
    assert final["output"][0]["content"][0]["logprobs"] == joined
    assert get(echo, final["id"]).json() == final


def test_no_logprobs_unless_included(echo, inspect):
    for body in ({"input": "hi there"}, {"input": "hi there", "top_logprobs": 3}):
        part = post(echo, body).json()["output"][0]["content"][0]
        assert part == {"type": "output_text", "text": "hi there", "annotations": []}
        events = stream(echo, body)
        assert all(
            e["logprobs"] == [] for e in events if e["type"].startswith("response.output_text")
        )
        assert "logprobs" not in events[-1]["response"]["output"][0]["content"][0]
    assert received(inspect, input="x", top_logprobs=3)["model_options"] == {}


def test_include_asks_the_backend_and_other_values_are_ignored(inspect):
    include = ["reasoning.encrypted_content", *LOGPROBS]
    got = received(inspect, input="x", include=include, top_logprobs=2)
    assert got["model_options"] == {"logprobs": True, "top_logprobs": 2}
    got = received(inspect, input="x", include=["reasoning.encrypted_content"])
    assert got["model_options"] == {}
    assert received(inspect, input="x", include=LOGPROBS)["model_options"]["top_logprobs"] == 0


def test_logprobs_of_tokens_without_message_text_go_with_the_next_text():
    def entry(token: str) -> TokenLogprob:
        return TokenLogprob(token, -1.0)

    output: list = []
    builder = OutputBuilder(output, logprobs=True)
    entries = [entry("<think>"), entry("hm")]
    builder.reply_logprobs(entries)
    builder.reasoning("hm")
    entries.append(entry("</think>Hi"))
    builder.reply_logprobs(entries)
    (delta,) = [e for e in builder.text("Hi") if e["type"] == "response.output_text.delta"]
    assert [e["token"] for e in delta["logprobs"]] == ["<think>", "hm", "</think>Hi"]
    entries.append(entry("<tool_call>"))
    builder.reply_logprobs(entries)  # markup the parser holds back: no text delta
    done = builder.function_call("call_1", "f", "{}")[0]
    assert done["type"] == "response.output_text.done"
    assert [e["token"] for e in done["logprobs"]] == ["<think>", "hm", "</think>Hi", "<tool_call>"]
    assert output[1].content[0].logprobs == done["logprobs"]


# -- retrieve, delete, input items, store ---------------------------------------------------


def test_input_items_pages(echo):
    items = [{"role": "user", "content": w} for w in ("first", "second", "third")]
    reply = client(echo).responses.create(model="m", input=items, instructions="not an item")
    page = get(echo, f"{reply.id}/input_items").json()
    assert page["object"] == "list" and page["has_more"] is False
    texts = [item["content"][0]["text"] for item in page["data"]]
    assert texts == ["third", "second", "first"]  # newest first by default
    assert page["first_id"] == page["data"][0]["id"] and page["last_id"] == page["data"][-1]["id"]
    assert all(item["type"] == "message" and item["id"].startswith("msg_") for item in page["data"])
    first = get(echo, f"{reply.id}/input_items", order="asc", limit=2).json()
    assert [i["content"][0]["text"] for i in first["data"]] == ["first", "second"]
    assert first["has_more"] is True
    rest = get(echo, f"{reply.id}/input_items", order="asc", after=first["last_id"]).json()
    assert [i["content"][0]["text"] for i in rest["data"]] == ["third"] and not rest["has_more"]
    every = client(echo).responses.input_items.list(reply.id, order="asc", limit=1)
    assert [item.content[0].text for item in every] == ["first", "second", "third"]


# -- cancel, failures, disconnects, timeouts -------------------------------------------------


def test_cancel_stops_a_streaming_response(echo):
    long_input = " ".join(["word"] * 3000)  # ~30 s of echo unless cancelled
    with httpx.stream(
        "POST", f"{echo.base_url}/v1/responses", json={"input": long_input, "stream": True}
    ) as response:
        events = events_of(response.iter_lines())
        response_id = next(events)["response"]["id"]
        assert next(e for e in events if e["type"] == "response.output_text.delta")
        started = time.monotonic()
        cancelled = client(echo).responses.cancel(response_id)
        rest = list(events)
    assert time.monotonic() - started < 5
    assert cancelled.status == "cancelled"
    assert rest[-1]["type"] == "error" and rest[-1]["code"] == "response_cancelled"
    stored = get(echo, response_id).json()
    assert stored["status"] == "cancelled"
    assert stored["output"][0]["status"] == "incomplete"
    text = stored["output"][0]["content"][0]["text"]
    assert text.startswith("word") and len(text) < len(long_input)
    assert cancelled.output[0].content[0].text == text  # cancel waits for the final output
    time.sleep(0.2)
    assert get(echo, response_id).json() == stored  # the generation really stopped
    assert_error(post(echo, {}, f"/{response_id}/cancel"), 400)


def test_cancelling_a_finished_response_is_a_400(echo):
    reply = client(echo).responses.create(model="m", input="done")
    with pytest.raises(openai.BadRequestError):
        client(echo).responses.cancel(reply.id)


def test_disconnect_closes_the_generation(faulty, tmp_path: Path):
    marker = tmp_path / "closed"
    with httpx.stream(
        "POST",
        f"{faulty.base_url}/v1/responses",
        json={"input": f"endless:{marker}", "stream": True},
    ) as response:
        events = events_of(response.iter_lines())
        response_id = next(events)["response"]["id"]
        next(e for e in events if e["type"] == "response.output_text.delta")
    deadline = time.monotonic() + 5
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert marker.read_text() == "closed"
    assert get(faulty, response_id).json()["status"] == "cancelled"


def test_request_timeout_applies(faulty, tmp_path: Path):
    error = assert_error(post(faulty, {"input": "slow"}), 504)
    assert error["code"] == "timeout"
    events = stream(faulty, {"input": f"endless:{tmp_path / 'm'}"})
    assert events[-1]["type"] == "response.failed"
    assert "timeout" in events[-1]["response"]["error"]["message"]


# -- the store itself ---------------------------------------------------------------------------


def test_store_file_is_shared_between_processes_and_cancel_wins(tmp_path: Path):
    path = str(tmp_path / "responses.db")
    one, two = ResponseStore(path), ResponseStore(path)  # as two worker processes would
    response = {"id": "resp_1", "status": "in_progress", "output": []}
    one.create(StoredResponse(response, [{"id": "msg_1"}], []))
    assert two.get("resp_1").input == [{"id": "msg_1"}]
    assert two.cancel("resp_1") == ("in_progress", {**response, "status": "cancelled"})
    assert one.status("resp_1") == "cancelled"
    finished = one.finish({**response, "status": "completed", "output": [{"id": "msg_2"}]})
    assert finished["status"] == "cancelled" and finished["output"] == [{"id": "msg_2"}]
    assert two.cancel("resp_1")[0] == "cancelled"
    assert two.delete("resp_1") and one.get("resp_1") is None and not one.delete("resp_1")


def test_workers_share_the_store_file(tmp_path: Path):
    db = tmp_path / "responses.db"
    with serve(PROGRAMS / "echo.py", "--workers", "2", "--responses-db", str(db)) as server:
        ids = [client(server).responses.create(model="m", input=f"n{i}").id for i in range(4)]
        for _ in range(3):  # fresh connections land on either worker
            assert all(get(server, rid).status_code == 200 for rid in ids)
        long_input = " ".join(["word"] * 3000)
        with httpx.stream(
            "POST", f"{server.base_url}/v1/responses", json={"input": long_input, "stream": True}
        ) as response:
            events = events_of(response.iter_lines())
            response_id = next(events)["response"]["id"]
            started = time.monotonic()
            assert post(server, {}, f"/{response_id}/cancel").json()["status"] == "cancelled"
            assert list(events)[-1]["code"] == "response_cancelled"
        assert time.monotonic() - started < 5
        assert get(server, response_id).json()["status"] == "cancelled"


def test_a_killed_server_s_response_in_a_file_fails_when_its_lease_runs_out(tmp_path: Path):
    db = str(tmp_path / "responses.db")
    args = ("--responses-db", db, "--responses-lease", "1")
    long_input = " ".join(["word"] * 3000)  # seconds of echo: still running when killed
    with (
        serve(PROGRAMS / "echo.py", *args) as victim,
        httpx.stream(
            "POST", f"{victim.base_url}/v1/responses", json={"input": long_input, "stream": True}
        ) as response,
    ):
        events = events_of(response.iter_lines())  # kept open: a client gone cancels
        response_id = next(events)["response"]["id"]
        assert get(victim, response_id).json()["status"] == "in_progress"
        os.kill(victim.process.pid, signal.SIGKILL)
    with serve(PROGRAMS / "echo.py", *args) as survivor:  # another worker of the file
        deadline = time.monotonic() + 15
        while (stored := get(survivor, response_id).json())["status"] == "in_progress":
            assert time.monotonic() < deadline, "the orphan was never marked failed"
            time.sleep(0.2)
    assert stored["status"] == "failed"
    assert stored["error"]["message"] == ORPHAN_ERROR["message"]


def test_memory_store_works_across_threads():
    store = ResponseStore()
    errors: list[BaseException] = []

    def write(n: int) -> None:
        try:
            for i in range(50):
                store.create(StoredResponse({"id": f"r{n}-{i}", "status": "completed"}))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and store.get("r3-49") is not None


def finished(rid: str, created: float, status: str = "completed") -> StoredResponse:
    return StoredResponse({"id": rid, "status": status, "created_at": created, "output": []})


def test_store_evicts_the_oldest_finished_responses_beyond_max_count():
    store = ResponseStore(max_count=3)
    now = time.time()
    store.create(finished("running", now - 50, status="in_progress"))
    for i in range(5):
        store.create(finished(f"r{i}", now - 40 + i))
    assert [store.get(f"r{i}") is not None for i in range(5)] == [False, False, True, True, True]
    assert store.status("running") == "in_progress", "a running response is never evicted"


def test_store_forgets_expired_responses(tmp_path: Path):
    path = str(tmp_path / "responses.db")
    store = ResponseStore(path, max_age=3600)
    now = time.time()
    store.create(finished("old", now - 7200))
    store.create(finished("old-but-running", now - 7200, status="in_progress"))
    store.create(finished("new", now - 60))
    assert store.get("old") is None and store.status("old") is None
    assert not store.delete("old")
    assert store.get("new") is not None and store.status("old-but-running") == "in_progress"
    assert ResponseStore(path, max_age=None).get("old") is None, "evicted, not only hidden"


def test_store_files_from_before_the_bounds_still_open(tmp_path: Path):
    import sqlite3

    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE responses (id TEXT PRIMARY KEY, status TEXT NOT NULL, record TEXT)")
    record = {"response": {"id": "r1", "status": "completed", "created_at": 5}, "input": []}
    db.execute(
        "INSERT INTO responses VALUES ('r1', 'completed', ?)",
        (json.dumps(record | {"history": []}),),
    )
    db.commit()
    db.close()
    assert ResponseStore(str(path), max_age=None).get("r1").response["created_at"] == 5
    assert ResponseStore(str(path)).get("r1") is None, "created in 1970: long expired"


def test_max_count_flag_bounds_the_store():
    with serve(PROGRAMS / "echo.py", "--responses-max-count", "2") as server:
        ids = [client(server).responses.create(model="m", input=f"n{i}").id for i in range(3)]
        assert [get(server, rid).status_code for rid in ids] == [404, 200, 200]


def test_max_age_flag_is_checked(tmp_path: Path):
    result = m("serve", str(PROGRAMS / "echo.py"), "--responses-max-age", "soon")
    assert result.returncode != 0 and "--responses-max-age" in result.stderr


def test_stored_responses_survive_a_restart(tmp_path: Path):
    db = str(tmp_path / "responses.db")
    with serve(PROGRAMS / "echo.py", "--responses-db", db) as server:
        first = client(server).responses.create(model="m", input="remember this")
    with serve(PROGRAMS / "echo.py", "--responses-db", db) as server:
        assert get(server, first.id).json()["output"][0]["content"][0]["text"] == "remember this"
        items = httpx.get(f"{server.base_url}/v1/responses/{first.id}/input_items").json()
        assert items["data"][0]["content"][0]["text"] == "remember this"
    with serve(PROGRAMS / "responses_inspect.py", "--responses-db", db) as server:
        chained = client(server).responses.create(
            model="m", input="and this", previous_response_id=first.id
        )
    messages = json.loads(chained.output_text)["messages"]
    assert [(m["role"], m["content"]) for m in messages] == [
        ("user", "remember this"),
        ("assistant", "remember this"),
        ("user", "and this"),
    ]


# -- replaying a stored response's stream -------------------------------------------------


def replay(server, response_id: str, **params) -> list[dict]:
    url = f"{server.base_url}/v1/responses/{response_id}"
    with httpx.stream("GET", url, params={"stream": "true", **params}, timeout=30) as response:
        assert response.status_code == 200, response.read()
        return list(events_of(response.iter_lines()))


def collapsed(events: list[dict]) -> list[str]:
    """Event types, with runs of deltas of one item counted once."""
    types: list[str] = []
    for event in events:
        if not (event["type"].endswith(".delta") and types and types[-1] == event["type"]):
            types.append(event["type"])
    return types


@pytest.mark.parametrize(
    ("fixture", "body"),
    [
        ("echo", {"input": "one two three four"}),
        ("echo", {"input": "one two", "include": ["message.output_text.logprobs"]}),
        ("tools", {"input": "Weather?", "tools": TOOLS}),
        ("echo", {"input": "one two three", "max_output_tokens": 2}),
    ],
)
def test_replay_matches_the_live_stream(request, fixture, body):
    server = request.getfixturevalue(fixture)
    live = stream(server, body)
    response_id = live[0]["response"]["id"]
    again = replay(server, response_id)
    assert [e["sequence_number"] for e in again] == list(range(len(again)))
    assert collapsed(again) == collapsed(live)
    assert again[-1] == {**live[-1], "sequence_number": again[-1]["sequence_number"]}
    assert again[0]["response"]["status"] == "in_progress" and again[0]["response"]["output"] == []
    for kind in ("response.output_text.delta", "response.reasoning_text.delta"):
        assert "".join(e["delta"] for e in again if e["type"] == kind) == "".join(
            e["delta"] for e in live if e["type"] == kind
        )
    logprobs = [
        x for e in again if e["type"] == "response.output_text.delta" for x in e["logprobs"]
    ]
    assert logprobs == [
        x for e in live if e["type"] == "response.output_text.delta" for x in e["logprobs"]
    ]


def test_replay_with_the_openai_client_and_starting_after(echo):
    created = client(echo).responses.create(model="m", input="red green blue")
    events = list(client(echo).responses.retrieve(created.id, stream=True))
    assert events[-1].type == "response.completed"
    assert events[-1].response.output_text == "red green blue"
    later = replay(echo, created.id, starting_after=3)
    assert later[0]["sequence_number"] == 4 and later[-1]["type"] == "response.completed"
    assert_error(get(echo, created.id, stream="true", starting_after=-1), 400, "starting_after")
    assert_error(get(echo, "resp_unknown", stream="true"), 404)


def test_replay_of_a_running_response_waits_for_its_end(echo):
    words = " ".join(f"w{i}" for i in range(60))  # about 0.6 s of streaming
    with httpx.stream(
        "POST", f"{echo.base_url}/v1/responses", json={"input": words, "stream": True}, timeout=30
    ) as response:
        events = events_of(response.iter_lines())
        response_id = next(events)["response"]["id"]
        again = replay(echo, response_id)
        live = [*events]
    assert again[-1]["type"] == "response.completed" == live[-1]["type"]
    assert again[-1]["response"]["output"] == live[-1]["response"]["output"]

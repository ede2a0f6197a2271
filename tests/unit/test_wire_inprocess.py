"""Chat and text completions on the wire, in-process: shapes, streamed frames, ``n``
choices, logprobs, client errors and program failures, with the deterministic test programs.

The app runs over ``httpx.ASGITransport`` (``tests/inprocess.py``); the cases that need a
real socket (a client leaving, keep-alives on the wire) stay in ``tests/e2e/test_wire.py``.
"""

from __future__ import annotations

import itertools
import json
import logging

import httpx
import openai
import pytest

from tests.inprocess import app_for, client_for, openai_client, sse_payloads, stream_frames
from tests.server import PROGRAMS

CHAT, COMPLETIONS = "/v1/chat/completions", "/v1/completions"


@pytest.fixture(scope="module")
def echo_app():
    return app_for(PROGRAMS / "echo.py", max_request_bytes=65536)


@pytest.fixture(scope="module")
def faulty_app():
    return app_for(PROGRAMS / "faulty.py", first_result_wait=0.2, keepalive_seconds=0.05)


@pytest.fixture
async def echo(echo_app, monkeypatch):
    monkeypatch.setenv("ECHO_DELAY", "0.001")
    async with client_for(echo_app) as client:
        yield client


@pytest.fixture
async def faulty(faulty_app, monkeypatch):
    monkeypatch.setenv("SLOW_SECONDS", "0.4")  # past the first-result wait
    async with client_for(faulty_app) as client:
        yield client


def user(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def assert_openai_error(response: httpx.Response, status: int, param: str | None = None) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["message"]
    if param is not None:
        assert error["param"] == param
    return error


# -- chat: happy paths --------------------------------------------------------------


async def test_openai_client_non_streaming(echo):
    reply = await openai_client(echo).chat.completions.create(
        model="any", messages=user("hello there world")
    )
    assert reply.object == "chat.completion"
    assert reply.id.startswith("chatcmpl-")
    assert reply.model == "echo"
    assert reply.choices[0].message.role == "assistant"
    assert reply.choices[0].message.content == "hello there world"
    assert reply.choices[0].finish_reason == "stop"
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (7, 3)
    assert reply.usage.total_tokens == 10


async def test_openai_client_streaming_matches_non_streaming(echo):
    stream = await openai_client(echo).chat.completions.create(
        model="any", messages=user("one two three four"), stream=True
    )
    chunks = [chunk async for chunk in stream]
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "one two three four"
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) == 4
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert all(c.usage is None for c in chunks)
    assert len({c.id for c in chunks}) == 1 and len({c.created for c in chunks}) == 1


async def test_raw_sse_frames_and_usage(echo):
    body = {
        "messages": user("a b c"),
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": 2,
    }
    frames = await stream_frames(echo, CHAT, body)
    assert frames[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert all(f["object"] == "chat.completion.chunk" for f in frames)
    finish = [f for f in frames if f["choices"] and f["choices"][0]["finish_reason"]]
    assert len(finish) == 1 and finish[0]["choices"][0]["finish_reason"] == "length"
    assert frames[-1]["choices"] == []
    assert frames[-1]["usage"] == {"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9}
    assert all(f["usage"] is None for f in frames[:-1])  # null until the last, as OpenAI


async def test_computed_thunk_still_streams(echo):
    frames = await stream_frames(echo, CHAT, {"messages": user("!args"), "stream": True})
    assert frames[0]["choices"][0]["delta"]["role"] == "assistant"
    text = "".join(f["choices"][0]["delta"].get("content") or "" for f in frames)
    assert json.loads(text)["roles"] == ["user"]
    assert frames[-1]["choices"][0]["finish_reason"] == "stop"


async def test_request_fields_reach_the_program_only_when_sent(echo):
    client = openai_client(echo)
    reply = await client.chat.completions.create(
        model="m", messages=[{"role": "developer", "content": "be brief"}, *user("!args")]
    )
    args = json.loads(reply.choices[0].message.content)
    assert args == {
        "roles": ["developer", "user"],
        "requirements": None,
        "model_options": {},
        "format": None,
    }
    reply = await client.chat.completions.create(
        model="m",
        messages=user("!args"),
        temperature=0.5,
        top_p=0.9,
        seed=7,
        max_completion_tokens=12,
        max_tokens=99,
        stop="END",
        presence_penalty=0.1,
        frequency_penalty=0.2,
        extra_body={"requirements": ["be polite"], "top_k": 5},
        response_format={
            "type": "json_schema",
            "json_schema": {
                "name": "city",
                "schema": {
                    "type": "object",
                    "properties": {"name": {"type": "string"}},
                    "required": ["name"],
                },
            },
        },
    )
    args = json.loads(reply.choices[0].message.content)
    options = args["model_options"]
    assert options["temperature"] == 0.5 and options["top_p"] == 0.9
    assert options["@@@seed@@@"] == 7
    assert options["@@@max_new_tokens@@@"] == 12  # max_completion_tokens wins
    assert options["@@@stop_sequences@@@"] == ["END"]
    assert options["presence_penalty"] == 0.1 and options["frequency_penalty"] == 0.2
    assert options["top_k"] == 5
    assert "@@@stream@@@" not in options
    assert args["requirements"] == ["be polite"]
    assert args["format"]["required"] == ["name"]


async def test_models_and_health(echo):
    models = await openai_client(echo).models.list()
    assert [m.id for m in models.data] == ["echo"]
    assert (await echo.get("/health")).json() == {"status": "ok"}
    card = (await echo.get("/v1/models/echo")).json()
    assert card["id"] == "echo" and card["object"] == "model"
    assert_openai_error(await echo.get("/v1/models/other"), 404, "model")


async def test_content_parts_are_accepted(echo):
    body = {"messages": [{"role": "user", "content": [{"type": "text", "text": "x y"}]}]}
    assert (await echo.post(CHAT, json=body)).json()["choices"][0]["message"]["content"] == "x y"


# -- chat: client errors ----------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role"),
        ({"messages": []}, "messages"),
        ({}, "messages"),
        ({"messages": user("x"), "temperature": 5}, "temperature"),
        ({"messages": user("x"), "temperature": "hot"}, "temperature"),
        ({"messages": user("x"), "max_tokens": 0}, "max_tokens"),
        ({"messages": user("x"), "n": 129}, "n"),
        ({"messages": user("x"), "n": 0}, "n"),
        ({"messages": user("x"), "top_logprobs": 2}, "top_logprobs"),
        ({"messages": user("x"), "logprobs": True, "top_logprobs": 21}, "top_logprobs"),
        ({"messages": user("x"), "stream_options": {"include_usage": True}}, "stream_options"),
        ({"messages": user("x"), "logit_bias": {"hello": 1}}, "logit_bias"),
        ({"messages": user("x"), "response_format": {"type": "json_schema"}}, "response_format"),
    ],
)
async def test_validation_errors_are_400_naming_the_field(echo, body, param):
    error = assert_openai_error(await echo.post(CHAT, json=body), 400, param)
    assert error["type"] == "invalid_request_error"


async def test_malformed_json_and_wrong_content_type(echo):
    assert_openai_error(await echo.post(CHAT, content=b'{"messages": ['), 400)
    headers = {"content-type": "text/plain"}
    assert_openai_error(await echo.post(CHAT, content=b"hello", headers=headers), 400)
    assert_openai_error(await echo.post(CHAT, content=b"\xff\xfe{"), 400)


async def test_unknown_route_and_method(echo):
    assert_openai_error(await echo.get("/v1/nothing-here"), 404)
    assert_openai_error(await echo.get(CHAT), 405)


async def test_body_over_limit_is_413(echo):
    assert_openai_error(await echo.post(CHAT, json={"messages": user("x" * 70_000)}), 413)
    assert (await echo.post(CHAT, json={"messages": user("still alive")})).status_code == 200


async def test_openai_client_raises_typed_errors(echo):
    with pytest.raises(openai.BadRequestError) as info:
        await openai_client(echo).chat.completions.create(
            model="m", messages=user("x"), top_logprobs=3
        )
    assert info.value.body["param"] == "top_logprobs"


# -- chat: program failures ---------------------------------------------------------


async def test_program_exception_is_a_generic_500(faulty, caplog):
    caplog.set_level(logging.ERROR, logger="mellea.serve")
    for message in ("raise", "wrong-type"):
        error = assert_openai_error(await faulty.post(CHAT, json={"messages": user(message)}), 500)
        assert "SECRET" not in json.dumps(error)
        assert error["type"] == "server_error"
    assert "SECRET-program-detail" in caplog.text  # kept in the server log
    reply = (await faulty.post(CHAT, json={"messages": user("fine")})).json()
    assert reply["choices"][0]["message"]["content"] == "ok"


async def test_program_request_error_is_a_400(faulty):
    body = {"messages": user("bad-request")}
    assert_openai_error(await faulty.post(CHAT, json=body), 400, "messages")
    assert_openai_error(await faulty.post(CHAT, json={**body, "stream": True}), 400, "messages")


async def test_fast_failure_while_streaming_gets_a_real_status(faulty):
    body = {"messages": user("raise"), "stream": True}
    assert_openai_error(await faulty.post(CHAT, json=body), 500)


async def test_a_fast_failure_among_n_choices_is_the_status(faulty):
    body = {"messages": user("bad-request"), "stream": True, "n": 3}
    assert_openai_error(await faulty.post(CHAT, json=body), 400, "messages")


async def test_mid_stream_error_is_an_error_frame_then_done(faulty):
    response = await faulty.post(CHAT, json={"messages": user("midstream"), "stream": True})
    assert response.status_code == 200
    payloads = sse_payloads(response.text)
    assert payloads[-1] == "[DONE]"
    error = json.loads(payloads[-2])["error"]
    assert error["type"] == "server_error" and "SECRET" not in json.dumps(error)
    contents = [json.loads(p)["choices"][0]["delta"].get("content") for p in payloads[1:-2]]
    assert "".join(c or "" for c in contents) == "partial output"
    with pytest.raises(openai.APIError):
        stream = await openai_client(faulty).chat.completions.create(
            model="m", messages=user("midstream"), stream=True
        )
        async for _ in stream:
            pass


async def test_slow_program_gets_keepalives_then_its_reply(faulty):
    response = await faulty.post(CHAT, json={"messages": user("slow"), "stream": True})
    assert response.status_code == 200
    assert any(line.startswith(":") for line in response.text.splitlines()), "no keep-alive"
    payloads = sse_payloads(response.text)
    assert payloads[-1] == "[DONE]"
    assert json.loads(payloads[1])["choices"][0]["delta"]["content"] == "finally"


async def test_slow_failure_after_200_is_an_error_frame(faulty):
    response = await faulty.post(CHAT, json={"messages": user("slow-raise"), "stream": True})
    assert response.status_code == 200
    payloads = sse_payloads(response.text)
    assert payloads[-1] == "[DONE]"
    assert json.loads(payloads[-2])["error"]["type"] == "server_error"
    assert "SECRET" not in response.text


async def test_request_timeout_is_a_504_or_an_error_frame(monkeypatch):
    monkeypatch.setenv("SLOW_SECONDS", "5")
    app = app_for(PROGRAMS / "faulty.py", request_timeout=0.3, first_result_wait=0.05)
    async with client_for(app) as client:
        error = assert_openai_error(await client.post(CHAT, json={"messages": user("slow")}), 504)
        assert error["code"] == "timeout"
        response = await client.post(CHAT, json={"messages": user("slow"), "stream": True})
        assert response.status_code == 200
        payloads = sse_payloads(response.text)
        assert payloads[-1] == "[DONE]" and json.loads(payloads[-2])["error"]["code"] == "timeout"


# -- n choices ----------------------------------------------------------------------


async def test_n_choices_non_streamed(echo):
    reply = await openai_client(echo).chat.completions.create(
        model="m", messages=user("a b c"), n=3
    )
    assert [c.index for c in reply.choices] == [0, 1, 2]
    assert all(c.message.content == "a b c" for c in reply.choices)
    assert all(c.finish_reason == "stop" for c in reply.choices)
    # The prompt counts once, every choice's completion counts.
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (7, 9)
    assert reply.usage.total_tokens == 16


async def test_each_choice_runs_the_program_with_its_own_seed(echo):
    client = openai_client(echo)
    reply = await client.chat.completions.create(model="m", messages=user("!args"), n=3, seed=40)
    options = [json.loads(c.message.content)["model_options"] for c in reply.choices]
    assert [o["@@@seed@@@"] for o in options] == [40, 41, 42]
    assert all(o["temperature"] == 1.0 for o in options), "n > 1 samples by default"
    single = await client.chat.completions.create(model="m", messages=user("!args"), seed=40)
    assert "temperature" not in json.loads(single.choices[0].message.content)["model_options"]


async def test_n_choices_streamed_interleave_by_index(echo, monkeypatch):
    monkeypatch.setenv("ECHO_DELAY", "0.005")
    text = "one two three four five six"
    body = {
        "messages": user(text),
        "n": 3,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    *chunks, last = await stream_frames(echo, CHAT, body)
    assert last["choices"] == [] and last["usage"]["completion_tokens"] == 18
    order = [c["choices"][0]["index"] for c in chunks]
    switches = sum(a != b for a, b in itertools.pairwise(order))
    assert switches > 2, f"choices should interleave, got {order}"
    for index in range(3):
        mine = [c["choices"][0] for c in chunks if c["choices"][0]["index"] == index]
        assert mine[0]["delta"]["role"] == "assistant"
        assert "".join(c["delta"].get("content") or "" for c in mine) == text
        assert [c["finish_reason"] for c in mine].count("stop") == 1
        assert mine[-1]["finish_reason"] == "stop"


async def test_n_choices_with_the_openai_client_stream(echo):
    stream = await openai_client(echo).chat.completions.create(
        model="m", messages=user("x y"), n=2, stream=True
    )
    texts = {0: "", 1: ""}
    async for chunk in stream:
        for choice in chunk.choices:
            texts[choice.index] += choice.delta.content or ""
    assert texts == {0: "x y", 1: "x y"}


# -- logprobs -----------------------------------------------------------------------


async def test_chat_logprobs_non_streamed(echo):
    reply = await openai_client(echo).chat.completions.create(
        model="m", messages=user("hi there you"), logprobs=True, top_logprobs=1
    )
    content = reply.choices[0].logprobs.content
    assert [e.token for e in content] == ["hi", " there", " you"]
    assert [e.logprob for e in content] == [0.0, -0.25, -0.5]
    assert content[1].bytes == list(b" there")
    assert content[0].top_logprobs[0].token == "x" and content[0].top_logprobs[0].logprob == -9.0


async def test_chat_logprobs_streamed_join_to_the_whole(echo):
    stream = await openai_client(echo).chat.completions.create(
        model="m", messages=user("hi there you"), logprobs=True, stream=True
    )
    entries, content = [], ""
    async for chunk in stream:
        choice = chunk.choices[0]
        content += choice.delta.content or ""
        if choice.logprobs is not None and choice.logprobs.content:
            entries += choice.logprobs.content
    assert "".join(e.token for e in entries) == content == "hi there you"
    assert [e.logprob for e in entries] == [0.0, -0.25, -0.5]


async def test_logprobs_are_null_when_not_asked_for(echo):
    reply = (await echo.post(CHAT, json={"messages": user("hi there")})).json()
    assert reply["choices"][0]["logprobs"] is None


# -- /v1/completions ----------------------------------------------------------------


async def test_prompt_goes_to_serve_as_a_user_message(echo):
    reply = await openai_client(echo).completions.create(model="m", prompt="red green blue")
    assert reply.object == "text_completion" and reply.id.startswith("cmpl-")
    assert reply.choices[0].text == "red green blue"
    assert reply.choices[0].index == 0 and reply.choices[0].finish_reason == "stop"
    assert reply.usage.completion_tokens == 3


async def test_several_prompts_each_get_their_choice(echo):
    reply = await openai_client(echo).completions.create(
        model="m", prompt=["a b c d", "e f", "g"], max_tokens=2, echo=True
    )
    by_index = {c.index: c for c in reply.choices}
    assert by_index[0].text == "a b c da b" and by_index[0].finish_reason == "length"
    assert by_index[1].text == "e fe f" and by_index[1].finish_reason == "stop"
    assert by_index[2].text == "gg"
    assert reply.usage.completion_tokens == 5


async def test_streaming_several_prompts(echo):
    body = {
        "prompt": ["one two three", "four five"],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    frames = await stream_frames(echo, COMPLETIONS, body)
    texts: dict[int, str] = {0: "", 1: ""}
    finishes = {}
    for frame in frames[:-1]:
        assert frame["object"] == "text_completion"
        (choice,) = frame["choices"]
        texts[choice["index"]] += choice["text"]
        if choice["finish_reason"]:
            finishes[choice["index"]] = choice["finish_reason"]
    assert texts == {0: "one two three", 1: "four five"}
    assert finishes == {0: "stop", 1: "stop"}
    assert frames[-1]["choices"] == [] and frames[-1]["usage"]["completion_tokens"] == 5
    stream = await openai_client(echo).completions.create(model="m", prompt="x y", stream=True)
    assert "".join([c.choices[0].text async for c in stream if c.choices]) == "x y"


async def test_completions_n_per_prompt(echo):
    reply = await openai_client(echo).completions.create(
        model="m", prompt=["a b", "c"], n=2, seed=7
    )
    assert [c.index for c in reply.choices] == [0, 1, 2, 3]
    assert [c.text for c in reply.choices] == ["a b", "a b", "c", "c"]
    assert reply.usage.prompt_tokens == 14  # two prompts, each counted once
    assert reply.usage.completion_tokens == 6


async def test_completions_n_streamed(echo):
    body = {"prompt": ["p q", "r"], "n": 2, "stream": True}
    texts: dict[int, str] = {}
    for frame in await stream_frames(echo, COMPLETIONS, body):
        (choice,) = frame["choices"]
        texts[choice["index"]] = texts.get(choice["index"], "") + choice["text"]
    assert texts == {0: "p q", 1: "p q", 2: "r", 3: "r"}


async def test_completions_logprobs(echo):
    reply = await openai_client(echo).completions.create(model="m", prompt="to be or", logprobs=1)
    logprobs = reply.choices[0].logprobs
    assert logprobs.tokens == ["to", " be", " or"]
    assert logprobs.token_logprobs == [0.0, -0.25, -0.5]
    assert logprobs.text_offset == [0, 2, 5]
    assert logprobs.top_logprobs == [{"x": -9.0}] * 3


async def test_completions_logprobs_streamed(echo):
    body = {"prompt": "to be or", "logprobs": 0, "stream": True}
    tokens, offsets = [], []
    for frame in await stream_frames(echo, COMPLETIONS, body):
        logprobs = frame["choices"][0]["logprobs"]
        if logprobs:
            tokens += logprobs["tokens"]
            offsets += logprobs["text_offset"]
    assert tokens == ["to", " be", " or"] and offsets == [0, 2, 5]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"prompt": "x", "suffix": "end"}, "suffix"),
        ({"prompt": "x", "best_of": 3}, "best_of"),
        ({"prompt": "x", "n": 129}, "n"),
        ({"prompt": "x", "logprobs": 6}, "logprobs"),
        ({"prompt": [1, 2, 3]}, "prompt"),
        ({"prompt": []}, "prompt"),
        ({}, "prompt"),
        ({"prompt": "x", "max_tokens": -1}, "max_tokens"),
    ],
)
async def test_unsupported_completion_fields_are_400(echo, body, param):
    assert_openai_error(await echo.post(COMPLETIONS, json=body), 400, param)


async def test_program_serve_completion_is_used_when_defined():
    async with client_for(app_for(PROGRAMS / "reverser.py")) as client:
        reply = await openai_client(client).completions.create(
            model="m", prompt="abcdef", max_tokens=4
        )
        assert reply.choices[0].text == "fedc"
        chat = await openai_client(client).chat.completions.create(model="m", messages=user("hi"))
        assert chat.choices[0].message.content == "chat: hi"

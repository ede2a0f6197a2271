"""Plugins under ``m serve``: a block reaches the client as an OpenAI error, and what a
program registers stays in its own app."""

from __future__ import annotations

from pathlib import Path

import openai
import pytest

from cli.serve.app import create_app
from cli.serve.program import Program
from cli.serve.settings import ServeSettings
from mellea.backends.runtime import Runtime
from mellea.plugins.manager import get_plugin_manager
from tests.inprocess import client_for, openai_client, sse_payloads

PROGRAMS = Path(__file__).resolve().parents[1] / "programs"
GUARD = PROGRAMS / "plugin_guard.py"


def app_with_own_runtime(program: Path):
    return create_app(Program.load(program, Runtime()), ServeSettings(program=str(program)))


async def test_post_call_hooks_fire_when_the_server_reads_the_thunk() -> None:
    program = Program.load(GUARD, Runtime())
    app = create_app(program, ServeSettings(program=str(GUARD)))
    body = {"model": "m", "messages": [{"role": "user", "content": "green tea"}]}
    async with client_for(app) as http:
        whole = await http.post("/v1/chat/completions", json=body)
        streamed = await http.post("/v1/chat/completions", json={**body, "stream": True})
    assert whole.status_code == 200 and streamed.status_code == 200
    assert program.module.SEEN == ["green tea", "green tea"]


async def test_a_plugin_block_is_an_openai_400_with_its_code() -> None:
    async with client_for(app_with_own_runtime(GUARD)) as http:
        client = openai_client(http)
        fine = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "tell me about tea"}]
        )
        assert fine.choices[0].message.content == "tell me about tea"
        with pytest.raises(openai.BadRequestError) as caught:
            await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "the forbidden recipe"}]
            )
    error = caught.value.body
    assert error["code"] == "FORBIDDEN_TOPIC" and error["type"] == "invalid_request_error"
    assert "the request names a forbidden topic" in error["message"]
    assert "param" in error and "topic_guard" not in error["message"]


async def test_a_blocked_stream_is_refused_before_it_starts() -> None:
    body = {
        "model": "m",
        "stream": True,
        "messages": [{"role": "user", "content": "the forbidden recipe"}],
    }
    async with client_for(app_with_own_runtime(GUARD)) as http:
        reply = await http.post("/v1/chat/completions", json=body)
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"]["code"] == "FORBIDDEN_TOPIC"
    assert sse_payloads(reply.text) == []


async def test_what_a_program_registers_stays_in_its_app() -> None:
    guarded = app_with_own_runtime(GUARD)
    other = app_with_own_runtime(PROGRAMS / "plugin_free.py")
    assert len(guarded.state.runtime.plugins.handlers()) == 2
    assert other.state.runtime.plugins.handlers() == []
    assert get_plugin_manager().handlers() == []  # nor does it leak into the process's
    async with client_for(other) as http:
        reply = await http.post(
            "/v1/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "forbidden words"}]},
        )
    assert reply.status_code == 200, reply.text
    assert reply.json()["choices"][0]["message"]["content"] == "forbidden words"

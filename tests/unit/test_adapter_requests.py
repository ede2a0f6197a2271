"""A request whose ``model`` names a ``--lora`` adapter, over the wire in-process.

The tiny random Llama with two random PEFT LoRAs and an aLoRA (``tests/lora_reference.py``)
served by an ordinary program (``start_session()``, ``ainstruct``: it picks no model)
and by one that routes by ``client_options["model"]``: every reply equals PEFT's greedy
text under the adapter the request named (the base model's for the program's name or a
name that selects nothing), on chat, completions and Responses, streamed and not; the
reply's ``model`` says what served it, and ``mellea.model_calls`` the adapter each call
used. The same over a real ``m serve``: ``tests/e2e/test_lora_serve.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi import FastAPI

from cli.serve.app import build_app
from cli.serve.settings import ServeSettings
from tests.inprocess import client_for, openai_client
from tests.lora_reference import ALORA, MAX_TOKENS, QUESTION, AdapterModel, adapter_model
from tests.server import PROGRAMS

PLAIN = "plain_session"  # the ordinary program's name
UNKNOWN = "gpt-4o"  # a model name that selects nothing here
MESSAGES = [{"role": "user", "content": QUESTION}]
GREEDY: dict[str, Any] = {"max_tokens": MAX_TOKENS, "temperature": 0}
ENDS = ("response.completed", "response.incomplete")  # a Responses stream's last event


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> AdapterModel:
    return adapter_model(tmp_path_factory.mktemp("adapters"))


def app_serving(program: str, tiny: AdapterModel, **settings: Any) -> Iterator[FastAPI]:
    """The app of ``program`` with every adapter (``--lora``), its engines shut down after."""
    app = build_app(
        ServeSettings(
            program=str(PROGRAMS / program),
            dtype="float32",
            lora=tiny.lora_flags(),
            playground=False,
            **settings,
        )
    )
    try:
        yield app
    finally:
        app.state.runtime.shutdown()


@pytest.fixture(scope="module")
def plain(tiny: AdapterModel) -> Iterator[FastAPI]:
    """The ordinary program on the served model (``--model``)."""
    yield from app_serving(f"{PLAIN}.py", tiny, model=str(tiny.model_dir))


@pytest.fixture(scope="module")
def routing(tiny: AdapterModel) -> Iterator[FastAPI]:
    """The program that starts a session on the adapter a request's model names."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LOCAL_MODEL", str(tiny.model_dir))
        yield from app_serving("lora_routing.py", tiny)


def served_by(model: str, tiny: AdapterModel, program: str) -> tuple[str | None, str]:
    """The adapter a request for ``model`` runs with, and the ``model`` its reply names."""
    return (model, model) if model in tiny.adapters else (None, program)


def adapters_used(report: dict[str, Any]) -> list[str | None]:
    return [call.get("adapter") for call in report["model_calls"]]


async def test_models_lists_the_program_and_the_adapters(plain: FastAPI, tiny: AdapterModel):
    async with client_for(plain) as client:
        listed = (await client.get("/v1/models")).json()["data"]
    assert [m["id"] for m in listed] == [PLAIN, *tiny.adapters]


@pytest.mark.parametrize("model", [PLAIN, "a1", "a2", ALORA, UNKNOWN])
async def test_an_ordinary_program_answers_with_the_adapter_a_request_names(
    plain: FastAPI, tiny: AdapterModel, model: str
):
    adapter, named = served_by(model, tiny, PLAIN)
    want = tiny.expected[adapter]
    async with client_for(plain) as http:
        client = openai_client(http)
        chat = await client.chat.completions.create(model=model, messages=MESSAGES, **GREEDY)
        assert (chat.choices[0].message.content, chat.model) == (want, named)
        assert adapters_used(chat.choices[0].model_extra["mellea"]) == [adapter]

        stream = await client.chat.completions.create(
            model=model, messages=MESSAGES, stream=True, **GREEDY
        )
        chunks = [chunk async for chunk in stream]
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == want
        assert {c.model for c in chunks} == {named}

        text = await client.completions.create(model=model, prompt=QUESTION, **GREEDY)
        assert (text.choices[0].text, text.model) == (want, named)
        assert adapters_used(text.choices[0].model_extra["mellea"]) == [adapter]

        stream = await client.completions.create(
            model=model, prompt=QUESTION, stream=True, **GREEDY
        )
        chunks = [chunk async for chunk in stream]
        assert "".join(c.choices[0].text for c in chunks if c.choices) == want
        assert {c.model for c in chunks} == {named}

        options = {"max_output_tokens": MAX_TOKENS, "temperature": 0}
        response = await client.responses.create(model=model, input=QUESTION, **options)
        assert (response.output_text, response.model) == (want, named)
        assert adapters_used(response.model_extra["mellea"]) == [adapter]

        stream = await client.responses.create(model=model, input=QUESTION, stream=True, **options)
        events = [event async for event in stream]
        deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
        (done,) = [e.response for e in events if e.type in ENDS]
        assert (deltas, done.output_text, done.model) == (want, want, named)


@pytest.mark.parametrize("model", ["lora_routing", "a1", "a2"])
async def test_a_routing_program_keeps_its_choice(routing: FastAPI, tiny: AdapterModel, model):
    """It starts a session on the adapter itself (chat carries ``client_options``); on
    completions, which give a program none, its base session runs the request's adapter."""
    adapter, named = served_by(model, tiny, "lora_routing")
    want = tiny.expected[adapter]
    async with client_for(routing) as http:
        client = openai_client(http)
        chat = await client.chat.completions.create(model=model, messages=MESSAGES, **GREEDY)
        assert (chat.choices[0].message.content, chat.model) == (want, named)
        stream = await client.chat.completions.create(
            model=model, messages=MESSAGES, stream=True, **GREEDY
        )
        chunks = [chunk async for chunk in stream]
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == want
        text = await client.completions.create(model=model, prompt=QUESTION, **GREEDY)
        assert (text.choices[0].text, text.model) == (want, named)


async def test_concurrent_clients_of_the_base_and_two_adapters_each_get_their_own(
    plain: FastAPI, tiny: AdapterModel
):
    models = [PLAIN, "a1", "a2", ALORA] * 3

    async def one(model: str, streamed: bool) -> tuple[str, str]:
        async with client_for(plain) as http:  # a client of its own
            client = openai_client(http)
            if not streamed:
                chat = await client.chat.completions.create(
                    model=model, messages=MESSAGES, **GREEDY
                )
                return chat.choices[0].message.content or "", chat.model
            stream = await client.chat.completions.create(
                model=model, messages=MESSAGES, stream=True, **GREEDY
            )
            chunks = [chunk async for chunk in stream]
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            return text, chunks[0].model

    replies = await asyncio.gather(*(one(m, i % 2 == 1) for i, m in enumerate(models)))
    wanted = [
        (tiny.expected[served_by(m, tiny, PLAIN)[0]], served_by(m, tiny, PLAIN)[1]) for m in models
    ]
    assert replies == wanted

"""Upstream-style programs served by `m serve`, driven by the openai client, streamed and not.

The programs reach a stand-in model server (``lib_recorder.py``, another `m serve`)
through the ``openai`` and ``ollama`` backends, so these tests need no model.
"""

from __future__ import annotations

from pathlib import Path

import openai
import pytest

from tests.server import serve

pytestmark = pytest.mark.e2e

PROGRAMS = Path(__file__).resolve().parent / "programs"

# Streamed too: these programs return thunks they have already consumed, which the
# server must still serve whole.
STREAM_OR_NOT = [False, True]


@pytest.fixture(scope="module")
def recorder():
    with serve(PROGRAMS / "lib_recorder.py") as server:
        yield server


def _program(name: str, recorder) -> object:
    env = {"UPSTREAM_BASE_URL": f"{recorder.base_url}/v1", "UPSTREAM_HOST": recorder.base_url}
    return serve(PROGRAMS / name, env=env)


@pytest.fixture(scope="module")
def paths(recorder):
    with _program("lib_paths.py", recorder) as server:
        yield server


@pytest.fixture(scope="module")
def routing(recorder):
    with _program("lib_model_routing.py", recorder) as server:
        yield server


@pytest.fixture(scope="module")
def context(recorder):
    with _program("lib_context.py", recorder) as server:
        yield server


def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="x", max_retries=0)


def ask(server, text: str, model: str = "m") -> str:
    reply = client(server).chat.completions.create(
        model=model, messages=[{"role": "user", "content": text}]
    )
    return reply.choices[0].message.content


def ask_streamed(server, text: str, model: str = "m") -> list[str]:
    chunks = client(server).chat.completions.create(
        model=model, messages=[{"role": "user", "content": text}], stream=True
    )
    return [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]


def test_module_paths_program_sends_the_identifiers_openai_name(paths):
    assert ask(paths, "hello there") == "model=ibm-granite/granite-4.1-8b | user | hello there"


def test_module_paths_program_streams_by_default_as_upstream(paths):
    pieces = ask_streamed(paths, "one two three four")
    assert "".join(pieces) == "model=ibm-granite/granite-4.1-8b | user | one two three four"
    assert len(pieces) > 3  # streamed as it arrived, not in one piece


@pytest.mark.parametrize("stream", STREAM_OR_NOT)
def test_model_routing_sends_the_ollama_name_of_the_chosen_identifier(routing, stream):
    def run(text: str, model: str) -> str:
        return "".join(ask_streamed(routing, text, model)) if stream else ask(routing, text, model)

    assert run("What is 2 + 2?", "granite4.1:8b") == "model=granite4.1:8b | user | What is 2 + 2?"
    assert run("hi", "some-unknown-model") == "model=granite4.1:3b | user | hi"


def test_context_calls_over_a_module_level_chat_session(context):
    first = ask(context, "alpha")
    assert first.startswith("input=alpha spans=2 output=model=context-model | user | alpha")
    second = ask(context, "beta")
    # the model saw the earlier turn; the window (4 spans) keeps two turns
    assert second.startswith("input=beta spans=4 output=model=context-model | user,assistant,user")
    third = "".join(ask_streamed(context, "gamma"))
    assert third.startswith("input=gamma spans=4 ")


@pytest.mark.parametrize("stream", STREAM_OR_NOT)
def test_returning_the_contexts_last_output_serves_its_text(context, stream):
    text = "!thunk delta"
    reply = "".join(ask_streamed(context, text)) if stream else ask(context, text)
    assert reply.startswith("model=context-model | ") and reply.endswith("| delta")

"""A served ``@generative`` program on the bundled model: typed answers, streamed and not."""

from __future__ import annotations

import re
from pathlib import Path

import openai
import pytest

from tests.server import serve

pytestmark = [pytest.mark.e2e, pytest.mark.model]

PROGRAM = Path(__file__).resolve().parent / "programs" / "lib_generative.py"


@pytest.fixture(scope="module")
def server():
    with serve(PROGRAM) as running:
        yield running


def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="x", max_retries=0, timeout=300)


def ask(server, text: str, stream: bool) -> str:
    messages = [{"role": "user", "content": text}]
    if not stream:
        reply = client(server).chat.completions.create(model="m", messages=messages, temperature=0)
        return reply.choices[0].message.content
    chunks = client(server).chat.completions.create(
        model="m", messages=messages, temperature=0, stream=True
    )
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


@pytest.mark.parametrize("stream", [False, True])
def test_sync_generative_answers_with_one_of_the_annotated_labels(server, stream):
    reply = ask(server, "I love this phone, it is wonderful.", stream)
    assert reply in ("sentiment=positive", "sentiment=negative")


@pytest.mark.parametrize("stream", [False, True])
def test_async_generative_returns_the_annotated_type(server, stream):
    reply = ask(server, "count: apples, pears, plums", stream)
    assert re.fullmatch(r"count=-?\d+ \(int\)", reply), reply

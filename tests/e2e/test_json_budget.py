"""Through the wire (issue 23): a json_schema reply that ``max_tokens`` cuts short is
still valid JSON of the schema, and says ``finish_reason: "length"``. The tiny random
model never closes a string by itself, so every such reply is closed by the budget."""

from __future__ import annotations

import json
import os

import openai
import pytest

from tests.engine.conftest import make_tiny_llama
from tests.engine.test_budget_guard import Report, Small
from tests.server import PROGRAMS, serve

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tiny = make_tiny_llama(tmp_path_factory.mktemp("budget-tiny"))
    env = {**os.environ, "LOCAL_MODEL": str(tiny)}
    with serve(PROGRAMS / "local_model.py", env=env) as running:
        yield running


def response_format(model) -> dict:
    schema = model.model_json_schema()
    return {"type": "json_schema", "json_schema": {"name": model.__name__, "schema": schema}}


@pytest.mark.parametrize(("model", "max_tokens"), [(Small, 16), (Report, 40)])
def test_a_reply_cut_by_max_tokens_is_whole_json(server, model, max_tokens):
    client = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="x", max_retries=0)
    reply = client.chat.completions.create(
        model="local",
        messages=[{"role": "user", "content": "Write the report."}],
        response_format=response_format(model),
        max_tokens=max_tokens,
        temperature=1.0,
        seed=7,
    )
    choice = reply.choices[0]
    assert choice.finish_reason == "length", choice.message.content
    assert reply.usage.completion_tokens <= max_tokens
    model.model_validate(json.loads(choice.message.content))


def test_a_streamed_reply_cut_by_max_tokens_is_whole_json(server):
    client = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="x", max_retries=0)
    chunks = list(
        client.chat.completions.create(
            model="local",
            messages=[{"role": "user", "content": "Write the report."}],
            response_format=response_format(Report),
            max_tokens=36,
            temperature=1.0,
            seed=11,
            stream=True,
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    reasons = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert reasons[-1] == "length", text
    Report.model_validate(json.loads(text))

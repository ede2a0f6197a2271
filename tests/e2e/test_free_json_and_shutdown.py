"""Over a loopback socket, on the default model (issue 21): a schema-free JSON object
that the model would nest without end closes as valid JSON, and a SIGTERM of `m serve`
after structured and plain requests prints no nanobind leak report."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.engine.test_constraints import json_depth, nesting_bias
from tests.server import EXAMPLES, serve

pytestmark = [pytest.mark.e2e, pytest.mark.model]


@pytest.fixture(scope="module")
def nesting():
    """The logit bias (token id -> bias, as the wire takes it) that makes the default
    model nest objects."""
    from transformers import AutoTokenizer

    from mellea.engine.loader import resolve_model

    tokenizer = AutoTokenizer.from_pretrained(resolve_model(None))
    return {str(token): bias for token, bias in nesting_bias(tokenizer).items()}


@pytest.mark.parametrize(
    "response_format",
    [
        {"type": "json_object"},
        {"type": "json_schema", "json_schema": {"name": "advice", "schema": {"type": "object"}}},
    ],
    ids=["json_object", "free_schema"],
)
def test_a_free_object_closes_and_a_sigterm_leaks_nothing(nesting, response_format):
    from mellea.engine.constraints import FREE_DEPTH

    with serve(EXAMPLES / "hello.py") as server:
        body = {
            "messages": [{"role": "user", "content": "Give me investment advice as JSON."}],
            "max_tokens": 200,
            "temperature": 0,
            "logit_bias": nesting,
            "response_format": response_format,
        }
        reply = httpx.post(f"{server.base_url}/v1/chat/completions", json=body, timeout=120)
        assert reply.status_code == 200, reply.text
        choice = reply.json()["choices"][0]
        text = choice["message"]["content"]
        assert choice["finish_reason"] == "stop", text[:300]
        value = json.loads(text)
        assert isinstance(value, dict) and json_depth(value) <= FREE_DEPTH
    # serve() sent SIGTERM and waited: the whole log is written
    assert server.process.returncode == 0, server.log[-2000:]
    assert "nanobind" not in server.log, server.log[-3000:]

"""``/tokenize`` and ``/detokenize`` over a real ``m serve`` (the tiny random Llama, loaded
by the program at import): behind the API key like every route, and counting exactly
the prompt tokens a chat reply then reports. The routes' cases: ``tests/unit/test_wire_tokenize.py``.
"""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.engine.conftest import make_tiny_llama
from tests.server import PROGRAMS, serve

pytestmark = pytest.mark.e2e

KEY = "tokenize-test-key"
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there."}]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tiny = make_tiny_llama(tmp_path_factory.mktemp("tokenize-e2e"))
    program = PROGRAMS / "chat_passthrough.py"
    with serve(program, "--api-key", KEY, env={"LOCAL_MODEL": str(tiny)}) as running:
        yield running


def test_the_routes_need_the_api_key(server):
    for path, body in [("/tokenize", {"prompt": "hi"}), ("/detokenize", {"tokens": [1]})]:
        response = httpx.post(f"{server.base_url}{path}", json=body, timeout=30)
        assert response.status_code == 401, response.text
        assert response.json()["error"]["type"] == "authentication_error"


def test_counted_tokens_are_the_prompt_tokens_of_the_reply(server):
    headers = {"authorization": f"Bearer {KEY}"}
    counted = httpx.post(
        f"{server.base_url}/tokenize", json={"messages": MESSAGES}, headers=headers, timeout=30
    ).json()
    client = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key=KEY, max_retries=0)
    reply = client.chat.completions.create(model="m", messages=MESSAGES, max_tokens=2)
    assert reply.usage.prompt_tokens == counted["count"] == len(counted["tokens"])
    text = httpx.post(
        f"{server.base_url}/detokenize",
        json={"tokens": counted["tokens"]},
        headers=headers,
        timeout=30,
    ).json()
    assert "Hi there." in text["prompt"] and text["prompt"] == text["content"]
    assert "Traceback" not in server.log

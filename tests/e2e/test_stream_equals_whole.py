"""Over a real socket with the ``openai`` client: for the same seed, a streamed reply and a
whole one are the same reply, on every endpoint, from a sampling local model.

A tiny random Llama samples at temperature 1, so the text depends on the seed; the
stream is joined back together and compared with the whole reply.
"""

from __future__ import annotations

import os

import openai
import pytest

from tests.engine.conftest import make_tiny_llama
from tests.server import PROGRAMS, serve

pytestmark = pytest.mark.e2e

SEEDS = (3, 11)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    model = make_tiny_llama(tmp_path_factory.mktemp("stream-whole"))
    with serve(PROGRAMS / "local_model.py", env={**os.environ, "LOCAL_MODEL": str(model)}) as s:
        yield s


def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="x", max_retries=0)


@pytest.mark.parametrize("seed", SEEDS)
def test_chat_same_seed_same_reply(server, seed):
    ask = {
        "model": "m",
        "messages": [{"role": "user", "content": "Tell me a story"}],
        "max_tokens": 12,
        "temperature": 1.0,
        "seed": seed,
        "n": 2,
    }
    whole = client(server).chat.completions.create(**ask)
    texts: dict[int, str] = {}
    finish: dict[int, str] = {}
    usage = None
    for chunk in client(server).chat.completions.create(
        **ask, stream=True, stream_options={"include_usage": True}
    ):
        usage = chunk.usage or usage
        for choice in chunk.choices:
            texts[choice.index] = texts.get(choice.index, "") + (choice.delta.content or "")
            finish[choice.index] = choice.finish_reason or finish.get(choice.index)
    assert {c.index: c.message.content for c in whole.choices} == texts
    assert {c.index: c.finish_reason for c in whole.choices} == finish
    assert all(texts.values())
    # (cached_tokens may differ: the second request finds the first one's prompt cached)
    assert (usage.prompt_tokens, usage.completion_tokens) == (
        whole.usage.prompt_tokens,
        whole.usage.completion_tokens,
    )
    assert usage.completion_tokens > 0


@pytest.mark.parametrize("seed", SEEDS)
def test_completions_same_seed_same_reply(server, seed):
    ask = {"model": "m", "prompt": "Once upon a time", "max_tokens": 12, "seed": seed}
    ask |= {"temperature": 1.0, "n": 2, "logprobs": 1}
    whole = client(server).completions.create(**ask)
    texts: dict[int, str] = {}
    tokens: dict[int, list[str]] = {}
    for chunk in client(server).completions.create(**ask, stream=True):
        for choice in chunk.choices:
            texts[choice.index] = texts.get(choice.index, "") + choice.text
            tokens.setdefault(choice.index, []).extend(
                choice.logprobs.tokens if choice.logprobs else []
            )
    assert {c.index: c.text for c in whole.choices} == texts
    assert {c.index: c.logprobs.tokens for c in whole.choices} == tokens
    assert all(texts.values())


def test_responses_same_reply(server):
    """The Responses API takes no seed: greedy decoding makes the reply repeatable."""
    ask = {"model": "m", "input": "Tell me a story", "max_output_tokens": 12, "temperature": 0}
    whole = client(server).responses.create(**ask)
    deltas, final = [], None
    for event in client(server).responses.create(**ask, stream=True):
        if event.type == "response.output_text.delta":
            deltas.append(event.delta)
        if event.type in ("response.completed", "response.incomplete"):
            final = event.response
    assert final is not None
    assert "".join(deltas) == final.output_text == whole.output_text
    assert whole.output_text
    assert final.status == whole.status
    assert final.usage.output_tokens == whole.usage.output_tokens

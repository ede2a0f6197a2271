"""Every family the fast engine runs, served by `m serve` with its default flags, says
what transformers says: the tiny random models of tests/engine/test_families.py,
greedy, over a loopback socket (issue 21: ``--dtype auto`` must not change an
unquantized checkpoint's answers)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import openai
import pytest
import torch

from tests.engine.conftest import hf_greedy, make_tiny_llama
from tests.engine.test_families import FAMILY_CONFIGS, build_family
from tests.server import PROGRAMS, serve

pytestmark = pytest.mark.e2e
NEW_TOKENS = 5
QUESTION = "Name three colours of the rainbow."


@pytest.fixture(scope="module")
def family_models(tmp_path_factory) -> dict[str, tuple[Path, object]]:
    """Family name -> (model directory with the default model's tokenizer and chat
    template, its transformers model)."""
    tiny_model_dir = make_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))
    models = {}
    for name in FAMILY_CONFIGS:
        path = tmp_path_factory.mktemp(f"serve-{name}")
        hf = build_family(name, path, tiny_model_dir)
        for template in tiny_model_dir.glob("*.jinja"):
            shutil.copy(template, path / template.name)
        models[name] = (path, hf)
    return models


@pytest.fixture(scope="module")
def server(family_models):
    dirs = {name: str(path) for name, (path, _) in family_models.items()}
    with serve(PROGRAMS / "family_chat.py", env={"FAMILY_MODELS": json.dumps(dirs)}) as running:
        yield running


@pytest.mark.parametrize("name", list(FAMILY_CONFIGS))
def test_default_flags_serve_transformers_greedy_text(name, family_models, server):
    from transformers import AutoTokenizer

    path, hf = family_models[name]
    tokenizer = AutoTokenizer.from_pretrained(path)
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": QUESTION}], add_generation_prompt=True, tokenize=True
    )
    if not isinstance(prompt, list):  # a BatchEncoding in newer transformers
        prompt = prompt["input_ids"]
    with torch.no_grad():
        want = tokenizer.decode(hf_greedy(hf, list(prompt), NEW_TOKENS), skip_special_tokens=True)
    client = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="x", max_retries=0)
    reply = client.chat.completions.create(
        model="m",
        messages=[{"role": "system", "content": name}, {"role": "user", "content": QUESTION}],
        max_tokens=NEW_TOKENS,
        temperature=0,
    )
    assert reply.choices[0].message.content == want
    assert reply.usage.prompt_tokens == len(prompt)

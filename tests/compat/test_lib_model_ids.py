"""ModelIdentifier: upstream's constants, and each backend picking the name it needs."""

from __future__ import annotations

import dataclasses

import pytest

from mellea.backends import model_ids
from mellea.backends.model_ids import (
    IBM_GRANITE_4_1_3B,
    IBM_GRANITE_4_1_8B,
    IBM_GRANITE_4_HYBRID_MICRO,
    OPENAI_GPT_5_1,
    ModelIdentifier,
    backend_model_name,
)
from mellea.backends.registry import create_backend


class FakeEngine:
    """Just enough of an engine for a backend to be built without loading a model."""

    model_id = "fake"
    max_model_len = 2048
    tokenizer = None


def test_identifier_has_upstreams_fields_and_is_frozen():
    names = {f.name for f in dataclasses.fields(ModelIdentifier)}
    assert {
        "hf_model_name",
        "ollama_name",
        "watsonx_name",
        "mlx_name",
        "openai_name",
        "hf_tokenizer_name",
        "bedrock_name",
        "context_length",
    } <= names
    with pytest.raises(dataclasses.FrozenInstanceError):
        IBM_GRANITE_4_1_3B.hf_model_name = "x"  # type: ignore[misc]


def test_granite_constants_name_granite_models():
    assert IBM_GRANITE_4_1_3B.hf_model_name == "ibm-granite/granite-4.1-3b"
    assert IBM_GRANITE_4_1_3B.ollama_name == "granite4.1:3b"
    assert IBM_GRANITE_4_1_8B.ollama_name == "granite4.1:8b"
    assert IBM_GRANITE_4_HYBRID_MICRO.hf_model_name == "ibm-granite/granite-4.0-h-micro"
    constants = [v for v in vars(model_ids).values() if isinstance(v, ModelIdentifier)]
    assert len(constants) > 40


def test_each_backend_picks_its_name():
    assert backend_model_name(IBM_GRANITE_4_1_3B, "local") == "ibm-granite/granite-4.1-3b"
    assert backend_model_name(IBM_GRANITE_4_1_3B, "ollama") == "granite4.1:3b"
    # openai: openai_name when there is one, else the HF name (what vLLM serves by default)
    assert backend_model_name(OPENAI_GPT_5_1, "openai") == "gpt-5.1"
    assert backend_model_name(IBM_GRANITE_4_1_3B, "openai") == "ibm-granite/granite-4.1-3b"
    assert backend_model_name("plain-name", "ollama") == "plain-name"
    assert backend_model_name(None, "local") is None


def test_an_identifier_without_the_needed_name_says_which():
    with pytest.raises(ValueError, match="ollama_name"):
        backend_model_name(OPENAI_GPT_5_1, "ollama")


def test_local_backend_resolves_an_identifier_to_its_hf_name():
    backend = create_backend("local", IBM_GRANITE_4_1_3B, engine=FakeEngine())
    assert backend.model_id == "ibm-granite/granite-4.1-3b"


def test_openai_and_ollama_backends_resolve_identifiers():
    from mellea.backends.ollama import OllamaModelBackend
    from mellea.backends.openai import OpenAIBackend

    openai_backend = OpenAIBackend(model_id=IBM_GRANITE_4_1_8B, base_url="http://127.0.0.1:1/v1")
    assert openai_backend.model_id == "ibm-granite/granite-4.1-8b"
    ollama = OllamaModelBackend(IBM_GRANITE_4_1_8B, base_url="http://127.0.0.1:11434")
    assert ollama.model_id == "granite4.1:8b"
    assert ollama.base_url == "http://127.0.0.1:11434/v1"
    assert create_backend("ollama").model_id == "granite4.1:3b"  # upstream's default model


def test_openai_backend_takes_upstreams_positional_arguments():
    from mellea.backends.openai import OpenAIBackend
    from mellea.formatters import TemplateFormatter

    formatter = TemplateFormatter(model_id=IBM_GRANITE_4_1_3B)
    backend = OpenAIBackend(
        "my-model", formatter, "http://127.0.0.1:1/v1", {"temperature": 0.1}, api_key="k"
    )
    assert backend.model_id == "my-model"
    assert backend.formatter is formatter
    assert backend.base_url == "http://127.0.0.1:1/v1"
    assert backend.model_options == {"temperature": 0.1}


def test_upstreams_hf_backend_name_runs_on_the_local_engine():
    from mellea.backends.huggingface import LocalHFBackend

    backend = LocalHFBackend(IBM_GRANITE_4_HYBRID_MICRO, engine=FakeEngine())
    assert backend.model_id == "ibm-granite/granite-4.0-h-micro"


def test_start_session_resolves_an_identifier_for_the_local_backend():
    import mellea

    session = mellea.start_session(model_id=model_ids.QWEN3_0_6B, engine=FakeEngine())
    assert session.backend.model_id == "Qwen/Qwen3-0.6B"

"""The LiteLLM, Bedrock and watsonx backends, against stand-ins for their client
packages (the real ones are optional), and the errors that name a missing package."""

from __future__ import annotations

import importlib.util
import sys
import types
from typing import Any

import pytest

from mellea.backends.model_ids import ModelIdentifier
from mellea.backends.tools import MelleaTool
from mellea.core.model_options import ModelOption
from mellea.stdlib.session import MelleaSession


def add(a: int, b: int) -> int:
    """Add two numbers.

    Args:
        a: One.
        b: The other.
    """
    return a + b


@pytest.fixture
def fake_litellm(monkeypatch):
    module = types.ModuleType("litellm")
    module.calls = []

    class BadRequestError(Exception):
        pass

    async def acompletion(**kwargs: Any):
        module.calls.append(kwargs)

        async def chunks():
            yield {"choices": [{"index": 0, "delta": {"content": "Hel"}}]}
            yield {"choices": [{"index": 0, "delta": {"content": "lo"}}]}
            yield {
                "choices": [
                    {
                        "index": 0,
                        "delta": {
                            "tool_calls": [
                                {
                                    "index": 0,
                                    "id": "c1",
                                    "function": {"name": "add", "arguments": '{"a": 2,'},
                                }
                            ]
                        },
                    }
                ]
            }
            yield {
                "choices": [
                    {
                        "index": 0,
                        "delta": {
                            "tool_calls": [{"index": 0, "function": {"arguments": ' "b": 3}'}}]
                        },
                        "finish_reason": "tool_calls",
                    }
                ],
                "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
            }

        return chunks()

    module.acompletion = acompletion
    module.BadRequestError = BadRequestError
    monkeypatch.setitem(sys.modules, "litellm", module)
    return module


def test_litellm_backend_streams_text_usage_and_tool_calls(fake_litellm):
    from mellea.backends.litellm import LiteLLMBackend

    backend = LiteLLMBackend(
        "ollama_chat/x", base_url="http://h:1", model_options={"num_retries": 2}
    )
    m = MelleaSession(backend)
    thunk = m.instruct(
        "hi",
        strategy=None,
        tool_calls=True,
        model_options={
            ModelOption.TOOLS: [MelleaTool.from_callable(add)],
            ModelOption.MAX_NEW_TOKENS: 9,
        },
    )
    assert thunk.value == "Hello" and thunk.usage["total_tokens"] == 7
    call = thunk.tool_calls[0]
    assert call.name == "add" and call.args == {"a": 2, "b": 3} and call.call_func() == 5
    sent = fake_litellm.calls[0]
    assert (
        sent["model"] == "ollama_chat/x"
        and sent["stream"] is True
        and sent["api_base"] == "http://h:1"
    )
    assert sent["max_tokens"] == 9 and sent["num_retries"] == 2
    assert sent["tools"][0]["function"]["name"] == "add"


def test_bedrock_helpers(fake_litellm, monkeypatch):
    from mellea.backends import bedrock

    monkeypatch.setenv("AWS_BEARER_TOKEN_BEDROCK", "tok")
    monkeypatch.delenv("AWS_REGION_NAME", raising=False)
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    monkeypatch.delenv("AWS_REGION", raising=False)
    with pytest.raises(ValueError, match="region"):
        bedrock.create_bedrock_litellm_backend("bedrock/m")
    ident = ModelIdentifier(bedrock_litellm_name="bedrock/converse/x", bedrock_name="x.v1")
    backend = bedrock.create_bedrock_litellm_backend(ident, region="eu-west-1", num_retries=1)
    assert backend.model_id == "bedrock/converse/x"
    assert backend.model_options == {"num_retries": 1, "aws_region_name": "eu-west-1"}
    openai_backend = bedrock.create_bedrock_openai_backend(ident, region="us-west-2")
    assert openai_backend.model_id == "x.v1"
    assert openai_backend.base_url == "https://bedrock-mantle.us-west-2.api.aws/v1"
    with pytest.raises(ValueError, match="bedrock_name"):
        bedrock.create_bedrock_openai_backend(ModelIdentifier(hf_model_name="a/b"))
    monkeypatch.delenv("AWS_BEARER_TOKEN_BEDROCK")
    with pytest.raises(RuntimeError, match="AWS_BEARER_TOKEN_BEDROCK"):
        bedrock.create_bedrock_openai_backend("x.v1")


def test_missing_client_packages_are_named(monkeypatch):
    if importlib.util.find_spec("litellm") is None:
        from mellea.backends.litellm import LiteLLMBackend

        with pytest.raises(ImportError, match="'litellm'"):
            LiteLLMBackend()
    if importlib.util.find_spec("ibm_watsonx_ai") is None:
        from mellea.backends.watsonx import WatsonxAIBackend

        with pytest.raises(ImportError, match="ibm-watsonx-ai"), pytest.warns(DeprecationWarning):
            WatsonxAIBackend()


def test_watsonx_backend_calls_the_sdk(monkeypatch):
    sdk = types.ModuleType("ibm_watsonx_ai")
    models = types.ModuleType("ibm_watsonx_ai.foundation_models")
    seen: dict[str, Any] = {}

    class Credentials:
        def __init__(self, url: str, api_key: str) -> None:
            seen["credentials"] = (url, api_key)

    class ModelInference:
        def __init__(self, model_id: str, credentials: Any, project_id: str) -> None:
            seen["model"] = (model_id, project_id)

        def chat(self, messages, params, tools):
            seen["chat"] = {"messages": messages, "params": params, "tools": tools}
            return {
                "choices": [{"message": {"content": "hi there"}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
            }

    sdk.Credentials = Credentials
    models.ModelInference = ModelInference
    sdk.foundation_models = models
    monkeypatch.setitem(sys.modules, "ibm_watsonx_ai", sdk)
    monkeypatch.setitem(sys.modules, "ibm_watsonx_ai.foundation_models", models)
    from mellea.backends.watsonx import WatsonxAIBackend

    with pytest.warns(DeprecationWarning):
        backend = WatsonxAIBackend(base_url="https://wx", api_key="k", project_id="p")
    assert seen["model"] == ("ibm/granite-4-h-small", "p") and seen["credentials"] == (
        "https://wx",
        "k",
    )
    thunk = MelleaSession(backend).instruct(
        "hello", strategy=None, model_options={ModelOption.MAX_NEW_TOKENS: 4}
    )
    assert thunk.value == "hi there" and thunk.usage["total_tokens"] == 5
    assert seen["chat"]["params"] == {"max_tokens": 4} and seen["chat"]["messages"][-1][
        "content"
    ].startswith("hello")


def test_start_session_knows_litellm(fake_litellm):
    import mellea

    m = mellea.start_session("litellm", model_id="openai/gpt-x")
    assert m.backend.model_id == "openai/gpt-x"
    with pytest.raises(ValueError, match="litellm"):
        mellea.start_session("nosuch")

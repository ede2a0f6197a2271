"""IBM watsonx.ai backend through the ``ibm-watsonx-ai`` package (a clear ImportError
names it when missing). Upstream deprecates it in favour of LiteLLM or OpenAI."""

from __future__ import annotations

import asyncio
import os
import warnings
from collections.abc import AsyncIterator
from typing import Any

from mellea.backends.base import Backend, openai_tools
from mellea.backends.tool_parsing import tool_functions
from mellea.core.model_options import ModelOption
from mellea.core.optional import import_optional
from mellea.core.thunk import GenerationChunk, ModelOutputThunk

WATSONX_MISSING = "WatsonxAIBackend needs the 'ibm-watsonx-ai' package; install it with `pip install ibm-watsonx-ai`"
DEFAULT_MODEL = "ibm/granite-4-h-small"

_PARAMS = {
    ModelOption.MAX_NEW_TOKENS: "max_tokens",
    "max_tokens": "max_tokens",
    ModelOption.TEMPERATURE: "temperature",
    ModelOption.TOP_P: "top_p",
    ModelOption.SEED: "seed",
    ModelOption.STOP_SEQUENCES: "stop",
}


def _sdk() -> Any:
    sdk = import_optional("ibm_watsonx_ai", WATSONX_MISSING)
    models = import_optional("ibm_watsonx_ai.foundation_models", WATSONX_MISSING)
    return sdk.Credentials, models.ModelInference


class WatsonxAIBackend(Backend):
    """Chat with a watsonx.ai model (``WATSONX_URL``, ``WATSONX_API_KEY`` and
    ``WATSONX_PROJECT_ID`` fill what is not passed)."""

    def __init__(
        self,
        model_id: Any = DEFAULT_MODEL,
        formatter: Any = None,
        base_url: str | None = None,
        model_options: dict[str, Any] | None = None,
        *,
        api_key: str | None = None,
        project_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        from mellea.backends.model_ids import backend_model_name

        warnings.warn(
            "the watsonx backend is deprecated upstream; use the LiteLLM or OpenAI backends",
            DeprecationWarning,
            stacklevel=2,
        )
        credentials_cls, inference_cls = _sdk()
        super().__init__(model_options)
        self.model_id = backend_model_name(model_id, "watsonx") or str(model_id)
        self.formatter = formatter
        self._url = base_url or os.environ.get("WATSONX_URL")
        self._api_key = api_key or os.environ.get("WATSONX_API_KEY")
        self._project_id = project_id or os.environ.get("WATSONX_PROJECT_ID")
        if not (self._url and self._api_key and self._project_id):
            raise ValueError(
                "watsonx needs a URL, an API key and a project id (or WATSONX_* variables)"
            )
        self._model = inference_cls(
            model_id=self.model_id,
            credentials=credentials_cls(url=self._url, api_key=self._api_key),
            project_id=self._project_id,
            **kwargs,
        )

    async def generate(
        self,
        messages: list[dict[str, Any]],
        *,
        model_options: dict[str, Any] | None = None,
        format: type | None = None,
        tool_calls: bool = False,
    ) -> ModelOutputThunk:
        """Run one chat call (in a worker thread: the SDK is synchronous) and return its thunk."""
        del format
        options = ModelOption.merge_model_options(self.model_options, model_options)
        params = {_PARAMS[k]: v for k, v in options.items() if k in _PARAMS and v is not None}
        tools = openai_tools(options.get(ModelOption.TOOLS)) or None
        reply = await asyncio.to_thread(
            self._model.chat, messages=messages, params=params, tools=tools
        )
        functions = tool_functions(options.get(ModelOption.TOOLS))
        return ModelOutputThunk.from_stream(_one_reply(reply, functions))


async def _one_reply(
    reply: dict[str, Any], functions: dict[str, Any]
) -> AsyncIterator[GenerationChunk]:
    from mellea.backends.openai import _tool_call

    choice = (reply.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    if message.get("content"):
        yield GenerationChunk(text=message["content"])
    calls = []
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        found = _tool_call(
            {
                "id": call.get("id"),
                "name": function.get("name", ""),
                "args": function.get("arguments", ""),
            }
        )
        found.func = functions.get(found.name)
        calls.append(found)
    yield GenerationChunk(
        finish_reason=choice.get("finish_reason") or "stop",
        usage=reply.get("usage"),
        tool_calls=calls or None,
    )


__all__ = ["WatsonxAIBackend"]

"""The openai backend: any OpenAI-compatible server (vLLM, SGLang, Ollama, another m serve)."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import AsyncIterator
from typing import Any

from mellea.backends.adapters.backend import AdapterMixin
from mellea.backends.base import Backend, openai_tools
from mellea.backends.logprobs import openai_logprobs
from mellea.core.content import CBlock, MediaBlock, openai_part, split_data_url
from mellea.core.errors import ModelServerUnavailableError, RequestError
from mellea.core.model_options import ModelOption
from mellea.core.thunk import GenerationChunk, ModelOutputThunk
from mellea.core.tool_call import ModelToolCall

log = logging.getLogger("mellea.backends.openai")

# mellea option -> the chat completions parameter it becomes
_WIRE_NAMES = {
    ModelOption.MAX_NEW_TOKENS: "max_tokens",
    ModelOption.SEED: "seed",
    ModelOption.STOP_SEQUENCES: "stop",
    ModelOption.TOOLS: "tools",
}
_PASSTHROUGH = {
    "temperature",
    "top_p",
    "max_tokens",
    "seed",
    "stop",
    "tools",
    "tool_choice",
    "presence_penalty",
    "frequency_penalty",
    "logit_bias",
    "parallel_tool_calls",
    "response_format",
    "logprobs",
    "top_logprobs",
    "modalities",  # e.g. ["text"] beside audio input (upstream's audio example sets it)
}
_EXTRA_BODY = {"top_k", "min_p", "repetition_penalty", "chat_template_kwargs"}


class OpenAIBackend(AdapterMixin, Backend):
    """Stream chat completions from ``base_url`` with the official ``openai`` client.

    Adapters run on the server: a generation whose ``ModelOption.ADAPTER`` names one
    is sent with that name as the request's ``model`` (how vLLM and ``m serve`` select
    a LoRA module: start them with the adapter under its qualified name, e.g.
    ``requirement-check_alora``); ``chat_template_kwargs`` (documents, a Granite
    Switch model's ``adapter_name``) go in the body's ``extra_body``.
    """

    adapters_served_remotely = True

    def __init__(
        self,
        model_id: Any = None,
        formatter: Any = None,
        base_url: str | None = None,
        model_options: dict[str, Any] | None = None,
        *,
        api_key: str | None = None,
        default_extra_body: dict[str, Any] | None = None,
        default_headers: dict[str, str] | None = None,
        timeout: float | None = None,
        default_to_constraint_checking_alora: bool = True,
        load_embedded_adapters: bool = False,
        adapter_source: str | None = None,
        **client_kwargs: Any,
    ) -> None:
        """Connect to ``base_url`` (default ``$OPENAI_BASE_URL``) as upstream's backend does.

        ``model_id`` is a name or a :class:`~mellea.backends.model_ids.ModelIdentifier`
        (its ``openai_name``, else its ``hf_model_name``); default ``$OPENAI_MODEL``.
        ``formatter`` is kept for upstream compatibility (messages are sent as chat
        turns, so no prompt template is applied). ``default_extra_body`` goes into
        every request's body. ``load_embedded_adapters=True`` adds the adapters a
        Granite Switch model lists (from ``adapter_source``, default the model id: a
        local directory, or one under ``$MELLEA_ADAPTERS_DIR``).
        ``default_to_constraint_checking_alora`` routes plain requirement checks to an
        added ``requirement-check`` aLoRA. Other keywords go to ``openai.AsyncOpenAI``.
        """
        from openai import AsyncOpenAI

        from mellea.backends.model_ids import backend_model_name

        super().__init__(model_options)
        self.default_to_constraint_checking_alora = default_to_constraint_checking_alora
        self._adapter_source = adapter_source
        name = backend_model_name(model_id, "openai")
        self.model_id = name or os.environ.get("OPENAI_MODEL", "default")
        self.formatter = formatter
        self.base_url = base_url or os.environ.get("OPENAI_BASE_URL")
        self.default_extra_body = dict(default_extra_body or {})
        self._client_args: dict[str, Any] = {
            "base_url": self.base_url,
            "api_key": api_key or os.environ.get("OPENAI_API_KEY") or "not-needed",
            "default_headers": default_headers,
            **client_kwargs,
        }
        if timeout is not None:
            self._client_args["timeout"] = timeout
        self._clients: dict[int, AsyncOpenAI] = {}
        if load_embedded_adapters:
            from mellea.backends.adapters.adapter import EmbeddedIntrinsicAdapter

            for adapter in EmbeddedIntrinsicAdapter.from_source(adapter_source or self.model_id):
                self.add_adapter(adapter)

    def _client(self) -> Any:
        """One client per event loop: an httpx pool must not cross loops."""
        import asyncio

        from openai import AsyncOpenAI

        key = id(asyncio.get_running_loop())
        client = self._clients.get(key)
        if client is None:
            client = self._clients[key] = AsyncOpenAI(**self._client_args)
        return client

    async def generate(
        self,
        messages: list[dict[str, Any]],
        *,
        model_options: dict[str, Any] | None = None,
        format: type | None = None,
        tool_calls: bool = False,
    ) -> ModelOutputThunk:
        """Open a streaming chat completion and return its thunk."""
        import openai

        options = ModelOption.merge_model_options(self.model_options, model_options)
        body = request_body(options, format)
        if self.default_extra_body:
            body["extra_body"] = {**self.default_extra_body, **body.get("extra_body", {})}
        try:
            stream = await self._client().chat.completions.create(
                model=request_model(options, self.model_id),
                messages=wire_messages(messages),
                stream=True,
                **body,
            )
        except openai.BadRequestError as exc:
            raise RequestError(f"the model server rejected the request: {_message(exc)}") from None
        except (openai.APIConnectionError, openai.InternalServerError) as exc:
            log.warning("model server at %s failed: %s", self.base_url, exc)
            raise ModelServerUnavailableError() from None
        return ModelOutputThunk.from_stream(_chunks(stream))


def wire_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` as the chat completions API takes them, images and audio included.

    Content parts that are image or audio blocks become their OpenAI parts, and
    ``input_audio`` data given as a ``data:`` URL is sent as the bare base64 the API
    expects. Everything else goes as it is; http(s) image URLs are left for the model
    server to fetch.
    """
    result = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            message = {**message, "content": [_wire_part(part) for part in content]}
        result.append(message)
    return result


def _wire_part(part: Any) -> Any:
    if isinstance(part, MediaBlock):
        return openai_part(part)
    if isinstance(part, CBlock):
        return {"type": "text", "text": str(part)}
    if isinstance(part, dict) and part.get("type") == "input_audio":
        audio = part.get("input_audio")
        if isinstance(audio, dict) and isinstance(audio.get("data"), str):
            data = split_data_url(audio["data"])[1]
            return {**part, "input_audio": {**audio, "data": data}}
    return part


def request_model(options: dict[str, Any], model_id: str) -> str:
    """The request's ``model``: the adapter the options name, else the backend's model."""
    adapter = options.get(ModelOption.ADAPTER)
    return str(adapter) if adapter else model_id


def request_body(options: dict[str, Any], format: type | None) -> dict[str, Any]:
    """Chat completion keyword arguments for ``options`` (only the ones that were set)."""
    wire = ModelOption.replace_keys(options, _WIRE_NAMES)
    body: dict[str, Any] = {"stream_options": {"include_usage": True}}
    extra: dict[str, Any] = {}
    for key, value in wire.items():
        if value is None or key.startswith("@@@"):
            continue
        if key in _PASSTHROUGH:
            body[key] = value
        elif key in _EXTRA_BODY:
            extra[key] = value
    if "tools" in body:
        body["tools"] = openai_tools(body["tools"]) or None
        if body["tools"] is None:
            del body["tools"]
    if format is not None:
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {
                "name": getattr(format, "__name__", "output"),
                "schema": format.model_json_schema(),  # type: ignore[attr-defined]
            },
        }
    if extra:
        body["extra_body"] = extra
    return body


async def _chunks(stream: Any) -> AsyncIterator[GenerationChunk]:
    """Translate streamed chat completion chunks; closing this closes the HTTP stream."""
    calls: dict[int, dict[str, Any]] = {}
    finish: str | None = None
    usage: dict[str, Any] | None = None
    try:
        async for event in stream:
            if event.usage is not None:
                usage = event.usage.model_dump(exclude_none=True)
            for choice in event.choices:
                if choice.index != 0:  # a thunk holds one reply; n > 1 is the server's job
                    continue
                delta = choice.delta
                for call in delta.tool_calls or []:
                    entry = calls.setdefault(call.index, {"id": None, "name": "", "args": ""})
                    entry["id"] = call.id or entry["id"]
                    if call.function is not None:
                        entry["name"] += call.function.name or ""
                        entry["args"] += call.function.arguments or ""
                if choice.finish_reason:
                    finish = choice.finish_reason
                logprobs = choice.logprobs.content if choice.logprobs is not None else None
                if delta.content or logprobs:
                    yield GenerationChunk(
                        text=delta.content or "",
                        logprobs=openai_logprobs(logprobs) if logprobs else None,
                    )
        tool_calls = [_tool_call(entry) for entry in calls.values()] or None
        yield GenerationChunk(finish_reason=finish or "stop", usage=usage, tool_calls=tool_calls)
    finally:
        await stream.close()


def _tool_call(entry: dict[str, Any]) -> ModelToolCall:
    try:
        args = json.loads(entry["args"]) if entry["args"] else {}
    except json.JSONDecodeError:
        args = {"_raw": entry["args"]}
    call = ModelToolCall(entry["name"], None, args)
    if entry["id"]:
        call.id = entry["id"]
    return call


def _message(exc: Exception) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])
    return str(exc)

"""LiteLLM backend: any provider LiteLLM reaches (``"<provider>/<model>"`` ids),
through the ``litellm`` package (a clear ImportError names it when missing)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from mellea.backends.base import Backend, openai_tools
from mellea.backends.openai import _tool_call, request_body, wire_messages
from mellea.backends.tool_parsing import tool_functions
from mellea.core.errors import RequestError
from mellea.core.model_options import ModelOption
from mellea.core.optional import import_optional
from mellea.core.thunk import GenerationChunk, ModelOutputThunk

LITELLM_MISSING = (
    "LiteLLMBackend needs the 'litellm' package; install it with `pip install litellm`"
)
DEFAULT_MODEL = "ollama_chat/granite4.1:3b"


def _litellm() -> Any:
    return import_optional("litellm", LITELLM_MISSING)


class LiteLLMBackend(Backend):
    """Streams chat completions through ``litellm.acompletion``.

    ``base_url`` becomes LiteLLM's ``api_base`` (leave it ``None`` for hosted
    providers); ``formatter`` is kept for upstream compatibility (chat messages are
    sent). Model options LiteLLM does not know as OpenAI parameters (such as
    ``num_retries`` or ``aws_region_name``) are passed to it as they are.
    """

    def __init__(
        self,
        model_id: str = DEFAULT_MODEL,
        formatter: Any = None,
        base_url: str | None = None,
        model_options: dict[str, Any] | None = None,
    ) -> None:
        _litellm()
        super().__init__(model_options)
        self.model_id = str(model_id)
        self.formatter = formatter
        self.base_url = base_url

    async def generate(
        self,
        messages: list[dict[str, Any]],
        *,
        model_options: dict[str, Any] | None = None,
        format: type | None = None,
        tool_calls: bool = False,
    ) -> ModelOutputThunk:
        """Open a streaming completion and return its thunk."""
        litellm = _litellm()
        options = ModelOption.merge_model_options(self.model_options, model_options)
        body = request_body(options, format)
        body.update(body.pop("extra_body", {}))
        known = set(body) | {ModelOption.TOOLS, ModelOption.TOOL_CHOICE}
        for key, value in options.items():  # LiteLLM's own knobs pass straight through
            if (
                not key.startswith("@@@")
                and key not in known
                and key not in _OURS
                and value is not None
            ):
                body.setdefault(key, value)
        tools = openai_tools(options.get(ModelOption.TOOLS))
        if tools:
            body["tools"] = tools
        if self.base_url:
            body["api_base"] = self.base_url
        try:
            stream = await litellm.acompletion(
                model=self.model_id, messages=wire_messages(messages), stream=True, **body
            )
        except getattr(litellm, "BadRequestError", ()) as exc:  # type: ignore[misc]
            raise RequestError(f"the model provider rejected the request: {exc}") from None
        functions = tool_functions(options.get(ModelOption.TOOLS))
        return ModelOutputThunk.from_stream(openai_style_chunks(stream, functions))


_OURS = {"temperature", "top_p", "seed", "stop", "stream", "max_tokens", "logprobs", "top_logprobs"}


async def openai_style_chunks(
    stream: Any, functions: dict[str, Any] | None = None
) -> AsyncIterator[GenerationChunk]:
    """Chunks in the OpenAI streaming shape (objects or dicts) as generation chunks;
    tool-call fragments are joined and given their Python function when known."""
    calls: dict[int, dict[str, Any]] = {}
    finish: str | None = None
    usage: dict[str, Any] | None = None
    try:
        async for event in stream:
            raw_usage = _get(event, "usage")
            if raw_usage:
                usage = (
                    raw_usage
                    if isinstance(raw_usage, dict)
                    else raw_usage.model_dump(exclude_none=True)
                )
            for choice in _get(event, "choices") or []:
                if (_get(choice, "index") or 0) != 0:
                    continue
                delta = _get(choice, "delta") or {}
                for call in _get(delta, "tool_calls") or []:
                    entry = calls.setdefault(
                        _get(call, "index") or 0, {"id": None, "name": "", "args": ""}
                    )
                    entry["id"] = _get(call, "id") or entry["id"]
                    function = _get(call, "function")
                    if function is not None:
                        entry["name"] += _get(function, "name") or ""
                        entry["args"] += _get(function, "arguments") or ""
                if _get(choice, "finish_reason"):
                    finish = _get(choice, "finish_reason")
                text = _get(delta, "content")
                if text:
                    yield GenerationChunk(text=text)
        found = [_tool_call(entry) for entry in calls.values()]
        for call in found:
            call.func = (functions or {}).get(call.name)
        yield GenerationChunk(finish_reason=finish or "stop", usage=usage, tool_calls=found or None)
    finally:
        closer = getattr(stream, "aclose", None) or getattr(stream, "close", None)
        if closer is not None:
            result = closer()
            if hasattr(result, "__await__"):
                await result


def _get(obj: Any, name: str) -> Any:
    return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)


__all__ = ["LiteLLMBackend"]

"""From a validated chat request to what a program's ``serve()`` receives."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from mellea.core.model_options import ModelOption
from mellea.serve.bounds import (
    check_logit_bias,
    check_metadata,
    check_requirements,
    check_schema,
    check_stop,
    check_tool_count,
)
from mellea.serve.errors import OpenAIError
from mellea.serve.protocol import AllowedToolsChoice, ChatCompletionRequest, NamedToolChoice
from mellea.serve.schema import UnsupportedSchemaError, model_from_schema

log = logging.getLogger("mellea.serve")

# request field -> model option key, copied only when the client sent a value
_DIRECT = {
    "temperature": ModelOption.TEMPERATURE,
    "top_p": ModelOption.TOP_P,
    "seed": ModelOption.SEED,
    "presence_penalty": "presence_penalty",
    "frequency_penalty": "frequency_penalty",
    "logit_bias": "logit_bias",
    "top_k": "top_k",
    "min_p": "min_p",
    "repetition_penalty": "repetition_penalty",
    "parallel_tool_calls": "parallel_tool_calls",
    "ignore_eos": "ignore_eos",
    "chat_template_kwargs": "chat_template_kwargs",
    "reasoning_effort": "reasoning_effort",
}


# Model option keys asking the backend for token log-probabilities (OpenAI chat's names).
LOGPROBS = "logprobs"
TOP_LOGPROBS = "top_logprobs"


@dataclass
class ServeArguments:
    """What ``serve()`` is called with, derived from one request."""

    messages: list[Any]
    requirements: list[str] | None
    model_options: dict[str, Any]
    format: type | None = None
    client_options: dict[str, Any] = field(default_factory=dict)


def serve_arguments(request: ChatCompletionRequest) -> ServeArguments:
    """Check what we cannot honour (-> 400 naming the field) and map the rest.

    Only values the client sent become model options: no defaults are injected.
    """
    reject_unsupported(request)
    options = sampling_options(request)
    if request.logprobs:
        options[LOGPROBS] = True
        options[TOP_LOGPROBS] = request.top_logprobs or 0
    choice = request.tool_choice
    allowed = None
    if isinstance(choice, AllowedToolsChoice):
        allowed = {entry.function.name for entry in choice.allowed_tools.tools}
        choice = choice.allowed_tools.mode
    offered = [t for t in request.tools or [] if allowed is None or t.function.name in allowed]
    if offered:
        options[ModelOption.TOOLS] = [tool.model_dump(exclude_none=True) for tool in offered]
    if choice is not None:
        options[ModelOption.TOOL_CHOICE] = (
            choice if isinstance(choice, str) else choice.model_dump()
        )
    format_model = None
    if request.response_format is not None and request.response_format.type != "text":
        options["response_format"] = request.response_format.model_dump(
            by_alias=True, exclude_none=True
        )
        format_model = _format_model(request)
    client_options = request.model_dump(
        exclude={"messages", "requirements"}, exclude_none=True, by_alias=True
    )
    return ServeArguments(
        messages=list(request.messages),
        requirements=list(request.requirements) if request.requirements is not None else None,
        model_options=options,
        format=format_model,
        client_options=client_options,
    )


def choice_options(options: dict[str, Any], n: int) -> list[dict[str, Any]]:
    """The model options of each of ``n`` choices, so that they differ.

    Choice ``i`` gets ``seed + i`` when a seed was sent (the same seed would repeat
    the same reply). Without a temperature the choices sample at 1.0, OpenAI's
    default, because the local backend's default is greedy and would repeat too.
    """
    if n == 1:
        return [options]
    result = []
    for i in range(n):
        each = dict(options)
        seed = each.get(ModelOption.SEED)
        if seed is not None:
            each[ModelOption.SEED] = seed + i if seed + i < 2**63 else seed - i
        each.setdefault(ModelOption.TEMPERATURE, 1.0)
        result.append(each)
    return result


def sampling_options(request: Any) -> dict[str, Any]:
    """Model options for the sampling fields chat and text completions share.

    Only values the client sent are copied; unknown fields are logged.
    """
    reject_common(request)
    if request.model_extra:
        log.info("ignoring unknown request fields: %s", ", ".join(sorted(request.model_extra)))
    options: dict[str, Any] = {}
    for name, key in _DIRECT.items():
        value = getattr(request, name, None)
        if value is not None:
            options[key] = value
    max_tokens = getattr(request, "max_completion_tokens", None) or request.max_tokens
    if max_tokens is not None:
        options[ModelOption.MAX_NEW_TOKENS] = max_tokens
    if request.stop:
        options[ModelOption.STOP_SEQUENCES] = (
            [request.stop] if isinstance(request.stop, str) else list(request.stop)
        )
    if request.stream:
        options[ModelOption.STREAM] = True
    return options


def reject_common(request: Any) -> None:
    """400 for shared fields whose values the server cannot honour."""
    if request.stream_options is not None and not request.stream:
        raise OpenAIError(
            400, "stream_options is only allowed when stream is true", param="stream_options"
        )
    check_logit_bias(request.logit_bias)
    check_stop(request.stop)


def reject_unsupported(request: ChatCompletionRequest) -> None:
    """400 for chat values the server cannot honour, or over the bounds of ``mellea.serve.bounds``."""
    check_requirements(request.requirements)
    check_metadata(request.metadata)
    if request.tools:
        check_tool_count(len(request.tools))
        for i, tool in enumerate(request.tools):
            if tool.function.parameters is not None:
                check_schema(tool.function.parameters, f"tools[{i}].function.parameters")
    spec = request.response_format.json_schema if request.response_format else None
    if spec is not None and spec.schema_ is not None:
        check_schema(spec.schema_, "response_format")
    choice = request.tool_choice
    names = {tool.function.name for tool in request.tools or []}
    if isinstance(choice, NamedToolChoice) and choice.function.name not in names:
        raise OpenAIError(
            400,
            f"tool_choice names {choice.function.name!r}, which is not in tools",
            param="tool_choice",
        )
    if isinstance(choice, AllowedToolsChoice):
        for i, entry in enumerate(choice.allowed_tools.tools):
            if entry.function.name not in names:
                raise OpenAIError(
                    400,
                    f"tool_choice.allowed_tools.tools[{i}] names {entry.function.name!r}, "
                    "which is not in tools",
                    param=f"tool_choice.allowed_tools.tools[{i}].function.name",
                )
    if request.top_logprobs is not None and not request.logprobs:
        raise OpenAIError(400, "top_logprobs needs logprobs: true", param="top_logprobs")
    if choice in ("required",) and not request.tools:
        raise OpenAIError(400, "tool_choice 'required' needs tools", param="tool_choice")


def _format_model(request: ChatCompletionRequest) -> type | None:
    response_format = request.response_format
    assert response_format is not None
    if response_format.type == "json_object":
        return None
    spec = response_format.json_schema
    if spec is None or spec.schema_ is None:
        raise OpenAIError(
            400, "response_format json_schema needs a 'schema'", param="response_format"
        )
    try:
        return model_from_schema(spec.schema_, spec.name)
    except UnsupportedSchemaError as exc:
        raise OpenAIError(400, f"unsupported JSON schema: {exc}", param="response_format") from None

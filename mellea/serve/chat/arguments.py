"""From a validated chat request to what a program's ``serve()`` receives."""

from __future__ import annotations

from mellea.core.model_options import ModelOption
from mellea.serve.bounds import (
    check_metadata,
    check_requirements,
    check_schema,
    check_tool_count,
)
from mellea.serve.errors import OpenAIError
from mellea.serve.options import LOGPROBS, TOP_LOGPROBS, ServeArguments, sampling_options
from mellea.serve.protocol import AllowedToolsChoice, ChatCompletionRequest, NamedToolChoice
from mellea.serve.schema import UnsupportedSchemaError, model_from_schema


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


# Fields of a text completion that ask for the prompt back or its log-probabilities.
COMPLETIONS_ONLY = ("echo", "prompt_logprobs")


def reject_unsupported(request: ChatCompletionRequest) -> None:
    """400 for chat values the server cannot honour, or over the bounds of ``mellea.serve.bounds``."""
    check_requirements(request.requirements)
    check_metadata(request.metadata)
    for name in COMPLETIONS_ONLY:
        if name in (request.model_extra or {}):
            raise OpenAIError(
                400,
                f"{name} is a /v1/completions field: a chat reply neither echoes nor scores "
                "its prompt; send the text to /v1/completions",
                param=name,
            )
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

"""From a validated Responses request to what ``serve()`` receives, and the response it starts."""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from typing import Any, TypeVar

from mellea.core.model_options import ModelOption
from mellea.serve.errors import OpenAIError, naming_field
from mellea.serve.options import LOGPROBS, TOP_LOGPROBS, ServeArguments
from mellea.serve.responses.items import chat_messages
from mellea.serve.responses.objects import ResponseObject
from mellea.serve.responses.request import (
    OUTPUT_LOGPROBS,
    FunctionTool,
    ResponsesRequest,
    allowed_tool_names,
    chat_tool_choice,
    function_tools,
    reject_unsupported,
)
from mellea.serve.schema import UnsupportedSchemaError, model_from_schema

log = logging.getLogger("mellea.serve")

_NOT_IN_CLIENT_OPTIONS = {"input", "instructions", "requirements"}
REASONING_EFFORT = "reasoning_effort"  # the model option ``reasoning.effort`` becomes (chat's name)

T = TypeVar("T")


def check_request(request: ResponsesRequest) -> list[FunctionTool]:
    """The 400s that need nothing but the request itself; returns its function tools.

    :func:`serve_arguments` raises the rest (tool choice, schema) before anything runs.
    """
    reject_unsupported(request)
    return function_tools(request)


def serve_arguments(
    request: ResponsesRequest, tools: list[FunctionTool], items: list[dict[str, Any]]
) -> ServeArguments:
    """``serve()``'s arguments: ``items`` (history, then this input) as chat messages.

    Only values the client sent become model options: no defaults are injected.
    ``include`` stays out of them: asking for logprobs becomes ``LOGPROBS`` and
    ``TOP_LOGPROBS``, as for chat; the program still finds it in ``client_options``.
    """
    if request.model_extra:
        log.info("ignoring unknown request fields: %s", ", ".join(sorted(request.model_extra)))
    ignored = sorted(set(request.include or []) - {OUTPUT_LOGPROBS})
    if ignored:
        log.info("ignoring include values this server does not produce: %s", ", ".join(ignored))
    options: dict[str, Any] = {}
    if request.temperature is not None:
        options[ModelOption.TEMPERATURE] = request.temperature
    if request.top_p is not None:
        options[ModelOption.TOP_P] = request.top_p
    if request.max_output_tokens is not None:
        options[ModelOption.MAX_NEW_TOKENS] = request.max_output_tokens
    if request.wants_logprobs:
        options[LOGPROBS] = True
        options[TOP_LOGPROBS] = request.top_logprobs or 0
    choice = chat_tool_choice(request, tools)
    allowed = allowed_tool_names(request)
    offered = [tool for tool in tools if allowed is None or tool.name in allowed]
    if offered:
        options[ModelOption.TOOLS] = [tool.chat_tool() for tool in offered]
    if choice is not None:
        options[ModelOption.TOOL_CHOICE] = choice
    if request.parallel_tool_calls is not None:
        options["parallel_tool_calls"] = request.parallel_tool_calls
    response_format = _chat_response_format(request)
    if response_format is not None:
        options["response_format"] = response_format
    if request.reasoning is not None and request.reasoning.effort is not None:
        options[REASONING_EFFORT] = request.reasoning.effort
    if request.stream:
        options[ModelOption.STREAM] = True
    messages = chat_messages(request.instructions, items)
    if not messages:  # e.g. only reasoning items: a program has nothing to answer
        raise OpenAIError(
            400, "input holds no message, tool call or tool output to answer", param="input"
        )
    return ServeArguments(
        messages=messages,
        requirements=list(request.requirements) if request.requirements is not None else None,
        model_options=options,
        format=_format_model(request),
        client_options=request.model_dump(
            exclude=_NOT_IN_CLIENT_OPTIONS, exclude_none=True, by_alias=True
        ),
    )


def new_response(
    request: ResponsesRequest, tools: list[FunctionTool], model: str
) -> ResponseObject:
    """The in-progress response object echoing the request's settings."""
    text = request.text.model_dump(exclude_none=True, by_alias=True) if request.text else None
    if text is not None and "format" not in text:
        text["format"] = {"type": "text"}
    return ResponseObject(
        model=model,
        instructions=request.instructions,
        max_output_tokens=request.max_output_tokens,
        parallel_tool_calls=request.parallel_tool_calls is not False,
        previous_response_id=request.previous_response_id,
        temperature=request.temperature,
        top_p=request.top_p,
        top_logprobs=request.top_logprobs,
        tools=[tool.model_dump() for tool in tools],
        tool_choice=request.tool_choice if request.tool_choice is not None else "auto",
        **({"text": text} if text is not None else {}),
        truncation=request.truncation or "disabled",
        reasoning=reasoning_echo(request),
        user=request.user,
        metadata=request.metadata or {},
        store=request.stores,
    )


def reasoning_echo(request: ResponsesRequest) -> dict[str, Any] | None:
    """The response's ``reasoning``: what the request sent (``summary`` under its current name)."""
    sent = request.reasoning
    if sent is None:
        return None
    return {"effort": sent.effort, "summary": sent.summary or sent.generate_summary}


def _chat_response_format(request: ResponsesRequest) -> dict[str, Any] | None:
    """``text.format`` in the chat ``response_format`` form backends already understand."""
    spec = request.text.format if request.text else None
    if spec is None or spec.type == "text":
        return None
    if spec.type == "json_object":
        return {"type": "json_object"}
    schema = {"name": spec.name or "output", "description": spec.description}
    schema |= {"schema": spec.schema_, "strict": spec.strict}
    return {
        "type": "json_schema",
        "json_schema": {k: v for k, v in schema.items() if v is not None},
    }


def _format_model(request: ResponsesRequest) -> type | None:
    """The pydantic model for a ``json_schema`` format (the program's ``format`` argument)."""
    spec = request.text.format if request.text else None
    if spec is None or spec.type != "json_schema":
        return None
    if spec.schema_ is None:
        raise OpenAIError(
            400, "text.format json_schema needs a 'schema'", param="text.format.schema"
        )
    try:
        return model_from_schema(spec.schema_, spec.name or "Output")
    except UnsupportedSchemaError as exc:
        message = f"unsupported JSON schema: {exc}"
    except Exception:  # a malformed schema can trip the converter in many ways
        message = "the JSON schema is malformed or uses constructs this server cannot handle"
    raise OpenAIError(400, message, param="text.format.schema")


async def naming_input(call: Awaitable[T]) -> T:
    """Await a program call for a Responses request; a client error that names the chat
    ``messages`` the program saw (a prompt too long, media the model cannot read) names
    the request's ``input`` instead, the field this client sent."""
    return await naming_field(call, "input")

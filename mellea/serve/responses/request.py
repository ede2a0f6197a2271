"""The ``POST /v1/responses`` body, and the values in it the server cannot honour."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mellea.serve.bounds import (
    MAX_CHOICES,
    MAX_TOP_LOGPROBS,
    check_metadata,
    check_requirements,
    check_schema,
    check_tool_count,
)
from mellea.serve.errors import OpenAIError, param_path
from mellea.serve.protocol import MAX_INT32, RequestBody

OUTPUT_LOGPROBS = "message.output_text.logprobs"  # the ``include`` value asking for logprobs


class FunctionTool(BaseModel):
    """A Responses-style function tool: ``{"type": "function", "name", "parameters", ...}``."""

    model_config = ConfigDict(extra="allow")
    type: Literal["function"]
    name: str = Field(min_length=1, max_length=64)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None

    def chat_tool(self) -> dict[str, Any]:
        """The chat-completions form programs receive under ``ModelOption.TOOLS``."""
        function = {"name": self.name, "description": self.description}
        function |= {"parameters": self.parameters, "strict": self.strict}
        return {
            "type": "function",
            "function": {k: v for k, v in function.items() if v is not None},
        }


class TextFormat(BaseModel):
    """``text.format``: plain text, any JSON object, or JSON matching a schema."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)
    type: Literal["text", "json_object", "json_schema"]
    name: str | None = Field(default=None, max_length=64)
    description: str | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None


class TextConfig(BaseModel):
    """``text``: the output format (and a verbosity hint we ignore)."""

    model_config = ConfigDict(extra="allow")
    format: TextFormat | None = None
    verbosity: str | None = None


class ReasoningConfig(BaseModel):
    """``reasoning``: how hard a reasoning model should think, and what summary to give.

    ``effort`` reaches the program as the ``reasoning_effort`` model option; the
    response echoes both.
    """

    model_config = ConfigDict(extra="allow")
    effort: Literal["none", "minimal", "low", "medium", "high", "xhigh"] | None = None
    summary: Literal["auto", "concise", "detailed"] | None = None
    generate_summary: Literal["auto", "concise", "detailed"] | None = None  # older name


class ResponsesRequest(RequestBody):
    """A ``POST /v1/responses`` body."""

    model: str | None = None
    input: str | list[dict[str, Any]] | None = None
    instructions: str | None = None
    previous_response_id: str | None = Field(default=None, max_length=256)
    max_output_tokens: int | None = Field(default=None, ge=1, le=MAX_INT32)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, ge=0, le=1)
    # Checked one by one in ``function_tools`` so a hosted tool gets a precise 400.
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    text: TextConfig | None = None
    # ``auto``: the oldest input items are dropped until the conversation fits the
    # model's context; ``disabled`` (the default): a conversation too long is a 400.
    truncation: Literal["auto", "disabled"] | None = None
    reasoning: ReasoningConfig | None = None
    store: bool | None = None
    stream: bool | None = None
    stream_options: dict[str, Any] | None = None
    metadata: dict[str, str] | None = None
    user: str | None = None
    # Extra output to return; only ``OUTPUT_LOGPROBS`` is produced, the rest is ignored.
    include: list[str] | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=MAX_TOP_LOGPROBS)
    # Accepted so that values we cannot honour get a 400 naming them.
    background: bool | None = None
    n: int | None = Field(default=None, ge=1, le=MAX_CHOICES)
    conversation: Any = None
    prompt: Any = None
    # The mellea extension: requirements the program should check its output against.
    requirements: list[str] | None = None

    @property
    def stores(self) -> bool:
        """Whether the response is kept for GET, chaining and cancel (the default)."""
        return self.store is not False

    @property
    def wants_logprobs(self) -> bool:
        """Whether ``include`` asks for the output text's token log-probabilities."""
        return OUTPUT_LOGPROBS in (self.include or [])


def function_tools(request: ResponsesRequest) -> list[FunctionTool]:
    """The request's tools; anything but a function tool is a 400 naming it."""
    tools = []
    check_tool_count(len(request.tools or []))
    for i, raw in enumerate(request.tools or []):
        kind = raw.get("type")
        if kind != "function":
            raise OpenAIError(
                400,
                f"tool type {str(kind)[:64]!r} is not supported by this server; only 'function' tools are",
                param=f"tools[{i}].type",
            )
        if isinstance(raw.get("function"), dict):  # a chat-style tool sent here by mistake
            raw = {"type": "function", **raw["function"]}
        try:
            tool = FunctionTool.model_validate(raw)
        except ValidationError as exc:
            raise field_error(exc, f"tools[{i}]") from None
        if tool.parameters is not None:
            check_schema(tool.parameters, f"tools[{i}].parameters")
        tools.append(tool)
    return tools


def chat_tool_choice(request: ResponsesRequest, tools: list[FunctionTool]) -> Any:
    """``tool_choice`` in the chat form programs receive; 400 for choices we cannot honour."""
    choice = request.tool_choice
    if choice is None:
        return None
    if isinstance(choice, str):
        if choice not in ("none", "auto", "required"):
            raise OpenAIError(400, f"unknown tool_choice {choice[:64]!r}", param="tool_choice")
        if choice == "required" and not tools:
            raise OpenAIError(400, "tool_choice 'required' needs tools", param="tool_choice")
        return choice
    if choice.get("type") == "allowed_tools":
        return _allowed_tools_choice(choice, tools)
    name = choice.get("name")
    if choice.get("type") != "function" or not isinstance(name, str):
        raise OpenAIError(
            400,
            "tool_choice must be 'none', 'auto', 'required' or "
            '{"type": "function", "name": ...}',
            param="tool_choice",
        )
    if name not in {tool.name for tool in tools}:
        raise OpenAIError(
            400, f"tool_choice names {name[:64]!r}, which is not in tools", param="tool_choice"
        )
    return {"type": "function", "function": {"name": name}}


def allowed_tool_names(request: ResponsesRequest) -> set[str] | None:
    """The names an ``allowed_tools`` tool choice lets the model call (None: every tool)."""
    choice = request.tool_choice
    if not isinstance(choice, dict) or choice.get("type") != "allowed_tools":
        return None
    listed = choice.get("tools")
    return (
        {t.get("name") for t in listed if isinstance(t, dict)}
        if isinstance(listed, list)
        else set()
    )


def _allowed_tools_choice(choice: dict[str, Any], tools: list[FunctionTool]) -> str:
    """``{"type": "allowed_tools", "mode": "auto" | "required", "tools": [...]}``: the
    program is offered only the listed tools (see :func:`allowed_tool_names`), under the
    tool choice ``mode`` names."""
    mode = choice.get("mode", "auto")
    if mode not in ("auto", "required"):
        raise OpenAIError(
            400, "tool_choice.mode must be 'auto' or 'required'", param="tool_choice.mode"
        )
    listed = choice.get("tools")
    if not isinstance(listed, list) or not listed:
        raise OpenAIError(
            400, "tool_choice.tools must list the allowed tools", param="tool_choice.tools"
        )
    names = {tool.name for tool in tools}
    for i, entry in enumerate(listed):
        where = f"tool_choice.tools[{i}]"
        if not isinstance(entry, dict) or entry.get("type") != "function":
            raise OpenAIError(
                400,
                f'{where} must be a function tool: {{"type": "function", "name": ...}}',
                param=where,
            )
        if entry.get("name") not in names:
            raise OpenAIError(
                400,
                f"{where} names {str(entry.get('name'))[:64]!r}, which is not in tools",
                param=f"{where}.name",
            )
    return mode


def reject_unsupported(request: ResponsesRequest) -> None:
    """400 naming the field for values this server cannot honour."""
    if request.background:
        raise OpenAIError(
            400, "background responses are not supported by this server", param="background"
        )
    if request.n is not None and request.n > 1:
        raise OpenAIError(400, "n > 1 is not supported; send one request per response", param="n")
    for name in ("conversation", "prompt"):
        if getattr(request, name) is not None:
            raise OpenAIError(400, f"{name} is not supported by this server", param=name)
    if request.stream_options is not None and not request.stream:
        raise OpenAIError(
            400, "stream_options is only allowed when stream is true", param="stream_options"
        )
    check_metadata(request.metadata)
    check_requirements(request.requirements)
    if request.input is None:
        raise OpenAIError(400, "input is required", param="input")
    if isinstance(request.input, list) and not request.input:
        raise OpenAIError(400, "input must not be empty", param="input")


def field_error(exc: ValidationError, prefix: str) -> OpenAIError:
    """A pydantic error inside one part of the body, as a 400 naming the exact field."""
    first = exc.errors()[0]
    inner = param_path(tuple(first.get("loc", ())))
    param = f"{prefix}.{inner}" if inner and not inner.startswith("[") else f"{prefix}{inner or ''}"
    return OpenAIError(400, f"{param}: {first['msg']}", param=param)

"""The chat completions contract: request, response, and stream chunk models."""

from __future__ import annotations

import time
import uuid
from typing import Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    model_validator,
)

from mellea.serve.bounds import (
    MAX_CHOICES,
    MAX_TOP_LOGPROBS,
    body_error,
    check_body,
    check_cache_salt,
)
from mellea.serve.messages import ChatMessage

MAX_INT32 = 2**31 - 1  # bound for counts, so absurd numbers are a 400, not an overflow
FinishReason = Literal["stop", "length", "tool_calls", "content_filter", "function_call"]


# -- request ---------------------------------------------------------------------


class StreamOptions(BaseModel):
    """``stream_options``: ``include_usage``, and our ``include_program_events``.

    ``include_program_events`` (an extension) streams the program's progress (each
    attempt's text, each requirement verdict, the chosen attempt) as extension chunks.
    """

    model_config = ConfigDict(extra="allow")
    include_usage: bool | None = None
    include_program_events: bool | None = None


class JsonSchemaFormat(BaseModel):
    """The ``json_schema`` member of ``response_format``."""

    name: str = Field(default="output", max_length=64)
    description: str | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None


class ResponseFormat(BaseModel):
    """``response_format``: plain text, any JSON object, or JSON matching a schema."""

    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None


class FunctionDefinition(BaseModel):
    """A function the model may call."""

    model_config = ConfigDict(extra="allow")
    name: str = Field(min_length=1, max_length=64)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class Tool(BaseModel):
    """A tool offered to the model."""

    type: Literal["function"]
    function: FunctionDefinition


class NamedFunction(BaseModel):
    """Names the function a ``tool_choice`` forces."""

    name: str = Field(max_length=64)


class NamedToolChoice(BaseModel):
    """``{"type": "function", "function": {"name": ...}}``."""

    type: Literal["function"]
    function: NamedFunction


class AllowedTools(BaseModel):
    """The ``allowed_tools`` member of an ``allowed_tools`` tool choice."""

    mode: Literal["auto", "required"]
    tools: list[NamedToolChoice] = Field(min_length=1)


class AllowedToolsChoice(BaseModel):
    """``{"type": "allowed_tools", "allowed_tools": {"mode", "tools": [...]}}``: the model
    may call only the listed tools (the program is offered only those), under ``mode``."""

    type: Literal["allowed_tools"]
    allowed_tools: AllowedTools


class RequestBody(BaseModel):
    """A generating request's body: unknown fields are accepted and ignored; a bad
    ``cache_salt``, then a body past the depth, size and Unicode bounds, is refused
    before any field is validated (``mellea.serve.bounds``)."""

    model_config = ConfigDict(extra="allow")

    @model_validator(mode="before")
    @classmethod
    def bounded_body(cls, data: Any) -> Any:
        """A valid ``cache_salt``, and the whole body within bounds."""
        check_cache_salt(data)
        return check_body(data)

    # The client's own partition of the prefix cache, within its tenant's.
    cache_salt: str | None = None

    def generations(self) -> int:
        """How many replies the request asks for."""
        return 1


class ChatCompletionRequest(RequestBody):
    """A ``POST /v1/chat/completions`` body."""

    messages: list[ChatMessage] = Field(min_length=1)
    model: str | None = None
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, ge=0, le=1)
    max_tokens: int | None = Field(default=None, ge=1, le=MAX_INT32)
    max_completion_tokens: int | None = Field(default=None, ge=1, le=MAX_INT32)
    n: int | None = Field(default=None, ge=1, le=MAX_CHOICES)
    stop: str | list[str] | None = None
    seed: int | None = Field(default=None, ge=-(2**63), lt=2**63)
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
    logit_bias: dict[str, float] | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=MAX_TOP_LOGPROBS)
    response_format: ResponseFormat | None = None
    tools: list[Tool] | None = None
    tool_choice: (
        Literal["none", "auto", "required"] | NamedToolChoice | AllowedToolsChoice | None
    ) = None
    parallel_tool_calls: bool | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    user: str | None = None
    metadata: dict[str, str] | None = None
    store: bool | None = None
    # Extensions common among compatible servers.
    top_k: int | None = Field(default=None, ge=0, le=MAX_INT32)
    min_p: float | None = Field(default=None, ge=0, le=1)
    repetition_penalty: float | None = Field(default=None, gt=0, le=10)
    ignore_eos: bool | None = None  # keep generating past end-of-sequence (benchmarks)
    # Variables for the model's chat template, e.g. {"enable_thinking": false} (Qwen3).
    chat_template_kwargs: dict[str, Any] | None = None
    # How hard a reasoning model should think; reaches the program as ``reasoning_effort``.
    reasoning_effort: Literal["none", "minimal", "low", "medium", "high", "xhigh"] | None = None
    # The mellea extension: requirements the program should check its output against.
    requirements: list[str] | None = None
    # The deprecated forms of ``tools`` and ``tool_choice``: they become those (see
    # ``legacy_functions``), and the reply calls the function as they do.
    functions: list[FunctionDefinition] | None = None
    function_call: Literal["none", "auto"] | NamedFunction | None = None
    # Set once ``functions`` became ``tools``: validating the request again (FastAPI does,
    # with the instance the middleware parsed) must not see its own tools as the client's.
    _functions_converted: bool = PrivateAttr(default=False)

    @model_validator(mode="after")
    def legacy_functions(self) -> ChatCompletionRequest:
        """``functions`` / ``function_call`` as ``tools`` / ``tool_choice`` (one call at most)."""
        if self.functions is None:  # first: the private attribute costs a lookup
            if self.function_call is not None:
                raise body_error("function_call needs functions", ("function_call",))
            return self
        if self._functions_converted:
            return self
        if self.tools is not None or self.tool_choice is not None:
            raise body_error(
                "send tools and tool_choice, or the older functions and function_call, not both",
                ("functions",),
            )
        self.tools = [Tool(type="function", function=f) for f in self.functions]
        call = self.function_call
        if isinstance(call, NamedFunction):
            self.tool_choice = NamedToolChoice(type="function", function=call)
        else:
            self.tool_choice = call
        self.parallel_tool_calls = False
        self._functions_converted = True
        return self

    @property
    def uses_functions(self) -> bool:
        """Whether the request came in the deprecated ``functions`` form (and so is answered
        with ``function_call``, not ``tool_calls``)."""
        return self.functions is not None

    def generations(self) -> int:
        """How many replies the request asks for (its ``n`` choices)."""
        return self.n or 1


# -- response --------------------------------------------------------------------


class WireModel(BaseModel):
    """A response model that leaves unset (None) fields off the wire.

    Fields named in ``keep_none`` are always written, as the OpenAI format has them
    (``"content": null``, ``"finish_reason": null``, ``"logprobs": null``). The others
    get ``exclude_if`` when the class is made, so pydantic drops them while it writes
    the JSON (twice as fast as a serializer that filters each model's dict).
    """

    keep_none: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        for name, field in cls.model_fields.items():
            field.exclude_if = None if name in cls.keep_none else _is_none
        cls.model_rebuild(force=True)


def _is_none(value: Any) -> bool:
    return value is None


class PromptTokensDetails(WireModel):
    """Where the prompt tokens came from."""

    cached_tokens: int = 0


class CompletionTokensDetails(WireModel):
    """What the completion tokens were spent on."""

    reasoning_tokens: int = 0


class Usage(WireModel):
    """Token counts of a completion."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    prompt_tokens_details: PromptTokensDetails | None = None
    completion_tokens_details: CompletionTokensDetails | None = None


class ResponseFunctionCall(WireModel):
    """A called function with its JSON arguments."""

    name: str
    arguments: str


class ResponseToolCall(WireModel):
    """A tool call in a reply."""

    id: str
    type: Literal["function"] = "function"
    function: ResponseFunctionCall


class AssistantMessage(WireModel):
    """The reply message of a non-streamed completion."""

    keep_none = frozenset({"content"})
    role: Literal["assistant"] = "assistant"
    content: str | None
    tool_calls: list[ResponseToolCall] | None = None
    function_call: ResponseFunctionCall | None = None  # the deprecated ``functions`` form
    reasoning_content: str | None = None


class TopLogprob(WireModel):
    """A likely token at one position, with its log-probability."""

    keep_none = frozenset({"bytes"})
    token: str
    logprob: float
    bytes: list[int] | None = None


class ChatTokenLogprob(TopLogprob):
    """A generated token's log-probability and the most likely alternatives."""

    top_logprobs: list[TopLogprob] = Field(default_factory=list)


class ChoiceLogprobs(WireModel):
    """The ``logprobs`` of a chat choice (or of one stream chunk's tokens)."""

    keep_none = frozenset({"content"})
    content: list[ChatTokenLogprob] | None = None


class Choice(WireModel):
    """One reply of a non-streamed completion."""

    keep_none = frozenset({"logprobs"})
    index: int = 0
    message: AssistantMessage
    logprobs: ChoiceLogprobs | None = None
    finish_reason: FinishReason = "stop"
    mellea: dict[str, Any] | None = None  # the program's report (mellea.serve.program_report)


def new_completion_id() -> str:
    """A fresh ``chatcmpl-...`` id."""
    return f"chatcmpl-{uuid.uuid4().hex}"


class ChatCompletion(WireModel):
    """A non-streamed chat completion."""

    id: str = Field(default_factory=new_completion_id)
    object: Literal["chat.completion"] = "chat.completion"
    created: int = Field(default_factory=lambda: int(time.time()))
    model: str
    choices: list[Choice]
    usage: Usage | None = None
    system_fingerprint: str | None = None


class ChunkToolCallFunction(WireModel):
    """A streamed piece of a function call."""

    name: str | None = None
    arguments: str | None = None


class ChunkToolCall(WireModel):
    """A streamed piece of a tool call: first with id/type/name, then argument fragments."""

    index: int
    id: str | None = None
    type: Literal["function"] | None = None
    function: ChunkToolCallFunction | None = None


class Delta(WireModel):
    """What a stream chunk adds to the reply."""

    role: Literal["assistant"] | None = None
    content: str | None = None
    reasoning_content: str | None = None
    tool_calls: list[ChunkToolCall] | None = None
    function_call: ChunkToolCallFunction | None = None  # the deprecated ``functions`` form


class ChunkChoice(WireModel):
    """One choice's part of a stream chunk."""

    keep_none = frozenset({"logprobs", "finish_reason"})
    index: int = 0
    delta: Delta
    logprobs: ChoiceLogprobs | None = None
    finish_reason: FinishReason | None = None


class ChatCompletionChunk(WireModel):
    """One ``data:`` event of a streamed chat completion."""

    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: Usage | None = None
    system_fingerprint: str | None = None
    mellea: dict[str, Any] | None = None  # a program event (only with include_program_events)


class ChatCompletionChunkWithUsage(ChatCompletionChunk):
    """A stream chunk when the client asked for usage: ``"usage": null`` on every chunk
    but the last, which carries the counts (as the OpenAI reference has it)."""

    keep_none = frozenset({"usage"})


class ModelCard(WireModel):
    """An entry of ``GET /v1/models``."""

    id: str
    object: Literal["model"] = "model"
    created: int = Field(default_factory=lambda: int(time.time()))
    owned_by: str = "mellea"
    mellea: dict[str, Any] | None = None  # what the program says about itself


class ModelList(WireModel):
    """The ``GET /v1/models`` body."""

    object: Literal["list"] = "list"
    data: list[ModelCard]

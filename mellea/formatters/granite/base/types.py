"""The chat-completion request and response shapes the Granite formatters read and write.

Pydantic models of the OpenAI chat API's fields these formatters use, plus vLLM's
``extra_body`` (documents, ``chat_template_kwargs``, ``structured_outputs``). Every
model keeps unknown fields (a real request carries more), and serializes only the
fields that were set, so a request round-trips without gaining defaults.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeAlias

import pydantic
from pydantic import Field, StringConstraints


class NoDefaultsMixin:
    """Serialize only the fields that were set (plus extras and :meth:`_keep_these_fields`)."""

    @pydantic.model_serializer(mode="wrap")
    def _only_set_fields(self, nxt: Any) -> dict[str, Any]:
        dumped = nxt(self)
        keep = set(self.model_fields_set)  # type: ignore[attr-defined]
        keep |= set(self.model_extra or {})  # type: ignore[attr-defined]
        keep |= set(self._keep_these_fields())
        result = {k: v for k, v in dumped.items() if k in keep}
        for name in sorted(keep - set(result)):
            result[name] = getattr(self, name)
        return result

    def _keep_these_fields(self) -> tuple[str, ...]:
        """Fields written even at their default (those that pick the class on reading)."""
        return ()


class _ChatMessageBase(pydantic.BaseModel, NoDefaultsMixin):
    """A chat message: its text; subclasses fix the role."""

    content: str

    def _keep_these_fields(self) -> tuple[str, ...]:
        return ("role",)


class UserMessage(_ChatMessageBase):
    """A user turn."""

    role: Literal["user"] = "user"


class DocumentMessage(_ChatMessageBase):
    """A document as a turn of its own (role ``document <id>``)."""

    role: Annotated[str, StringConstraints(pattern=r"^document .+$")]


class ChatToolCall(pydantic.BaseModel, NoDefaultsMixin):
    """A call the assistant made: function name and parsed arguments."""

    id: str | None = None
    name: str
    arguments: dict[str, Any] | None


ToolCall = ChatToolCall  # upstream's name (one class per name in this project)


class ChatAssistantMessage(_ChatMessageBase):
    """An assistant turn, with its tool calls and reasoning when present."""

    role: Literal["assistant"] = "assistant"
    tool_calls: list[ToolCall] | None = None
    reasoning_content: str | None = None


AssistantMessage = ChatAssistantMessage  # upstream's name (one class per name in this project)


class ToolResultMessage(_ChatMessageBase):
    """A tool's answer to call ``tool_call_id``."""

    role: Literal["tool"] = "tool"
    tool_call_id: str


class SystemMessage(_ChatMessageBase):
    """The system prompt."""

    role: Literal["system"] = "system"


class DeveloperMessage(_ChatMessageBase):
    """A developer turn (the OpenAI API's newer system role)."""

    role: Literal["developer"] = "developer"


ChatMessage: TypeAlias = (
    UserMessage
    | AssistantMessage
    | ToolResultMessage
    | SystemMessage
    | DeveloperMessage
    | DocumentMessage
)


class ToolDefinition(pydantic.BaseModel, NoDefaultsMixin):
    """A tool offered to the model."""

    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None


class ChatDocument(pydantic.BaseModel, NoDefaultsMixin):
    """A retrieved document: text, and optionally a title and an id."""

    text: str
    title: str | None = None
    doc_id: str | None = None


Document = ChatDocument  # upstream's name (one class per name in this project)


class ChatTemplateKwargs(pydantic.BaseModel):
    """``chat_template_kwargs``: any keys, passed to the chat template."""

    model_config = pydantic.ConfigDict(arbitrary_types_allowed=True, extra="allow")


class VLLMExtraBody(pydantic.BaseModel, NoDefaultsMixin):
    """vLLM's request fields outside the OpenAI API (sent as ``extra_body``)."""

    documents: list[Document] | None = Field(default=None)
    add_generation_prompt: bool = Field(default=True)
    chat_template_kwargs: ChatTemplateKwargs | None = Field(default=None)
    structured_outputs: dict | None = Field(default=None)

    model_config = pydantic.ConfigDict(extra="allow")


class ChatCompletionBody(pydantic.BaseModel, NoDefaultsMixin):
    """A chat completion request: messages, model, tools and ``extra_body``."""

    messages: list[ChatMessage]
    model: str | None = None
    tools: list[ToolDefinition] | None = None
    extra_body: VLLMExtraBody | None = Field(default=None)

    model_config = pydantic.ConfigDict(extra="allow")

    def _documents(self) -> list[Document] | None:
        return self.extra_body.documents if self.extra_body else None

    def _chat_template_kwargs(self) -> ChatTemplateKwargs | None:
        return self.extra_body.chat_template_kwargs if self.extra_body else None


ChatCompletion = ChatCompletionBody  # upstream's name (one class per name in this project)


class GraniteChatCompletion(ChatCompletion):
    """A request for a Granite model: vLLM's fields only under ``extra_body``, and
    documents given in ``chat_template_kwargs`` moved to ``extra_body.documents``."""

    @pydantic.model_validator(mode="after")
    def _vllm_fields_under_extra_body(self) -> GraniteChatCompletion:
        for name in VLLMExtraBody.model_fields:
            if name in (self.model_extra or {}):
                raise ValueError(
                    f"'{name}' belongs under extra_body (extra_body.{name}), not at the top "
                    "of the request"
                )
        return self

    @pydantic.model_validator(mode="after")
    def _documents_from_template_kwargs(self) -> GraniteChatCompletion:
        kwargs = self._chat_template_kwargs()
        if kwargs is None or "documents" not in (kwargs.model_extra or {}):
            return self
        assert self.extra_body is not None
        if self.extra_body.documents is not None:
            raise ValueError(
                "documents are given twice: in extra_body.documents and in chat_template_kwargs"
            )
        args = kwargs.model_dump()
        documents = args.pop("documents")
        if not isinstance(documents, list):
            raise ValueError("chat_template_kwargs.documents must be a list")
        self.extra_body.documents = [Document.model_validate(d) for d in documents]
        self.extra_body.chat_template_kwargs = ChatTemplateKwargs.model_validate(args)
        return self


class Logprob(pydantic.BaseModel, NoDefaultsMixin):
    """A prompt token's log-probability (vLLM's ``prompt_logprobs`` entries)."""

    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


class ChatCompletionLogProb(pydantic.BaseModel, NoDefaultsMixin):
    """One token and its log-probability."""

    token: str
    logprob: float = -9999.0
    bytes: list[int] | None = None


class ChatCompletionLogProbsContent(ChatCompletionLogProb):
    """A generated token with its most likely alternatives."""

    top_logprobs: list[ChatCompletionLogProb] = Field(default_factory=list)


class ChatCompletionLogProbs(pydantic.BaseModel, NoDefaultsMixin):
    """A choice's ``logprobs``: one entry per generated token."""

    content: list[ChatCompletionLogProbsContent] | None = None


class ChatCompletionResponseChoice(pydantic.BaseModel, NoDefaultsMixin):
    """One choice of a response."""

    index: int
    message: ChatMessage
    logprobs: ChatCompletionLogProbs | None = None
    finish_reason: str | None = "stop"


class ChatCompletionResponse(pydantic.BaseModel, NoDefaultsMixin):
    """A chat completion response (its choices; other fields pass through)."""

    choices: list[ChatCompletionResponseChoice]
    prompt_logprobs: list[dict[int, Logprob] | None] | None = None

    model_config = pydantic.ConfigDict(extra="allow")


__all__ = [
    "AssistantMessage",
    "ChatAssistantMessage",
    "ChatCompletion",
    "ChatCompletionBody",
    "ChatCompletionLogProb",
    "ChatCompletionLogProbs",
    "ChatCompletionLogProbsContent",
    "ChatCompletionResponse",
    "ChatCompletionResponseChoice",
    "ChatDocument",
    "ChatMessage",
    "ChatTemplateKwargs",
    "ChatToolCall",
    "DeveloperMessage",
    "Document",
    "DocumentMessage",
    "GraniteChatCompletion",
    "Logprob",
    "NoDefaultsMixin",
    "SystemMessage",
    "ToolCall",
    "ToolDefinition",
    "ToolResultMessage",
    "UserMessage",
    "VLLMExtraBody",
]

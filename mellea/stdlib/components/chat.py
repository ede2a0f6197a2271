"""Chat messages as context components."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Literal, get_args

from mellea.core.base import CBlock, Component, Context, Span, TemplateRepresentation

if TYPE_CHECKING:
    from mellea.core.thunk import ModelOutputThunk

Role = Literal["system", "user", "assistant", "tool"]


class Message(Component["Message"]):
    """One chat turn: a role and its text, with optional images, audio and documents.

    ``thunk`` (ours, not upstream's) links a model's reply to the generation that
    produced it; ``text`` is the content, or the thunk's text once it is computed.
    """

    Role = Role

    def __init__(
        self,
        role: Role,
        content: str | None = None,
        thunk: ModelOutputThunk | None = None,
        *,
        images: list[Any] | None = None,
        audio: list[Any] | None = None,
        documents: Iterable[Any] | None = None,
        tool_calls: list[dict[str, Any]] | None = None,
        tool_call_id: str | None = None,
        thinking: str | None = None,
    ) -> None:
        if role not in get_args(Role):
            raise ValueError(f"invalid role {role!r}; use one of {', '.join(get_args(Role))}")
        self.role = role
        self.content = content
        self.thunk = thunk
        self.thinking = thinking
        self._images = images
        self._audio = audio
        self._docs = _documents(documents)
        self._tool_calls = tool_calls
        self._tool_call_id = tool_call_id

    @property
    def images(self) -> list[Any] | None:
        """Images attached to the message."""
        return self._images

    @property
    def audio(self) -> list[Any] | None:
        """Audio attached to the message."""
        return self._audio

    @property
    def tool_calls(self) -> list[dict[str, Any]] | None:
        """OpenAI-style tool calls an assistant message made."""
        return self._tool_calls

    @property
    def tool_call_id(self) -> str | None:
        """For a ``tool`` message, the id of the call it answers."""
        return self._tool_call_id

    @property
    def text(self) -> str:
        """The message's text (documents appended); for a model turn still streaming,
        ``""`` until done."""
        text = ""
        if self.content is not None:
            text = self.content
        elif self.thunk is not None and self.thunk.value is not None:
            text = self.thunk.value
        if self._docs:
            text = "\n\n".join([text, *(d.format_for_llm() for d in self._docs)])
        return text

    def parts(self) -> list[Span]:
        """The content block, then any documents, images and audio."""
        parts: list[Any] = [CBlock(self.text)]
        for extra in (self._docs, self._images, self._audio):
            parts.extend(extra or [])
        return parts

    def format_for_llm(self) -> TemplateRepresentation:
        """The message's parts for a formatter."""
        return TemplateRepresentation(
            obj=self,
            args={"content": self.content, "documents": self._docs},
            template_order=["*", "Message"],
            images=self._images,
            audio=self._audio,
            role=self.role,
            thinking=self.thinking,
            tool_calls=self._tool_calls,
            tool_call_id=self._tool_call_id,
        )

    def _parse(self, computed: ModelOutputThunk) -> Message:
        return Message("assistant", computed.value or "", computed)

    def as_dict(self) -> dict[str, Any]:
        """The message as an OpenAI-style chat message (text only)."""
        message: dict[str, Any] = {"role": self.role, "content": self.text}
        if self._tool_calls:
            message["tool_calls"] = self._tool_calls
        if self._tool_call_id:
            message["tool_call_id"] = self._tool_call_id
        return message

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Message):
            return NotImplemented
        return (self.role, self.text) == (other.role, other.text)

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return f"Message(role={self.role!r}, content={self.text!r})"


class ToolMessage(Message):
    """The result of a tool call, sent back to the model as a ``tool`` turn."""

    def __init__(
        self,
        role: Role,
        content: str,
        tool_output: Any,
        name: str,
        args: dict[str, Any],
        tool: Any,
    ) -> None:
        super().__init__(role, content, tool_call_id=getattr(tool, "id", None))
        self.name = name
        self.arguments = args
        self.tool_output = tool_output
        self.tool = tool


def _documents(documents: Iterable[Any] | None) -> list[Any] | None:
    """Plain strings become :class:`~mellea.stdlib.components.docs.Document` s."""
    if documents is None:
        return None
    from mellea.stdlib.components.docs import Document

    return [d if isinstance(d, Document) else Document(str(d)) for d in documents]


def as_chat_history(ctx: Context) -> list[Message]:
    """The context's turns as messages (a model output becomes an assistant message)."""
    from mellea.core.thunk import ModelOutputThunk

    history: list[Message] = []
    for item in ctx.as_list():
        if isinstance(item, Message):
            history.append(item)
        elif isinstance(item, ModelOutputThunk):
            history.append(Message("assistant", item.value or "", item))
        elif isinstance(item, CBlock):
            history.append(Message("user", item.value or ""))
        else:
            raise ValueError(f"cannot show {type(item).__name__} as a chat message")
    return history


def _stringify(item: Any) -> str:
    return str(item)


def as_generic_chat_history(
    ctx: Context, formatter: Callable[[object], str] | None = None
) -> list[Message]:
    """The context's spans as messages, whatever they are.

    Messages stay as they are; a model output becomes an assistant message (its
    parsed ``Message`` when it has one, else its text, else ``formatter(parsed)``);
    a plain ``CBlock`` a user message with its text; anything else (a ``CBlock``
    subclass, another component) a message with ``formatter(item)`` as content and
    the component's own role, or ``user``. ``formatter`` defaults to ``str``.
    """
    from mellea.core.thunk import ModelOutputThunk

    fmt = formatter or _stringify

    def to_message(item: Any) -> Message:
        if isinstance(item, Message):
            return item
        if isinstance(item, ModelOutputThunk):
            parsed = item.parsed_repr
            if isinstance(parsed, Message):
                return parsed
            if isinstance(parsed, str):
                return Message("assistant", parsed)
            if parsed is None:
                if item.value is None:
                    raise ValueError("a model output in the context has no value yet")
                return Message("assistant", item.value)
            return Message("assistant", fmt(parsed))
        if type(item) is CBlock:
            return Message("user", item.value or "")
        role = getattr(item, "role", None)
        if isinstance(item, Component) and not isinstance(item, CBlock):
            rep = item.format_for_llm()
            if isinstance(rep, TemplateRepresentation) and rep.role:
                role = rep.role
        return Message(role if role in get_args(Role) else "user", fmt(item))

    return [to_message(item) for item in ctx.as_list()]

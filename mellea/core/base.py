"""Upstream mellea's core types: content blocks, components, contexts and tools.

A :class:`Context` is an immutable linked list of *spans*: a :class:`CBlock` (plain
text), a :class:`Component` (something that renders itself for the model, such as
a chat ``Message`` or an ``Instruction``) or a :class:`ModelOutputThunk` (what the
model said). Adding to a context returns a new one and shares the older nodes, so
an ``add`` costs the same however long the history is.
"""

from __future__ import annotations

import abc
import datetime
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, Protocol, TypeVar, runtime_checkable

if TYPE_CHECKING:
    from pydantic import BaseModel

from mellea.core.content import CBlock
from mellea.core.thunk import ComputedModelOutputThunk, ModelOutputThunk
from mellea.core.tool_call import ModelToolCall

S = TypeVar("S", covariant=True)
C = TypeVar("C")
BaseModelSubclass = TypeVar("BaseModelSubclass", bound="BaseModel")  # a pydantic model class


class ComponentParseError(Exception):
    """A component could not turn the model's output into its result type."""


@runtime_checkable
class Component(Protocol[S]):
    """Something that renders itself for a model and parses the model's answer."""

    def parts(self) -> list[Span]:
        """The component's constituent blocks and sub-components."""
        raise NotImplementedError("parts is not implemented by default")

    def format_for_llm(self) -> TemplateRepresentation | str:
        """The component as the model should see it."""
        raise NotImplementedError("format_for_llm is not implemented by default")

    def parse(self, computed: ModelOutputThunk) -> S:
        """The component's result, read from a computed model output."""
        try:
            return self._parse(computed)
        except Exception as exc:
            raise ComponentParseError(f"component parsing failed: {exc}") from exc

    def _parse(self, computed: ModelOutputThunk) -> S:
        raise NotImplementedError("parse is not implemented by default")


Span = Component | CBlock | ModelOutputThunk


@dataclass
class TemplateRepresentation:
    """A component's parts as named arguments, for a formatter to render."""

    obj: Any
    args: dict[str, Any]
    tools: dict[str, AbstractMelleaTool] | None = None
    fields: list[Any] | None = None
    template: str | None = None
    template_order: list[str] | None = None
    images: list[Any] | None = None
    audio: list[Any] | None = None
    role: str | None = None
    thinking: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None


@dataclass
class ContextTurn:
    """One turn of a context: the model's input and its output (either may be missing)."""

    model_input: Span | None
    output: ModelOutputThunk | Component | None


ContextT = TypeVar("ContextT", bound="Context")


class Context(abc.ABC):
    """An immutable history of spans; :meth:`add` returns a new context.

    Subclasses decide what :meth:`add` keeps and what :meth:`view_for_generation`
    shows the model.
    """

    _is_chat_context: bool = True

    def __init__(self) -> None:
        self._previous: Context | None = None
        self._data: Span | None = None
        self._is_root = True

    @classmethod
    def from_previous(cls: type[ContextT], previous: Context, data: Span) -> ContextT:
        """A new node holding ``data`` after ``previous``."""
        if not isinstance(previous, Context):
            raise TypeError("a context can only follow another context")
        if data is None:
            raise ValueError("a context node needs data")
        node = cls()
        node._previous = previous
        node._data = data
        node._is_root = False
        node._is_chat_context = previous._is_chat_context
        return node

    @classmethod
    def reset_to_new(cls: type[ContextT]) -> ContextT:
        """An empty context of this class."""
        return cls()

    def new_instance(self) -> Context:
        """An empty context like this one (subclasses keep their settings)."""
        return self.reset_to_new()

    @property
    def is_root_node(self) -> bool:
        """Whether this is the empty root."""
        return self._is_root

    @property
    def previous_node(self) -> Context | None:
        """The context this one was made from."""
        return self._previous

    @property
    def node_data(self) -> Span | None:
        """The span this node added."""
        return self._data

    @property
    def is_chat_context(self) -> bool:
        """Whether the context is a chat (multi-turn) context."""
        return self._is_chat_context

    def as_list(self, last_n_components: int | None = None) -> list[Span]:
        """The spans, oldest first; only the newest ``last_n_components`` when given."""
        items: list[Span] = []
        node: Context | None = self
        while node is not None and not node._is_root:
            if last_n_components is not None and len(items) >= last_n_components:
                break
            assert node._data is not None
            items.append(node._data)
            node = node._previous
        items.reverse()
        return items

    @property
    def turns(self) -> tuple[Span, ...]:
        """Every span kept so far (``as_list()`` as a tuple)."""
        return tuple(self.as_list())

    def actions_for_available_tools(self) -> list[Span] | None:
        """The spans whose tools are offered during generation."""
        return self.view_for_generation()

    def last_output(self, check_last_n_components: int = 3) -> ModelOutputThunk | None:
        """The newest model output among the last ``check_last_n_components`` spans."""
        for item in reversed(self.as_list(check_last_n_components)):
            if isinstance(item, ModelOutputThunk):
                return item
        return None

    def last_turn(self) -> ContextTurn | None:
        """The newest input/output turn; the output is ``None`` if the last span is an input."""
        history = self.as_list(2)
        if not history:
            return None
        last = history[-1]
        if _is_output(last):
            return ContextTurn(history[0] if len(history) == 2 else None, last)  # type: ignore[arg-type]
        return ContextTurn(last, None)

    def last_turn_text(self) -> str | None:
        """The text of the newest span, if any."""
        items = self.as_list(1)
        return span_text(items[0]) if items else None

    @abc.abstractmethod
    def add(self, c: Span) -> Context:
        """A new context with ``c`` appended."""

    @abc.abstractmethod
    def view_for_generation(self) -> list[Span] | None:
        """The spans the model sees before the next action."""


def _is_output(item: Any) -> bool:
    if isinstance(item, ModelOutputThunk):
        return True
    return getattr(item, "role", None) == "assistant" and isinstance(item, Component)


def span_text(item: Any) -> str:
    """The text of a span as a chat turn would carry it."""
    if isinstance(item, ModelOutputThunk):
        return item.value or ""
    if isinstance(item, CBlock):
        return item.value or ""
    content = getattr(item, "text", None)
    if isinstance(content, str):
        return content
    if isinstance(item, Component):
        rendered = item.format_for_llm()
        if isinstance(rendered, str):
            return rendered
        return render_representation(rendered)
    return str(item)


def render_representation(rep: TemplateRepresentation) -> str:
    """A template representation as text: its ``template`` (Jinja) filled with its
    args, else its ``content`` arg, else its args as ``name: value`` lines.

    Args that are spans are rendered first, so a component can hold another.
    """
    args = {k: span_text(v) if _is_span(v) else v for k, v in rep.args.items()}
    if rep.template:
        import jinja2

        return jinja2.Template(rep.template).render(**args)
    if "content" in args:
        return str(args["content"] or "")
    return "\n".join(f"{k}: {v}" for k, v in args.items())


def _is_span(value: Any) -> bool:
    return isinstance(value, CBlock | ModelOutputThunk) or (
        isinstance(value, Component) and not isinstance(value, type)
    )


P = ParamSpec("P")
R = TypeVar("R")


class AbstractMelleaTool(abc.ABC, Generic[P, R]):
    """A tool a model can call: a name, a JSON description and :meth:`run`."""

    name: str

    @abc.abstractmethod
    def run(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Run the tool."""

    @property
    @abc.abstractmethod
    def as_json_tool(self) -> dict[str, Any]:
        """The tool in the OpenAI ``{"type": "function", ...}`` form."""


@dataclass
class GenerateLog:
    """What one generation was asked and produced (kept for upstream compatibility)."""

    date: datetime.datetime | None = None
    prompt: str | list[dict[str, Any]] | None = None
    backend: str | None = None
    model_options: dict[str, Any] | None = None
    model_output: Any | None = None
    action: Any | None = None
    result: ModelOutputThunk | None = None
    is_final_result: bool | None = False
    extra: dict[str, Any] | None = None


def blockify(s: str | Span) -> Span:
    """A plain string as a :class:`CBlock`; a span unchanged."""
    if isinstance(s, str):
        return CBlock(s)
    if isinstance(s, CBlock | ModelOutputThunk | Component):
        return s
    raise TypeError(f"cannot turn {type(s).__name__} into a content block")


__all__ = [
    "AbstractMelleaTool",
    "BaseModelSubclass",
    "C",
    "CBlock",
    "Component",
    "ComponentParseError",
    "ComputedModelOutputThunk",
    "Context",
    "ContextTurn",
    "GenerateLog",
    "ModelOutputThunk",
    "ModelToolCall",
    "S",
    "Span",
    "TemplateRepresentation",
    "blockify",
    "render_representation",
    "span_text",
]

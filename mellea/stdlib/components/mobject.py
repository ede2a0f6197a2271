"""MObjects: Python objects a model can be asked about (``Query``) or asked to change
(``Transform``), with the object's documented methods offered as tools."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from mellea.core.base import (
    Component,
    ComponentParseError,
    Span,
    TemplateRepresentation,
    render_representation,
)
from mellea.core.thunk import ModelOutputThunk

QUERY_TEMPLATE = (
    "For the following object please execute the following query.\n"
    "Object:\n{{ content }}\n\nQuery:\n{{ query }}"
)
TRANSFORM_TEMPLATE = (
    "For the following object please execute the following transformation. "
    "The output you provide should be the same type as the object provided:\n"
    "Object:\n{{ content }}\n\nTransformation:\n{{ transformation }}"
)


def _object_tools_and_fields(obj: Component) -> tuple[dict[str, Any] | None, list[Any] | None]:
    """The tools and fields of ``obj``'s template representation (none for plain text)."""
    rep = obj.format_for_llm()
    if isinstance(rep, TemplateRepresentation):
        return rep.tools, rep.fields
    return None, None


class _ObjectRequest(Component[str]):
    """Asks the model something about an object; the object's tools come along.

    Subclasses name the argument that carries the request, the template and the
    template order, and may show the object differently (``_object_args``)."""

    _arg_name: str
    _template: str
    _template_order: tuple[str, ...]

    def __init__(self, obj: Component, request: str) -> None:
        self._obj = obj
        self._request = request

    def parts(self) -> list[Span]:
        """The object asked about."""
        return [self._obj]

    def format_for_llm(self) -> TemplateRepresentation:
        """The object and the request, with the object's tools and fields."""
        tools, fields = _object_tools_and_fields(self._obj)
        return TemplateRepresentation(
            obj=self,
            args={self._arg_name: self._request, **self._object_args()},
            tools=tools,
            fields=fields,
            template=self._template,
            template_order=list(self._template_order),
        )

    def _object_args(self) -> dict[str, Any]:
        """The template arguments that show the object."""
        return {"content": self._obj}

    @property
    def text(self) -> str:
        """The prompt text."""
        return render_representation(self.format_for_llm())

    def _parse(self, computed: ModelOutputThunk) -> str:
        return computed.value or ""


class Query(_ObjectRequest):
    """A question about an object; the object's tools come along."""

    _arg_name = "query"
    _template = QUERY_TEMPLATE
    _template_order = ("Query",)

    def __init__(self, obj: Component, query: str) -> None:
        super().__init__(obj, query)
        self._query = query


class Transform(_ObjectRequest):
    """A request to change an object; the object's tools come along."""

    _arg_name = "transformation"
    _template = TRANSFORM_TEMPLATE
    _template_order = ("Transform",)

    def __init__(self, obj: Component, transformation: str) -> None:
        super().__init__(obj, transformation)
        self._transformation = transformation


@runtime_checkable
class MObjectProtocol(Protocol):
    """What query and transform need of an object."""

    def parts(self) -> list[Span]:
        """Sub-parts (none for a plain object)."""
        ...

    def get_query_object(self, query: str) -> Query:
        """The component asking ``query`` about this object."""
        ...

    def get_transform_object(self, transformation: str) -> Transform:
        """The component asking for ``transformation`` of this object."""
        ...

    def content_as_string(self) -> str:
        """The object as text."""
        ...

    def _get_all_members(self) -> dict[str, Callable]:
        """The methods offered to the model as tools."""
        ...

    def format_for_llm(self) -> TemplateRepresentation | str:
        """The object as the model sees it."""
        ...

    def _parse(self, computed: ModelOutputThunk) -> str:
        """The model's answer as text."""
        ...


def public_methods(obj: Any, base: Any = object) -> dict[str, Callable]:
    """Methods and functions of ``obj`` that ``base`` does not have."""
    import inspect

    inherited = {name for name, _ in inspect.getmembers(base)}
    return {
        name: member
        for name, member in inspect.getmembers(
            obj, lambda m: inspect.ismethod(m) or inspect.isfunction(m)
        )
        if member.__name__ not in inherited
    }


def documented(methods: dict[str, Callable]) -> dict[str, Callable]:
    """The methods with a docstring that does not say ``[no-index]``."""
    return {
        name: fn
        for name, fn in methods.items()
        if fn.__doc__ is not None and "[no-index]" not in fn.__doc__
    }


class MObjectMethods:
    """The MObject methods that ``MObject`` and ``mify`` share: no sub-parts, the
    query and transform components, and parsing the answer as text."""

    _query_type: type
    _transform_type: type

    def parts(self) -> list[Span]:
        """No sub-parts.

        [no-index]
        """
        return []

    def get_query_object(self, query: str) -> Query:
        """The component asking ``query`` about this object.

        [no-index]
        """
        return self._query_type(self, query)

    def get_transform_object(self, transformation: str) -> Transform:
        """The component asking for ``transformation`` of this object.

        [no-index]
        """
        return self._transform_type(self, transformation)

    def _parse(self, computed: ModelOutputThunk) -> str:
        """The model's answer as text.

        [no-index]
        """
        return computed.value or ""

    def parse(self, computed: ModelOutputThunk) -> str:
        """The model's answer as text.

        [no-index]
        """
        try:
            return self._parse(computed)
        except Exception as exc:
            raise ComponentParseError(f"component parsing failed: {exc}") from exc


def member_tools(members: dict[str, Callable]) -> dict[str, Any]:
    """The methods as tools the model can call, by name."""
    from mellea.backends.tools import MelleaTool

    return {name: MelleaTool.from_callable(fn, name) for name, fn in members.items()}


class MObject(MObjectMethods, Component[str]):
    """A base class for objects a model can query and transform.

    Its documented methods (those without ``[no-index]`` in the docstring) are
    offered as tools; ``query_type`` / ``transform_type`` choose the components
    that ask about it.
    """

    def __init__(self, *, query_type: type = Query, transform_type: type = Transform) -> None:
        self._query_type = query_type
        self._transform_type = transform_type

    def content_as_string(self) -> str:
        """The object as text (``str(self)``).

        [no-index]
        """
        return str(self)

    def _get_all_members(self) -> dict[str, Callable]:
        return documented(public_methods(self, MObject))

    def format_for_llm(self) -> TemplateRepresentation | str:
        """The object's text, with its methods as tools.

        [no-index]
        """
        return TemplateRepresentation(
            obj=self,
            args={"content": self.content_as_string()},
            tools=member_tools(self._get_all_members()),
            fields=[],
            template_order=["*", "MObject"],
        )


__all__ = ["MObject", "MObjectProtocol", "Query", "Transform"]

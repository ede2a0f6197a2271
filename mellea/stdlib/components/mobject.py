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
    rep = obj.format_for_llm()
    if isinstance(rep, TemplateRepresentation):
        return rep.tools, rep.fields
    return None, None


class Query(Component[str]):
    """A question about an object; the object's tools come along."""

    def __init__(self, obj: Component, query: str) -> None:
        self._obj = obj
        self._query = query

    def parts(self) -> list[Span]:
        """The object asked about."""
        return [self._obj]

    def format_for_llm(self) -> TemplateRepresentation:
        """The object and the question, with the object's tools and fields."""
        tools, fields = _object_tools_and_fields(self._obj)
        return TemplateRepresentation(
            obj=self,
            args={"query": self._query, "content": self._obj},
            tools=tools,
            fields=fields,
            template=QUERY_TEMPLATE,
            template_order=["Query"],
        )

    @property
    def text(self) -> str:
        """The prompt text."""
        return render_representation(self.format_for_llm())

    def _parse(self, computed: ModelOutputThunk) -> str:
        return computed.value or ""


class Transform(Component[str]):
    """A request to change an object; the object's tools come along."""

    def __init__(self, obj: Component, transformation: str) -> None:
        self._obj = obj
        self._transformation = transformation

    def parts(self) -> list[Span]:
        """The object to change."""
        return [self._obj]

    def format_for_llm(self) -> TemplateRepresentation:
        """The object and the transformation, with the object's tools and fields."""
        tools, fields = _object_tools_and_fields(self._obj)
        return TemplateRepresentation(
            obj=self,
            args={"transformation": self._transformation, "content": self._obj},
            tools=tools,
            fields=fields,
            template=TRANSFORM_TEMPLATE,
            template_order=["Transform"],
        )

    @property
    def text(self) -> str:
        """The prompt text."""
        return render_representation(self.format_for_llm())

    def _parse(self, computed: ModelOutputThunk) -> str:
        return computed.value or ""


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


class MObject(Component[str]):
    """A base class for objects a model can query and transform.

    Its documented methods (those without ``[no-index]`` in the docstring) are
    offered as tools; ``query_type`` / ``transform_type`` choose the components
    that ask about it.
    """

    def __init__(self, *, query_type: type = Query, transform_type: type = Transform) -> None:
        self._query_type = query_type
        self._transform_type = transform_type

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
        from mellea.backends.tools import MelleaTool

        return TemplateRepresentation(
            obj=self,
            args={"content": self.content_as_string()},
            tools={k: MelleaTool.from_callable(f, k) for k, f in self._get_all_members().items()},
            fields=[],
            template_order=["*", "MObject"],
        )

    def _parse(self, computed: ModelOutputThunk) -> str:
        return computed.value or ""

    def parse(self, computed: ModelOutputThunk) -> str:
        """The model's answer as text.

        [no-index]
        """
        try:
            return self._parse(computed)
        except Exception as exc:
            raise ComponentParseError(f"component parsing failed: {exc}") from exc


__all__ = ["MObject", "MObjectProtocol", "Query", "Transform"]
